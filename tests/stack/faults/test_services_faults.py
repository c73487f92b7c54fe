"""Cancellation, preemption, retries, overload and colocated mode, each on a stack shaped for it."""

import asyncio
import signal

import grpc
import numpy as np
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from pdserve.client.client import AsyncPdserveClient, PdserveClient
from pdserve.engine.params import SamplingParams, sample_params
from tests.helpers import decode_load, kv_leases, reference, start_stack, wait_until


def test_cancel_mid_stream_frees_kv_and_leases(long_stack):
    decode = long_stack.decodes[0]
    before = long_stack.scrape(decode)
    aborts, lengths = (before.get(("pdserve_decode_requests_total", (("finished_reason", reason),)), 0.0)
                       for reason in ("abort", "length"))
    router_before = router_aborts(long_stack)

    async def cancel_after_three_chunks():
        async with AsyncPdserveClient(long_stack.router_target) as client:
            call = client.generate(token_ids=list(range(3, 60)), max_tokens=4000, ignore_eos=True, temperature=0)
            seen = 0
            async for _ in call:
                seen += 1
                if seen == 3:
                    break
            call.cancel()
            return seen

    assert asyncio.run(cancel_after_three_chunks()) == 3
    wait_until(lambda: decode_load(long_stack, decode).running == 0, what="decode running == 0")
    load = decode_load(long_stack, decode)
    assert load.kv_blocks_used == 0 and load.waiting == 0
    assert kv_leases(long_stack) == 0
    metrics = long_stack.scrape(decode)
    assert metrics[("pdserve_decode_requests_total", (("finished_reason", "abort"),))] == aborts + 1
    assert metrics[("pdserve_decode_requests_total", (("finished_reason", "length"),))] == lengths
    # the router counts the request it never finished as an abort, under the served model's name
    wait_until(lambda: router_aborts(long_stack) == router_before + 1, what="router abort counted")


def router_aborts(stack) -> float:
    return sum(v for (name, labels), v in stack.scrape(stack.router).items()
               if name == "pdserve_request_success_total" and ("finished_reason", "abort") in labels
               and dict(labels)["model_name"])


def test_router_refuses_when_full(tiny_long_model_path):
    stack = start_stack(model=str(tiny_long_model_path), extra={"router": ["--max-inflight", "1"]})
    try:
        async def scenario():
            async with AsyncPdserveClient(stack.router_target) as client:
                long_call = client.generate(token_ids=list(range(3, 30)), max_tokens=4000, ignore_eos=True,
                                            temperature=0)
                await long_call.read()  # the first chunk: the long request is in flight now
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await client.complete("the end", max_tokens=2)
                long_call.cancel()
                return err.value
        err = asyncio.run(scenario())
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "in flight" in err.details()
        retry = error_details_pb2.RetryInfo()
        assert rpc_status.from_call(err).details[0].Unpack(retry) and retry.retry_delay.seconds >= 1
        with PdserveClient(stack.router_target) as c:  # serving again once the long one is gone
            wait_until(lambda: _completes(c), what="router accepts again")
    finally:
        stack.stop()


def _completes(client) -> bool:
    try:
        return client.complete("the end", max_tokens=2, temperature=0).usage.completion_tokens == 2
    except grpc.RpcError:
        return False


def test_preemption_recomputes_and_output_is_unchanged(tiny_model_path, tiny_runtime):
    """12 blocks of KV for 6 sequences that each grow to 5 blocks: the decode worker must preempt and recompute."""
    stack = start_stack(model=str(tiny_model_path), kv_blocks=12, metrics=True)
    try:
        rng = np.random.default_rng(2)
        prompts = [rng.integers(3, tiny_runtime.config.vocab_size, 20).tolist() for _ in range(6)]
        params = SamplingParams(max_tokens=60, temperature=0.0, ignore_eos=True)
        expected = reference(tiny_runtime, prompts, [params] * 6)

        async def run_all():
            async with AsyncPdserveClient(stack.router_target) as client:
                return await asyncio.gather(*(client.complete(token_ids=p, **vars(params)) for p in prompts))

        results = asyncio.run(run_all())
        for got, want in zip(results, expected):
            assert list(got.token_ids) == want.output_ids
            assert got.finish_reason == "length"
        decode = stack.decodes[0]
        assert stack.scrape(decode)[("pdserve_decode_num_preemptions_total", ())] >= 1
        assert decode_load(stack, decode).kv_blocks_used == 0
        with PdserveClient(stack.router_target) as c:  # 20 + 200 tokens can never fit 12 x 16: refused, not failed
            with pytest.raises(grpc.RpcError) as err:
                c.complete(token_ids=prompts[0], max_tokens=200)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "KV budget is 12 blocks" in err.value.details()
        wait_until(lambda: kv_leases(stack) == 0, what="the refused request's lease released")
    finally:
        stack.stop()


