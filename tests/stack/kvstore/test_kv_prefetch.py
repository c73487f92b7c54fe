"""Decode.Prefetch: a decode worker imports a request's KV while prefill still computes and stores it, and the
Decode call that follows takes that copy instead of fetching."""

import asyncio

import grpc
import pytest

from pdserve.client.client import AsyncPdserveClient
from pdserve.engine.params import SamplingParams
from pdserve.v1 import common_pb2, decode_pb2, decode_pb2_grpc
from tests.helpers import kv_leases, prefill_directly, reference, scaled, wait_until

PARAMS = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
SAMPLING = common_pb2.SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


@pytest.fixture
def stack(chunked_stack):
    return chunked_stack


def _prefetches(stack, outcome: str) -> float:
    return stack.scrape(stack.decodes[0]).get(("pdserve_decode_kv_prefetch_total", (("outcome", outcome),)), 0.0)


def test_the_router_prefetches_and_decode_takes_the_copy(stack, tiny_runtime):
    vocab = tiny_runtime.config.vocab_size
    prompts = [[(5 * i + 11 * j) % (vocab - 3) + 3 for j in range(90 + 7 * i)] for i in range(3)]
    want = [s.output_ids for s in reference(tiny_runtime, prompts, [PARAMS] * len(prompts))]
    adopted = _prefetches(stack, "adopted")

    async def run_all():
        async with AsyncPdserveClient(stack.router_target) as client:
            async def one(prompt):
                return [t async for c in client.generate(token_ids=prompt, **vars(PARAMS)) for t in c.token_ids]
            return await asyncio.gather(*(one(p) for p in prompts))

    partial = _prefetches(stack, "partial")
    assert asyncio.run(run_all()) == want
    # each Decode call took its prefetch: whole, or with the last blocks still on their way (fetched by the call)
    assert (_prefetches(stack, "adopted") - adopted) + (_prefetches(stack, "partial") - partial) == len(prompts)
    wait_until(lambda: kv_leases(stack) == 0, what="every lease released")


def _handle(stack, prompt: list[int]) -> common_pb2.KVHandle:
    """A real handle: prefill the prompt directly (its blocks stay leased in the kvstore)."""
    reply = prefill_directly(stack, prompt, SAMPLING, f"direct-{len(prompt)}")
    handle = common_pb2.KVHandle()
    handle.CopyFrom(reply.kv)
    return handle, reply.first.token_ids[0]


def test_a_prefetched_copy_serves_the_decode_call(stack, tiny_runtime):
    prompt = list(range(4, 60))
    want = reference(tiny_runtime, [prompt], [PARAMS])[0].output_ids
    handle, first = _handle(stack, prompt)
    adopted = _prefetches(stack, "adopted")

    async def scenario():
        async with stack.aio_channel(stack.decodes[0], "router") as ch:
            stub = decode_pb2_grpc.DecodeStub(ch)
            done = await stub.Prefetch(decode_pb2.PrefetchRequest(request_id="pf-1", kv=handle))
            assert done.token_count == len(prompt)
            chunks = [c async for c in stub.Decode(decode_pb2.DecodeRequest(
                request_id="pf-1", prompt_ids=prompt, kv=handle, first_token=first, sampling=SAMPLING))]
        return [first] + [t for c in chunks for t in c.step.token_ids]

    assert asyncio.run(scenario()) == want
    assert _prefetches(stack, "adopted") == adopted + 1


def test_a_decode_call_does_not_wait_for_blocks_its_prefetch_still_waits_for(stack, tiny_runtime):
    """Prefill has returned when Decode comes, so every block is stored: a block the prefetch still waits for was
    lost (a kvstore restarted empty). The call takes what the prefetch brought, fetches the rest without waiting,
    and recomputes what is missing."""
    prompt = list(range(11, 70))
    want = reference(tiny_runtime, [prompt], [PARAMS])[0].output_ids
    handle, first = _handle(stack, prompt)
    handle.block_keys[2] = "lost-block"
    prefetched = common_pb2.KVHandle()
    prefetched.CopyFrom(handle)
    prefetched.wait_s = 120
    partial = _prefetches(stack, "partial")

    async def scenario():
        async with stack.aio_channel(stack.decodes[0], "router") as ch:
            stub = decode_pb2_grpc.DecodeStub(ch)
            prefetch = stub.Prefetch(decode_pb2.PrefetchRequest(request_id="pf-lost", kv=prefetched))
            await asyncio.to_thread(wait_until, lambda: stack.scrape(stack.kvstores[0]).get(
                ("pdserve_kvstore_waiting_gets", ()), 0.0) >= 1, 30, "the prefetch waiting for the lost block")
            call = stub.Decode(decode_pb2.DecodeRequest(request_id="pf-lost", prompt_ids=prompt, kv=handle,
                                                        first_token=first, sampling=SAMPLING))
            chunks = await asyncio.wait_for(_collect(call), 30)  # far below the prefetch's 120 s wait
            prefetch.cancel()
        return [first] + [t for c in chunks for t in c.step.token_ids]

    assert asyncio.run(scenario()) == want
    assert _prefetches(stack, "partial") == partial + 1


async def _collect(call):
    return [c async for c in call]


