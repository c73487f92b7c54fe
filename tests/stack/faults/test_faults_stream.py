"""Faults while a request streams: a decode worker dies (resumed elsewhere), a kvstore shard dies (failover and
recomputation), the router dies (workers free everything), leases renewed during a slow fetch, graceful drain.

Decode workers here are paced (``--pace realtime``): each decode step lasts at least its modeled time x the scale, so
a stream is still running when the test kills its worker, however slow the machine is.
"""

import asyncio
import signal
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pdserve.client.client import AsyncPdserveClient, PdserveClient
from pdserve.common.scrape import total
from pdserve.engine.params import SamplingParams
from pdserve.v1 import common_pb2, decode_pb2, decode_pb2_grpc
from tests.helpers import decode_load, kv_leases, prefill_directly, reference, start_stack, wait_until
from tests.kv_faults import corrupt

SLOW_DECODE = ["--pace", "realtime", "--time-scale", "8"]  # >= ~200 ms per decode step
PROMPT = list(range(3, 40))
GREEDY = SamplingParams(max_tokens=60, temperature=0.0, ignore_eos=True)
SEEDED = SamplingParams(max_tokens=60, temperature=0.9, top_p=0.95, seed=7, ignore_eos=True)


def router_retries(stack, phase: str) -> float:
    return stack.scrape(stack.router).get(("pdserve_router_retries_total", (("phase", phase),)), 0.0)


def serving_decode(stack):
    """The decode worker running the one request in flight."""
    return wait_until(lambda: next((p for p in stack.decodes if p.popen.poll() is None
                                    and decode_load(stack, p).running == 1), None), what="a decode worker running it")


def stream_with_fault(stack, params: SamplingParams, fault, after_chunks: int = 5):
    """Stream PROMPT, call ``fault()`` after ``after_chunks`` chunks, read the rest. Returns (token ids, chunks)."""
    with PdserveClient(stack.router_target) as c:
        chunks = []
        for chunk in c.generate(token_ids=PROMPT, timeout=120, **vars(params)):
            chunks.append(chunk)
            if len(chunks) == after_chunks:
                fault()
    return [t for ch in chunks for t in ch.token_ids], chunks


@pytest.fixture(scope="module")
def two_decode_stack(tiny_model_path):
    stack = start_stack(model=str(tiny_model_path), n_decode=2, metrics=True, extra={"decode": SLOW_DECODE})
    yield stack
    stack.stop()


@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_decode_worker_killed_mid_stream_resumes_elsewhere(two_decode_stack, tiny_runtime, params):
    stack = two_decode_stack
    want = reference(tiny_runtime, [PROMPT], [params])[0]
    resumes_before = router_retries(stack, "resume")
    victim = []

    def kill_serving_worker():
        victim.append(serving_decode(stack))
        stack.kill(victim[0])

    ids, chunks = stream_with_fault(stack, params, kill_serving_worker)
    assert ids == want.output_ids  # no gap, no duplicate, the same tokens as without the fault
    assert "".join(ch.text for ch in chunks) == want.output_text
    assert chunks[-1].finish_reason == "length" and chunks[-1].usage.completion_tokens == params.max_tokens
    assert router_retries(stack, "resume") == resumes_before + 1
    stack.restart(victim[0])  # for the next case
    for p in stack.decodes:
        wait_until(lambda p=p: decode_load(stack, p).running == 0 and decode_load(stack, p).kv_blocks_used == 0,
                   what="no sequence left on the surviving decode worker")
    assert kv_leases(stack) == 0


@pytest.mark.parametrize("resumes", [3, 0], ids=["no-other-worker", "resumption-off"])
def test_a_stream_that_cannot_resume_fails_cleanly(tiny_model_path, resumes):
    """One decode worker (nowhere to resume), or resumption turned off: UNAVAILABLE naming why, never a hang."""
    stack = start_stack(model=str(tiny_model_path), n_decode=1 if resumes else 2, metrics=True,
                        extra={"decode": SLOW_DECODE, "router": ["--decode-resumes", str(resumes)]})
    try:
        with pytest.raises(grpc.RpcError) as err:
            stream_with_fault(stack, GREEDY, lambda: stack.kill(serving_decode(stack)))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "went away mid-stream" in err.value.details()
        assert ("no other decode worker" if resumes else "gave up after 0 resumptions") in err.value.details()
        wait_until(lambda: stack.scrape(stack.router)[("pdserve_num_requests_inflight", ())] == 0,
                   what="router in-flight back to 0")
    finally:
        stack.stop()


