"""Small helpers shared by the service tests."""

from __future__ import annotations

import functools
import os
import time

from pdserve.common.readiness import wait_for
from pdserve.common.scrape import scrape  # noqa: F401  (a plain-HTTP page; a stack's: Stack.scrape)

REFERENCE_WORK_S = 0.015  # the work below, on the 2-core development machine with a core to spare


@functools.cache
def machine_factor() -> float:
    """How many times slower than the idle development machine this one runs now, at least 1 (or
    $PDSERVE_TEST_TIME_FACTOR): the median of nine runs of a fixed piece of Python work (the best would hide a
    busy machine: one run fits in a scheduler time slice). Every timeout of the stack
    tests is multiplied by it, so a busy or slow machine gets the time it needs, and a failure on a fast one is
    reported as soon as before."""
    if os.environ.get("PDSERVE_TEST_TIME_FACTOR"):
        return float(os.environ["PDSERVE_TEST_TIME_FACTOR"])
    runs = []
    for _ in range(9):
        start = time.perf_counter()
        sum(i * i for i in range(300_000))
        runs.append(time.perf_counter() - start)
    return max(1.0, sorted(runs)[4] / REFERENCE_WORK_S)


def scaled(timeout_s: float) -> float:
    """A timeout for this machine as it runs now (see :func:`machine_factor`)."""
    return timeout_s * machine_factor()


def wait_until(condition, timeout_s: float = 15.0, what: str = "condition", process=None, log_tail=lambda: ""):
    """Poll ``condition()`` until it is truthy (common.readiness.wait_for), the timeout scaled to the machine."""
    return wait_for(condition, scaled(timeout_s), what, process, log_tail)


def reference(runtime, prompts: list[list[int]], params_list):
    """Outputs of the in-process engine for the same prompts and parameters."""
    from pdserve.engine.llm_engine import LLMEngine

    return LLMEngine(runtime).generate(prompts, params_list)


def kv_leases(stack) -> int:
    """Leases held across a stack's kvstore shards (asked as the admin identity)."""
    import asyncio

    async def count() -> int:
        kv = stack.kv_client("admin")
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


def without_frontend(directory) -> list[str]:
    """Worker flags that drop the modeled deployment's per-request front end (a calibration file with it zero): a
    worker paced at a large time scale would otherwise hold each request for seconds before its prompt's steps."""
    import json

    from pdserve.perfmodel.calibration import FORMAT, deployment_text, table_key
    from pdserve.perfmodel.deployment import Deployment

    path = directory / "no-frontend.json"
    d = Deployment()
    path.write_text(json.dumps({"format": FORMAT, "deployment": deployment_text(d), "table_key": table_key(d),
                                "parameters": {"request_overhead_s": 0.0}}))
    return ["--calibration", str(path)]


def start_stack(**spec_kwargs):
    """A stack of the given StackSpec, started (SERVING); the caller stops it."""
    from pdserve.launcher.stack import Stack, StackSpec

    return Stack(StackSpec(**spec_kwargs)).start(timeout_s=scaled(120))


def decode_load(stack, decode):
    """A decode worker's load report (GetLoad, asked as the admin identity); ``decode``: a Process or a target."""
    from pdserve.v1 import common_pb2, decode_pb2_grpc

    with stack.channel(decode, "admin") as ch:
        return decode_pb2_grpc.DecodeStub(ch).GetLoad(common_pb2.LoadRequest())


def processes_mentioning(text: str) -> list[int]:
    """Pids of the processes whose command line contains ``text`` (to check that nothing is left running)."""
    from pathlib import Path

    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def pdserve_up(args: list[str], until: str, python: str | None = None, cwd=None):
    """Start ``pdserve up ARGS`` and read its output until a line starting with ``until``; returns (process, the lines
    read). Raises with what it printed if it stops first. The caller stops it (SIGINT or SIGTERM). ``python``: another
    interpreter (an installed pdserve); ``cwd``: where it runs (the checkout by default)."""
    import subprocess
    import sys

    from tests import REPO_ROOT

    proc = subprocess.Popen([python or sys.executable, "-m", "pdserve.cli.main", "up", *args], cwd=cwd or REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(until):
            return proc, lines
    proc.wait()
    raise RuntimeError(f"pdserve up stopped (exit {proc.returncode}):\n" + "".join(lines))


def lease_alive(stack, lease_id: str) -> bool:
    """Whether a lease is still held in the stack's first kvstore: an Acquire of no keys under it, as the router
    (refused with FAILED_PRECONDITION once it expired or was released; it leases nothing, so it extends nothing).
    One lease, not the count: a shared stack's other tests may hold leases of their own."""
    import grpc

    from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc

    with stack.channel(stack.kvstores[0], "router") as ch:
        try:
            kvstore_pb2_grpc.KVStoreStub(ch).Acquire(
                kvstore_pb2.AcquireRequest(lease_id=lease_id, lease_ttl_s=1.0), timeout=10)
            return True
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            return False


def router_lease(stack, ttl_s: float = 30.0) -> str:
    """A lease made in the stack's kvstores as the router makes one per request (as the router identity); its id."""
    import asyncio
    import uuid

    lease_id = uuid.uuid4().hex

    async def make() -> None:
        kv = stack.kv_client("router")
        try:
            await kv.create_lease(lease_id, ttl_s)
        finally:
            await kv.close()
    asyncio.run(make())
    return lease_id


def prefill_directly(stack, prompt: list[int], sampling, request_id: str = "direct", lease_ttl_s: float = 30.0,
                     **fields):
    """A Prefill call made as the router makes it: a lease created first, then Prefill as the router identity. The
    reply's KV handle can be given to a Decode call (as the router too)."""
    from pdserve.v1 import prefill_pb2, prefill_pb2_grpc

    lease_id = router_lease(stack, lease_ttl_s)
    with stack.channel(stack.prefills[0], "router") as ch:
        return prefill_pb2_grpc.PrefillStub(ch).Prefill(prefill_pb2.PrefillRequest(
            request_id=request_id, token_ids=prompt, sampling=sampling, lease_id=lease_id, lease_ttl_s=lease_ttl_s,
            **fields))