def test_prefetches_that_nobody_takes_are_dropped_and_bad_ones_refused(stack):
    prompt = list(range(7, 50))
    handle, _ = _handle(stack, prompt)
    dropped, failed = _prefetches(stack, "dropped"), _prefetches(stack, "failed")

    async def scenario():
        async with stack.aio_channel(stack.decodes[0], "router") as ch:
            stub = decode_pb2_grpc.DecodeStub(ch)
            bad = common_pb2.KVHandle()
            bad.CopyFrom(handle)
            bad.model_fingerprint = "other"
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Prefetch(decode_pb2.PrefetchRequest(request_id="pf-bad", kv=bad))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details().startswith("kv.model_fingerprint")
            bad.CopyFrom(handle)
            bad.kv_dtype = "float16"  # KV of another width than this worker's float32 cache: refused before fetching
            for call in (stub.Prefetch(decode_pb2.PrefetchRequest(request_id="pf-dtype", kv=bad)),
                         stub.Decode(decode_pb2.DecodeRequest(request_id="pf-dtype", prompt_ids=prompt, kv=bad,
                                                              first_token=3, sampling=SAMPLING))):
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await _collect(call) if isinstance(call, grpc.aio.UnaryStreamCall) else await call
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert err.value.details().startswith("kv.kv_dtype: the KV is float16, this decode worker's cache "
                                                      "is float32")
            # blocks that never come: NOT_FOUND at the end of wait_s, and the copy is gone
            never = common_pb2.KVHandle()
            never.CopyFrom(handle)
            never.block_keys[0] = "never-stored"
            never.wait_s = 0.3
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Prefetch(decode_pb2.PrefetchRequest(request_id="pf-never", kv=never))
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            # the router gives a request up while its prefetch waits: the worker drops the copy
            waiting = common_pb2.KVHandle()
            waiting.CopyFrom(never)
            waiting.wait_s = 60
            call = stub.Prefetch(decode_pb2.PrefetchRequest(request_id="pf-cancel", kv=waiting))
            await asyncio.to_thread(wait_until, lambda: stack.scrape(stack.kvstores[0]).get(
                ("pdserve_kvstore_waiting_gets", ()), 0.0) >= 1, 30, "the prefetch waiting")
            call.cancel()

    asyncio.run(scenario())
    assert _prefetches(stack, "failed") == failed + 1
    wait_until(lambda: _prefetches(stack, "dropped") == dropped + 1, what="the cancelled prefetch dropped")


@pytest.mark.parametrize("ttl", [float("nan"), float("inf"), 1e9, -1.0])
def test_a_prefetch_with_a_lease_ttl_out_of_range_is_refused(stack, ttl):
    """The TTL says how long the worker keeps the copy for a Decode call: NaN or 1e9 would hold a slot for good."""
    handle, _ = _handle(stack, list(range(9, 40)))
    handle.lease_ttl_s = ttl
    with stack.channel(stack.decodes[0], "router") as ch:
        with pytest.raises(grpc.RpcError) as err:
            decode_pb2_grpc.DecodeStub(ch).Prefetch(decode_pb2.PrefetchRequest(request_id="pf-ttl", kv=handle),
                                                     timeout=scaled(30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("kv.lease_ttl_s")


def test_prefetch_slots_are_bounded_and_expire(tiny_model_path):
    """Two slots held at most 1 s each: two prefetches whose blocks never come (lease TTL 300 s) fill them, a third
    is refused, and once the two expire a new one is taken."""
    from tests.helpers import start_stack

    small = start_stack(model=str(tiny_model_path), metrics=True,
                        extra={"decode": ["--max-prefetches", "2", "--prefetch-hold-s", "1"]})
    try:
        handle, _ = _handle(small, list(range(5, 40)))
        handle.block_keys[0] = "never-stored"
        handle.lease_ttl_s, handle.wait_s = 300, 600  # the longest lease (MAX_LEASE_TTL_S): far past the hold
        dropped = _prefetches(small, "dropped")

        async def scenario():
            async with small.aio_channel(small.decodes[0], "router") as ch:
                stub = decode_pb2_grpc.DecodeStub(ch)
                held = [stub.Prefetch(decode_pb2.PrefetchRequest(request_id=f"pf-slot-{i}", kv=handle)) for i in range(2)]
                await asyncio.to_thread(wait_until, lambda: small.scrape(small.kvstores[0])
                                        .get(("pdserve_kvstore_waiting_gets", ()), 0.0) >= 2, 30, "both slots taken")
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Prefetch(decode_pb2.PrefetchRequest(request_id="pf-slot-3", kv=handle))
                assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                await asyncio.to_thread(wait_until, lambda: _prefetches(small, "dropped") == dropped + 2, 60,
                                        "both slots expired")
                again = stub.Prefetch(decode_pb2.PrefetchRequest(request_id="pf-slot-4", kv=handle))
                await asyncio.to_thread(wait_until, lambda: _prefetches(small, "dropped") == dropped + 3, 60,
                                        "the new prefetch taken, and expired in its turn")
                for call in [*held, again]:
                    call.cancel()

        asyncio.run(scenario())
    finally:
        small.stop()


def test_bench_kv_handoff_prints_a_row_per_mode(tiny_model_path, capsys):
    from pdserve.cli.main import main

    assert main(["bench", "kv", "--handoff", "--model", str(tiny_model_path), "--prompt-len", "40", "--chunk-tokens",
                 "16", "--requests", "1", "--modes", "store per chunk,+ prefetch", "--kv-dtypes", "float32,bfloat16"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "40-token prompts prefilled in chunks of 16 tokens" in lines[0] and "prefill end->2nd token" in lines[1]
    assert [line.split()[0] for line in lines[2:]] == ["store", "store", "+", "+"]
    assert [line.split()[3 if line.startswith("store") else 2] for line in lines[2:]] == ["float32", "bfloat16"] * 2
    assert all(len(line.split()) >= 8 for line in lines[2:])