def test_graceful_drain_finishes_the_running_stream_and_takes_nothing_new(two_decode_stack, tiny_runtime):
    stack = two_decode_stack
    want = reference(tiny_runtime, [PROMPT], [GREEDY])[0]
    resumes_before = router_retries(stack, "resume")
    drained = []

    def sigterm_serving_worker():
        p = serving_decode(stack)
        drained.append(p)
        p.popen.send_signal(signal.SIGTERM)
        with stack.channel(p, "admin") as ch:  # health says NOT_SERVING while it drains
            wait_until(lambda: health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest()).status
                       == health_pb2.HealthCheckResponse.NOT_SERVING, what="NOT_SERVING while draining")
        with PdserveClient(stack.router_target) as c:  # new work goes to the other worker meanwhile
            assert c.complete(token_ids=PROMPT, max_tokens=2, temperature=0).usage.completion_tokens == 2
        assert drained[0].popen.poll() is None  # still finishing the stream

    ids, _ = stream_with_fault(stack, GREEDY, sigterm_serving_worker)
    assert ids == want.output_ids
    assert router_retries(stack, "resume") == resumes_before  # finished where it ran: nothing was handed over
    assert drained[0].popen.wait(timeout=60) == 0
    stack.restart(drained[0])


def test_router_killed_workers_free_sequences_and_leases(tiny_long_model_path):
    """2000 paced tokens (>= 400 s) could never finish inside the wait: only the cancelled stream frees them."""
    stack = start_stack(model=str(tiny_long_model_path), metrics=True,
                        extra={"decode": SLOW_DECODE, "router": ["--lease-ttl-s", "3"]})
    try:
        with pytest.raises(grpc.RpcError) as err:
            long_run = SamplingParams(max_tokens=2000, temperature=0.0, ignore_eos=True)
            stream_with_fault(stack, long_run, lambda: stack.kill(stack.router), after_chunks=3)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        decode = stack.decodes[0]
        wait_until(lambda: decode_load(stack, decode).running + decode_load(stack, decode).waiting == 0, timeout_s=30,
                   what="decode noticed the cancelled stream")
        assert decode_load(stack, decode).kv_blocks_used == 0
        wait_until(lambda: kv_leases(stack) == 0, timeout_s=30, what="leases released or expired")
        metrics = stack.scrape(stack.decodes[0])
        assert metrics[("pdserve_decode_requests_total", (("finished_reason", "abort"),))] == 1
    finally:
        stack.stop()


def test_lease_renewed_while_decode_fetches(tiny_model_path):
    """Decode's (paced) KV fetch lasts far longer than the 2 s lease: the kvstore sees it renewed again and again (at
    least 7 renewals: over two TTLs), and the lease is still held."""
    stack = start_stack(model=str(tiny_model_path), metrics=True, extra={
        "decode": ["--pace", "realtime", "--time-scale", "400000", "--kv-link", "pcie"],
        "router": ["--lease-ttl-s", "2"]})

    def renewals() -> float:
        return total(stack.scrape(stack.kvstores[0]), "pdserve_kvstore_operation_seconds_count", op="renew")

    try:
        with PdserveClient(stack.router_target) as client:
            call = client.generate(token_ids=PROMPT, max_tokens=5, temperature=0, ignore_eos=True)
            assert next(call).token_ids  # prefill done; decode is fetching
            before = renewals()
            wait_until(lambda: renewals() >= before + 7, 120, "seven renewals")
            assert kv_leases(stack) == 1
            call.cancel()
        wait_until(lambda: kv_leases(stack) == 0, what="lease released after the cancel")
    finally:
        stack.stop()


