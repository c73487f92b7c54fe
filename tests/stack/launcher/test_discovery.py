"""The router finds worker replicas behind a DNS name: one worker per address, re-resolved as replicas come and go."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pdserve.common.readiness import grpc_serving, wait_for
from pdserve.launcher.ports import free_port
from pdserve.router.workers import decode_pool, is_discovered, split_target
from pdserve.v1 import common_pb2
from tests import REPO_ROOT

ROOT = REPO_ROOT


def test_names_are_discovered_and_addresses_are_fixed():
    assert is_discovered("decode.pdserve.svc.cluster.local")
    assert not is_discovered("10.0.0.7") and not is_discovered("::1") and not is_discovered("localhost")
    assert split_target("[::1]:50071") == ("::1", 50071)
    with pytest.raises(ValueError, match="host:port"):
        split_target("decode")


def port_free_on(port: int, *hosts: str) -> bool:
    try:
        for host in hosts:
            with socket.socket() as s:
                s.bind((host, port))
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def two_replicas(tiny_model_path, tmp_path_factory):
    """Two decode workers on one port at two loopback addresses: what a name with two A records points at."""
    port = next(p for p in iter(free_port, None) if port_free_on(p, "127.0.0.1", "127.0.0.2"))
    logs = tmp_path_factory.mktemp("replicas")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    procs = []
    try:
        for host in ("127.0.0.1", "127.0.0.2"):
            log = logs / f"decode-{host}.log"
            procs.append((subprocess.Popen(
                [sys.executable, "-m", "pdserve.decode_server", "--model", str(tiny_model_path), "--kvstore", "",
                 "--host", host, "--port", str(port), "--insecure-internal"], env=env, cwd=ROOT, stdout=log.open("w"),
                stderr=subprocess.STDOUT), log))
            wait_serving(f"{host}:{port}", *procs[-1])
        yield port
    finally:
        for proc, _ in procs:
            proc.terminate()
        for proc, _ in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_serving(target: str, proc: subprocess.Popen, log: Path) -> None:
    wait_for(lambda: grpc_serving(target), 120, f"{target} SERVING", proc, log.read_text)


def test_router_pool_follows_the_addresses_a_name_resolves_to(two_replicas):
    port = two_replicas
    answers = {"decode.test": ["127.0.0.1", "127.0.0.2"]}
    asked = []

    async def resolver(host: str, p: int) -> list[str]:
        asked.append((host, p))
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers[host]

    async def scenario():
        pool = decode_pool([f"decode.test:{port}"], resolver)
        assert pool.workers == []  # nothing until resolved
        await pool.refresh()
        assert [w.target for w in pool.workers] == [f"127.0.0.1:{port}", f"127.0.0.2:{port}"]
        loads = [await w.stub.GetLoad(common_pb2.LoadRequest(), timeout=5) for w in pool.workers]
        assert all(load.model_fingerprint for load in loads)  # two real, distinct workers answer
        first = pool.workers[0]
        answers["decode.test"] = ["127.0.0.2"]  # scaled down
        await pool.refresh()
        assert [w.target for w in pool.workers] == [f"127.0.0.2:{port}"]
        answers.pop("decode.test")  # the DNS server hiccups: keep what we had
        await pool.refresh()
        assert [w.target for w in pool.workers] == [f"127.0.0.2:{port}"]
        answers["decode.test"] = ["127.0.0.2", "127.0.0.1"]  # scaled up again: the kept worker keeps its state
        kept = pool.workers[0]
        await pool.refresh()
        assert pool.workers[0] is kept and pool.workers[1] is not first
        assert (await pool.workers[1].stub.GetLoad(common_pb2.LoadRequest(), timeout=5)).model_fingerprint
        task = asyncio.create_task(pool.discover_loop(0.01))  # the loop re-resolves on its own
        n = len(asked)
        while len(asked) < n + 2:
            await asyncio.sleep(0.01)
        task.cancel()
        await pool.close()

    asyncio.run(scenario())
