"""Small helpers shared by the service tests."""

from __future__ import annotations

import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample of a /metrics page as {(name, sorted labels): value}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def wait_until(condition, timeout_s: float = 15.0, what: str = "condition"):
    """Poll until condition() is truthy; the timeout only bounds a failure, it is not a speed assertion."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout_s}s (last value {value!r})")
        time.sleep(0.05)


def reference(runtime, prompts: list[list[int]], params_list):
    """Outputs of the in-process engine for the same prompts and parameters."""
    from pdserve.engine.llm_engine import LLMEngine

    return LLMEngine(runtime).generate(prompts, params_list)


def kv_leases(stack) -> int:
    """Leases held across a stack's kvstore shards."""
    import asyncio

    from pdserve.kvstore.client import KVStoreClient

    async def count() -> int:
        kv = KVStoreClient([p.target for p in stack.kvstores])
        try:
            return sum(s.leases for s in await kv.stats())
        finally:
            await kv.close()
    return asyncio.run(count())


def require_tool(tool: str, package: str) -> str:
    """The path of a system tool; skip the test (with what to install) where it is missing, fail under CI=true."""
    import os
    import shutil

    import pytest

    path = shutil.which(tool)
    if path is None:
        message = f"{tool} not found: install the Debian package '{package}' (scripts/test.sh does when run as root)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
