"""The overlapped hand-off: prefill stores each chunk's blocks while the next computes, and a decode worker that
starts before every block is stored waits for them (or stops waiting when the writer gives up)."""

import asyncio

import grpc
import pytest

from pdserve.client.client import AsyncPdserveClient
from pdserve.engine.params import SamplingParams
from pdserve.kvstore.client import BlockData
from pdserve.v1 import common_pb2, decode_pb2, decode_pb2_grpc
from tests.helpers import prefill_directly, reference, router_lease, wait_until

PARAMS = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


def _waiting_gets(stack) -> float:
    return stack.scrape(stack.kvstores[0]).get(("pdserve_kvstore_waiting_gets", ()), 0.0)


def _kv_puts(stack) -> float:
    return stack.scrape(stack.kvstores[0]).get(
        ("pdserve_kvstore_operation_seconds_count", (("op", "put"),)), 0.0)


def test_chunked_prefill_stores_blocks_early_and_gives_the_same_tokens(chunked_stack, tiny_runtime):
    vocab = tiny_runtime.config.vocab_size
    prompts = [[(7 * i + 13 * j) % (vocab - 3) + 3 for j in range(100 + i)] for i in range(4)]
    want = [s.output_ids for s in reference(tiny_runtime, prompts, [PARAMS] * len(prompts))]
    puts_before = _kv_puts(chunked_stack)

    async def run_all():
        async with AsyncPdserveClient(chunked_stack.router_target) as client:
            async def one(prompt):
                return [t async for c in client.generate(token_ids=prompt, **vars(PARAMS)) for t in c.token_ids]
            return await asyncio.gather(*(one(p) for p in prompts))

    assert asyncio.run(run_all()) == want
    # each prompt: at least one Put before its last chunk (the chunks before it cover 68+ tokens, so 4+ blocks) and
    # one at the end; storing everything at the end would be one Put each
    assert _kv_puts(chunked_stack) - puts_before >= 2 * len(prompts)


def _prefill(stack, prompt: list[int]):
    sampling = common_pb2.SamplingParams(max_tokens=PARAMS.max_tokens, temperature=0.0, ignore_eos=True)
    return prefill_directly(stack, prompt, sampling, "early")


def _early_request(prompt, reply, keys: list[str], lease: str) -> decode_pb2.DecodeRequest:
    """A Decode request for ``reply``'s prompt whose blocks are ``keys`` under ``lease`` (not stored yet)."""
    handle = common_pb2.KVHandle()
    handle.CopyFrom(reply.kv)
    del handle.block_keys[:]
    handle.block_keys.extend(keys)
    handle.lease_id, handle.wait_s = lease, 120.0
    return decode_pb2.DecodeRequest(request_id="early", prompt_ids=prompt, kv=handle,
                                    first_token=reply.first.token_ids[0],
                                    sampling=common_pb2.SamplingParams(max_tokens=PARAMS.max_tokens,
                                                                       temperature=0.0, ignore_eos=True))


async def _decode_early(stack, prompt, reply, keys: list[str], lease: str, feed) -> list[int]:
    """Start a Decode whose blocks are not stored yet (``keys`` under ``lease``), then run ``feed()``."""
    async with stack.aio_channel(stack.decodes[0], "router") as ch:
        call = decode_pb2_grpc.DecodeStub(ch).Decode(_early_request(prompt, reply, keys, lease))
        await feed()
        chunks = await asyncio.wait_for(_collect(call), 60)  # far below wait_s: it must not sit out the wait
    return list(reply.first.token_ids) + [t for c in chunks for t in c.step.token_ids]


async def _collect(call):
    return [c async for c in call]


