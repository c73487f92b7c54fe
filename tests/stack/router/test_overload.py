"""Overload and a cancellation storm: shed with retry advice, then nothing held anywhere and memory bounded."""

import asyncio

import grpc
import pytest

from pdserve.bench.faults.chaos import held, rss_mb, wait_idle
from pdserve.bench.faults.chaos_load import fault_free, make_workload, storm
from pdserve.client.client import AsyncPdserveClient
from tests.helpers import start_stack

MAX_INFLIGHT = 8
RSS_BOUND_MB = 64  # growth of any process's resident memory across a storm, after a first storm warmed it up


@pytest.fixture(scope="module")
def stack_and_workload(tiny_model_path, tiny_runtime):
    stack = start_stack(model=str(tiny_model_path), metrics=True,
                        extra={"decode": ["--pace", "realtime", "--time-scale", "2"],
                               "router": ["--max-inflight", str(MAX_INFLIGHT), "--lease-ttl-s", "60"]})
    workload = make_workload(tiny_runtime.config.vocab_size, n=12, max_tokens=12)
    asyncio.run(fault_free(stack.router_target, workload, concurrency=4))
    yield stack, workload
    stack.stop()


def test_overload_sheds_with_retry_advice_and_admitted_requests_complete(stack_and_workload):
    """Eight times the router's capacity at once: the excess gets RESOURCE_EXHAUSTED with advice; a client that waits
    as advised and retries gets every answer, token for token."""
    stack, workload = stack_and_workload
    rss_before = rss_mb(stack.router.popen.pid)
    advice: list[int] = []

    async def one(client, i: int) -> list[int]:
        while True:
            try:
                reply = await client.complete(token_ids=workload.prompts[i], timeout=120, **workload.params[i])
                return list(reply.token_ids)
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
                assert "requests in flight" in err.details() and "retry in about" in err.details()
                after_ms = int(dict(err.trailing_metadata())["retry-after-ms"])
                assert 50 <= after_ms <= 30_000
                advice.append(after_ms)
                await asyncio.sleep(after_ms / 1000)

    async def flood():
        async with AsyncPdserveClient(stack.router_target) as client:
            return await asyncio.gather(*(one(client, k % len(workload.prompts)) for k in range(8 * MAX_INFLIGHT)))

    answers = asyncio.run(flood())
    assert answers == [workload.expected[k % len(workload.prompts)] for k in range(8 * MAX_INFLIGHT)]
    assert advice  # it did shed
    metrics = stack.scrape(stack.router)
    shed = sum(metrics.get(("pdserve_request_rejected_total", (("reason", reason),)), 0.0)
               for reason in ("router_full", "workers_full"))
    assert shed == len(advice)
    assert wait_idle(stack, 15) == (0, 0, 0)
    assert rss_mb(stack.router.popen.pid) - rss_before < RSS_BOUND_MB


def test_cancellation_storm_leaves_nothing_held(stack_and_workload):
    """Hundreds of requests, a third cancelled at random moments: afterwards (well inside the 60 s lease TTL, so only
    releases count) zero leases, zero decode KV blocks and sequences, zero router requests in flight, and memory
    within the bound."""
    stack, workload = stack_and_workload
    n, concurrency = 120, MAX_INFLIGHT  # at the router's limit: every request runs or is cancelled, but see below
    asyncio.run(storm(stack.router_target, workload, 30, concurrency, 1 / 3, seed=1))  # warm-up
    wait_idle(stack, 15)
    rss_before = {p.name: rss_mb(p.popen.pid) for p in stack.processes}
    row = asyncio.run(storm(stack.router_target, workload, n, concurrency, 1 / 3, seed=2))
    assert row.sent == n and row.answers["cancelled"] >= n // 6
    # a cancelled call is over for its client at once, and its next request may reach the router before the router
    # has seen the cancellation and freed the slot: that one is shed (RESOURCE_EXHAUSTED with advice), a clean answer
    shed = row.codes["RESOURCE_EXHAUSTED"]
    assert set(row.codes) <= {"RESOURCE_EXHAUSTED"} and shed <= n // 10, row
    assert row.answers["correct"] + row.answers["cancelled"] + shed == n, row  # nothing lost, duplicated or wrong
    # a cancel must never break a step's bookkeeping (which cost the step's other requests a token)
    assert not [p.name for p in stack.processes if p.log_path and "step failed" in p.log_path.read_text("utf-8", "replace")]
    assert wait_idle(stack, 15) == (0, 0, 0)  # kvstore leases, decode blocks + sequences, router in flight
    leased = stack.scrape(stack.kvstores[0])[("pdserve_kvstore_leased_blocks", ())]
    assert leased == 0
    growth = {p.name: rss_mb(p.popen.pid) - rss_before[p.name] for p in stack.processes}
    assert max(growth.values()) < RSS_BOUND_MB, growth
    assert held(stack) == (0, 0, 0)
