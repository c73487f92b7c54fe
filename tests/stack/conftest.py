"""Stacks shared by the stack tests: one per session where the tests only read (send requests, read metrics); a test
that kills, restarts or reconfigures a process, or leaves state behind (leases to expire), starts its own with
tests.helpers.start_stack or a module fixture."""

from __future__ import annotations

import pytest

from tests.helpers import start_stack

CHUNK = 32  # the chunked stack's prefill --max-num-batched-tokens: a 100-token prompt takes 4 steps


@pytest.fixture(scope="session")
def tiny_stack(tiny_model_path):
    """kvstore + 1 prefill + 1 decode + router on the tiny model, with metrics and fault injection on."""
    stack = start_stack(model=str(tiny_model_path), metrics=True, fault_injection=True)
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def chunked_stack(tiny_model_path):
    """The tiny model's stack with prefill in chunks of CHUNK tokens: each chunk's blocks stored as it finishes (one per
    module: its tests leave leases to expire)."""
    stack = start_stack(model=str(tiny_model_path), metrics=True,
                        extra={"prefill": ["--max-num-batched-tokens", str(CHUNK)]})
    yield stack
    stack.stop()


@pytest.fixture(scope="session")
def long_stack(tiny_long_model_path):
    """The tiny model with a 4,096-token context, metrics and the OpenAI edge."""
    stack = start_stack(model=str(tiny_long_model_path), metrics=True, http_port=0)
    yield stack
    stack.stop()


TENANTS = {"alice": "alice-token-0001", "mallory": "mallory-token-02"}


@pytest.fixture(scope="session")
def tenant_stack(tiny_long_model_path):
    """The secured stack (as pdserve up starts it) with two tenants, the HTTP edge, metrics and the test identity
    (fault injection): what the security tests attack. Its tests leave no state another one reads."""
    stack = start_stack(model=str(tiny_long_model_path), metrics=True, fault_injection=True, tenant_tokens=TENANTS,
                        http_port=0)
    yield stack
    stack.stop()
