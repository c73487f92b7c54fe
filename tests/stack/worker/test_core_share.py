"""The launcher's core share: workers of one host that get a core each run their second thread while the others rest."""

import os
import stat

import pytest

from pdserve.client.client import PdserveClient
from pdserve.common.scrape import total
from pdserve.engine.model.kernels.core_share import CORE_SHARE_ENV
from pdserve.launcher.stack import Stack, StackSpec
from tests.helpers import scaled


@pytest.fixture
def two_cores(monkeypatch):
    """The launcher sees a 2-core host (this one may have more): each of two workers gets one BLAS thread."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


def _worker_env(stack: Stack) -> dict[str, str]:
    return {p.name: stack._env(p).get(CORE_SHARE_ENV) for p in stack.processes}


def test_workers_sharing_two_cores_get_a_slot_each_and_nothing_else_does(two_cores):
    stack = Stack(StackSpec(n_prefill=1, n_decode=1, insecure_internal=True))
    try:
        env = _worker_env(stack)
        path = stack.log_dir / "core-share"
        assert env["prefill-0"] == f"{path}:0" and env["decode-0"] == f"{path}:1"
        assert env["router"] is None and env["kvstore-0"] is None
        assert path.read_bytes() == bytes(2) and stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        stack.stop()


def test_three_workers_get_three_slots(two_cores):
    stack = Stack(StackSpec(n_prefill=2, n_decode=1, insecure_internal=True))
    try:
        path = stack.log_dir / "core-share"
        assert [stack._env(p)[CORE_SHARE_ENV] for p in stack.workers] == [f"{path}:{i}" for i in range(3)]
        assert path.read_bytes() == bytes(3)
    finally:
        stack.stop()


@pytest.mark.parametrize("spec", [dict(share_cores=False), dict(threads_per_worker=1), dict(colocated=True)],
                         ids=["static-cores", "threads-given", "one-worker"])
def test_no_share_where_the_split_is_fixed_or_a_worker_has_the_cores(two_cores, spec):
    stack = Stack(StackSpec(insecure_internal=True, **spec))
    try:
        assert set(_worker_env(stack).values()) == {None}
        assert not (stack.log_dir / "core-share").exists()
    finally:
        stack.stop()


def test_a_prefill_runs_on_the_core_the_idle_decode_worker_lends(two_cores, tiny_model_path):
    """The real processes: the prefill worker's split products ran on a second core while decode had nothing to do."""
    stack = Stack(StackSpec(model=str(tiny_model_path), metrics=True)).start(timeout_s=scaled(120))
    try:
        prompt = list(range(100, 200))  # 100 tokens: the forward splits its products (16 rows or more)
        with PdserveClient(stack.router_target) as client:
            reply = client.complete(token_ids=prompt, max_tokens=4, temperature=0, ignore_eos=True)
        assert reply.usage.completion_tokens == 4
        prefill = stack.scrape(stack.prefills[0])
        assert total(prefill, "pdserve_core_share_splits_total", core="lent") > 0
    finally:
        stack.stop()