def test_decode_started_before_the_blocks_waits_for_them(chunked_stack, tiny_runtime):
    prompt = list(range(5, 75))
    want = reference(tiny_runtime, [prompt], [PARAMS])[0].output_ids
    reply = _prefill(chunked_stack, prompt)
    late = [f"late-{i}" for i in range(len(reply.kv.block_keys))]
    late_lease = router_lease(chunked_stack, 60)

    async def scenario():
        kv = chunked_stack.kv_client("prefill")
        try:
            blocks = await kv.get(list(reply.kv.block_keys), lease_id=reply.kv.lease_id)

            async def feed():  # the blocks arrive one by one once decode is waiting for them
                await asyncio.to_thread(wait_until, lambda: _waiting_gets(chunked_stack) == 1, 30, "decode waiting")
                for key, block in zip(late, blocks):
                    await asyncio.sleep(0.1)
                    await kv.put([BlockData(key, block.token_count, block.data)], late_lease, 60)
            return await _decode_early(chunked_stack, prompt, reply, late, late_lease, feed)
        finally:
            await kv.close()

    assert asyncio.run(scenario()) == want


def test_a_prefill_that_gives_up_midway_does_not_leave_decode_waiting(chunked_stack, tiny_runtime):
    """The writer stores one block and releases its lease (what a failed prefill does): the waiting fetch ends at
    once, and decode recomputes the prompt (the default --kv-load-failure-policy)."""
    prompt = list(range(9, 79))
    want = reference(tiny_runtime, [prompt], [PARAMS])[0].output_ids
    reply = _prefill(chunked_stack, prompt)
    gone = [f"gone-{i}" for i in range(len(reply.kv.block_keys))]
    failures = ("pdserve_decode_kv_load_failures_total", (("policy", "recompute"),))
    before = chunked_stack.scrape(chunked_stack.decodes[0]).get(failures, 0.0)

    gone_lease = router_lease(chunked_stack, 60)

    async def scenario():
        kv = chunked_stack.kv_client("prefill")
        try:
            [first] = await kv.get(list(reply.kv.block_keys[:1]), lease_id=reply.kv.lease_id)

            async def feed():
                await kv.put([BlockData(gone[0], first.token_count, first.data)], gone_lease, 60)
                await asyncio.to_thread(wait_until, lambda: _waiting_gets(chunked_stack) == 1, 30, "decode waiting")
                await kv.release(gone_lease)
            return await _decode_early(chunked_stack, prompt, reply, gone, gone_lease, feed)
        finally:
            await kv.close()

    assert asyncio.run(scenario()) == want
    assert chunked_stack.scrape(chunked_stack.decodes[0]).get(failures, 0.0) == before + 1


def test_a_waiting_get_ends_at_its_deadline(chunked_stack):
    lease = router_lease(chunked_stack, 60)

    async def scenario():
        kv = chunked_stack.kv_client("decode")
        try:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.get(["never-stored"], wait_s=0.3, lease_id=lease)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND and "wait_s" in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.get(["x"], wait_s=-1, lease_id=lease)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "wait_s" in err.value.details()
        finally:
            await kv.close()

    asyncio.run(scenario())


def test_a_decode_cancelled_while_its_blocks_arrive_is_counted_as_an_abort(chunked_stack):
    """The caller goes away while decode still waits for the KV: the fetch stops, and the request is counted."""
    prompt = list(range(11, 81))
    reply = _prefill(chunked_stack, prompt)
    never = [f"never-{i}" for i in range(len(reply.kv.block_keys))]
    never_lease = router_lease(chunked_stack, 60)  # (a Get under a lease nobody made is NOT_FOUND at once)
    decode = chunked_stack.decodes[0]
    aborts = ("pdserve_decode_requests_total", (("finished_reason", "abort"),))
    before = chunked_stack.scrape(decode).get(aborts, 0.0)

    async def scenario():
        async with chunked_stack.aio_channel(decode, "router") as ch:
            call = decode_pb2_grpc.DecodeStub(ch).Decode(_early_request(prompt, reply, never, never_lease))
            await asyncio.to_thread(wait_until, lambda: _waiting_gets(chunked_stack) == 1, 30, "decode waiting")
            call.cancel()

    asyncio.run(scenario())
    wait_until(lambda: _waiting_gets(chunked_stack) == 0, 30, "the fetch stopped")
    wait_until(lambda: chunked_stack.scrape(decode).get(aborts, 0.0) == before + 1, 30, "the abort counted")
