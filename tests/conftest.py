from __future__ import annotations

from pathlib import Path

import pytest

from pdserve.engine.default_model import default_model_path
from pdserve.engine.runtime import Runtime
from tests.tiny_model import write_tiny_model


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_runtime(tiny_model_path) -> Runtime:
    return Runtime.load(tiny_model_path)


@pytest.fixture(scope="session")
def real_model_path() -> Path:
    return default_model_path()


@pytest.fixture(scope="session")
def real_runtime(real_model_path) -> Runtime:
    return Runtime.load(real_model_path)


@pytest.fixture(scope="session")
def tiny_long_model_path(tmp_path_factory) -> Path:
    """The tiny model with a 4096-token context, for long generations."""
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny-long.gguf", context=4096)


def start_stack(**spec_kwargs):
    from pdserve.launcher.stack import Stack, StackSpec

    return Stack(StackSpec(**spec_kwargs)).start()


CHUNK = 32  # the chunked stack's prefill --max-num-batched-tokens: a 100-token prompt takes 4 steps


@pytest.fixture(scope="module")
def chunked_stack(tiny_model_path):
    """The tiny model's stack with prefill in chunks of CHUNK tokens: each chunk's blocks stored as it finishes."""
    stack = start_stack(model=str(tiny_model_path), metrics=True,
                        extra={"prefill": ["--max-num-batched-tokens", str(CHUNK)]})
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def tiny_stack(tiny_model_path):
    """kvstore + 1 prefill + 1 decode + router on the tiny model, with fault injection on."""
    stack = start_stack(model=str(tiny_model_path), fault_injection=True)
    yield stack
    stack.stop()