# --- kvstore shards ---------------------------------------------------------------------------------------------------
def test_kvstore_shard_killed_prefill_and_decode_use_the_others(tiny_model_path, tiny_runtime):
    stack = start_stack(model=str(tiny_model_path), n_kvstore=2, metrics=True)
    try:
        stack.kill(stack.kvstores[1])
        prompts = [list(range(3 + i, 70 + i)) for i in range(4)]  # 4 blocks each: some keys rank the dead shard first
        params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
        want = reference(tiny_runtime, prompts, [params] * len(prompts))
        with PdserveClient(stack.router_target) as c:
            for prompt, w in zip(prompts, want):
                assert list(c.complete(token_ids=prompt, **vars(params)).token_ids) == w.output_ids
        stats = asyncio.run(_stats(stack, stack.kvstores[0].target))
        assert stats.blocks >= 4 * 4 and stats.leases == 0  # every block landed on the live shard
        assert _kv_load_failures(stack, "recompute") == 0  # the decode worker found them there: nothing recomputed
    finally:
        stack.stop()


async def _stats(stack, target: str):
    kv = stack.kv_client("admin", targets=[target])
    try:
        return (await kv.stats())[0]
    finally:
        await kv.close()


def _kv_load_failures(stack, policy: str) -> float:
    return stack.scrape(stack.decodes[0]).get(
        ("pdserve_decode_kv_load_failures_total", (("policy", policy),)), 0.0)


def _prefill_then_decode(stack, prompt: list[int], params: SamplingParams, between) -> list[int]:
    """Prefill and decode called directly, with ``between(handle)`` run in the hand-off."""
    sampling = common_pb2.SamplingParams(max_tokens=params.max_tokens, temperature=params.temperature,
                                         ignore_eos=params.ignore_eos)
    reply = prefill_directly(stack, prompt, sampling, f"handoff-{time.monotonic_ns()}")
    between(reply.kv)
    request = decode_pb2.DecodeRequest(request_id="handoff-decode", prompt_ids=prompt, kv=reply.kv, sampling=sampling,
                                       first_token=reply.first.token_ids[0])
    with stack.channel(stack.decodes[0], "router") as ch:
        chunks = list(decode_pb2_grpc.DecodeStub(ch).Decode(request, timeout=60))
    return list(reply.first.token_ids) + [t for c in chunks for t in c.step.token_ids]


@pytest.mark.parametrize("policy", ["recompute", "fail"])
def test_decode_recomputes_when_the_kv_cannot_be_fetched(tiny_model_path, tiny_runtime, policy):
    """A corrupted block, then a dead kvstore, between prefill and decode: the decode worker recomputes the prompt
    (output unchanged, counted), or with ``--kv-load-failure-policy fail`` ends the request with a status."""
    stack = start_stack(model=str(tiny_model_path), metrics=True, fault_injection=True,
                        extra={"decode": ["--kv-load-failure-policy", policy]})
    try:
        prompt = list(range(5, 45))
        params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
        want = reference(tiny_runtime, [prompt], [params])[0].output_ids

        def corrupt(handle):
            asyncio.run(_corrupt(stack, handle.block_keys[1]))

        for fault, code in ((corrupt, grpc.StatusCode.DATA_LOSS),
                            (lambda handle: stack.kill(stack.kvstores[0]), grpc.StatusCode.UNAVAILABLE)):
            if policy == "recompute":
                assert _prefill_then_decode(stack, prompt, params, fault) == want
            else:
                with pytest.raises(grpc.RpcError) as err:
                    _prefill_then_decode(stack, prompt, params, fault)
                assert err.value.code() == code and err.value.details().startswith("kv:")
        assert _kv_load_failures(stack, policy) == 2
        assert decode_load(stack, stack.decodes[0]).kv_blocks_used == 0
    finally:
        stack.stop()


async def _corrupt(stack, key: str) -> None:
    kv = stack.kv_client("test")
    try:
        await corrupt(kv, key)
    finally:
        await kv.close()


def test_async_client_sees_unavailable_not_a_hang_when_every_decode_worker_is_gone(tiny_model_path):
    stack = start_stack(model=str(tiny_model_path), extra={"router": ["--load-poll-interval-s", "0"]})
    try:
        stack.kill(stack.decodes[0])

        async def call():
            async with AsyncPdserveClient(stack.router_target) as c:
                return await c.complete(token_ids=PROMPT, max_tokens=4, timeout=60)

        with pytest.raises(grpc.aio.AioRpcError) as err:
            asyncio.run(call())
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        # the router releases prefill's lease (no decode worker took the KV), well before its 30 s TTL
        wait_until(lambda: kv_leases(stack) == 0, timeout_s=15, what="lease released by the router")
    finally:
        stack.stop()