NO_LOAD_POLLING = ["--load-poll-interval-s", "0"]  # the router learns of a dead worker only by calling it


def router_retries(stack, phase: str) -> float:
    return stack.scrape(stack.router).get(("pdserve_router_retries_total", (("phase", phase),)), 0.0)


def test_prefill_unavailable_is_retried_on_another_worker(tiny_model_path):
    stack = start_stack(model=str(tiny_model_path), n_prefill=2, policy="round_robin", metrics=True,
                        extra={"router": NO_LOAD_POLLING})
    try:
        stack.prefills[0].popen.send_signal(signal.SIGKILL)
        stack.prefills[0].popen.wait()
        with PdserveClient(stack.router_target) as c:
            for i in range(4):  # round robin sends the first of these to the dead worker
                reply = c.complete(f"the end {i}", max_tokens=3, temperature=0)
                assert reply.usage.completion_tokens == 3
        assert router_retries(stack, "prefill") >= 1
        assert router_retries(stack, "decode") == 0
    finally:
        stack.stop()


def test_colocated_mode_matches_in_process(tiny_model_path, tiny_runtime):
    stack = start_stack(model=str(tiny_model_path), colocated=True)
    try:
        assert not stack.kvstores and not stack.prefills
        prompts = [list(range(3, 3 + n)) for n in (4, 21, 50)]
        params = SamplingParams(max_tokens=12, temperature=0.0)
        expected = reference(tiny_runtime, prompts, [params] * 3)
        with PdserveClient(stack.router_target) as c:
            for prompt, want in zip(prompts, expected):
                chunks = list(c.generate(token_ids=prompt, **vars(params)))
                assert [t for ch in chunks for t in ch.token_ids] == want.output_ids
                assert chunks[-1].usage.prompt_tokens == len(prompt)
            # n samples colocated: one decode request per sample (each prefills for itself), seeds seed + i
            sampled = SamplingParams(max_tokens=8, temperature=1.0, seed=21)
            reply = c.complete(token_ids=prompts[1], **vars(sampled) | {"n": 2})
        samples = reference(tiny_runtime, [prompts[1]] * 2, [sample_params(sampled, i) for i in range(2)])
        assert [list(ch.token_ids) for ch in reply.choices] == [s.output_ids for s in samples]
        assert reply.usage.prompt_tokens == len(prompts[1]) and reply.usage.completion_tokens == 16
    finally:
        stack.stop()


def test_deadline_propagates_and_frees_the_sequence(long_stack):
    with PdserveClient(long_stack.router_target) as c:
        with pytest.raises(grpc.RpcError) as err:
            list(c.generate(token_ids=list(range(3, 60)), max_tokens=4000, ignore_eos=True, temperature=0,
                            timeout=1.0))
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    decode = long_stack.decodes[0]
    wait_until(lambda: decode_load(long_stack, decode).running == 0
               and decode_load(long_stack, decode).kv_blocks_used == 0, what="decode freed after the deadline")
    wait_until(lambda: kv_leases(long_stack) == 0, what="leases released")


def test_cancel_between_prefill_and_decode_releases_the_lease(tiny_model_path):
    """Decode is held in its (paced) KV fetch for about a minute; the client cancels after the first token.
    Leases live 30 s, so reaching zero within 15 s can only be the router releasing it."""
    stack = start_stack(model=str(tiny_model_path),
                        extra={"decode": ["--pace", "realtime", "--time-scale", "400000", "--kv-link", "pcie"]})
    try:
        with PdserveClient(stack.router_target) as client:
            call = client.generate(token_ids=list(range(3, 43)), max_tokens=50, temperature=0, ignore_eos=True)
            assert next(call).token_ids
            assert kv_leases(stack) == 1  # prefill's lease, waiting for decode
            call.cancel()
        wait_until(lambda: kv_leases(stack) == 0, timeout_s=15, what="lease released by the router")
    finally:
        stack.stop()


def test_decode_unavailable_before_streaming_is_retried_elsewhere(tiny_model_path):
    stack = start_stack(model=str(tiny_model_path), n_decode=2, metrics=True, extra={"router": NO_LOAD_POLLING})
    try:
        stack.decodes[0].popen.send_signal(signal.SIGKILL)
        stack.decodes[0].popen.wait()
        with PdserveClient(stack.router_target) as c:
            for i in range(4):  # with equal (unknown) loads the first decode worker is tried first
                assert c.complete(f"the end {i}", max_tokens=3, temperature=0).usage.completion_tokens == 3
        assert router_retries(stack, "decode") >= 1
        assert router_retries(stack, "prefill") == 0
    finally:
        stack.stop()
