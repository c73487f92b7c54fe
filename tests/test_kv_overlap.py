"""The overlapped hand-off: prefill stores each chunk's blocks while the next computes, and a decode worker that
starts before every block is stored waits for them (or stops waiting when the writer gives up)."""

import asyncio

import grpc
import pytest

from pdserve.client.client import AsyncPdserveClient
from pdserve.engine.kv_blocks import block_keys
from pdserve.engine.params import SamplingParams
from pdserve.kvstore.client import BlockData, KVStoreClient
from pdserve.kvstore.lease import KVLease
from pdserve.prefill_server.kv_upload import BlockUploader
from pdserve.prefill_server.prefix_cache import LocalPrefixCache
from pdserve.v1 import common_pb2, decode_pb2, decode_pb2_grpc, prefill_pb2, prefill_pb2_grpc
from tests.helpers import reference, scrape, wait_until

PARAMS = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


class RecordingKV:
    def __init__(self):
        self.calls: list[list[str]] = []
        self.data: dict[str, bytes] = {}

    async def put(self, blocks, lease_id, ttl):
        self.calls.append([b.key for b in blocks])
        self.data.update({b.key: bytes(b.data) for b in blocks})
        return len(blocks)


def test_uploader_stores_each_chunks_blocks_as_it_completes(tiny_runtime):
    prompt = list(range(3, 73))  # 70 tokens: 4 full blocks and a tail of 6
    seq = tiny_runtime.new_sequence(prompt, PARAMS, "up")
    keys = block_keys(prompt, tiny_runtime.config.fingerprint, tiny_runtime.block_tokens)
    kv = RecordingKV()

    async def scenario():
        uploader = BlockUploader(kv, LocalPrefixCache(1 << 24), seq, keys, 1, KVLease(kv, "lease", 30.0))  # block 0 is stored
        for n in (20, 20, 30):  # chunks ending at 20, 40 and 70 tokens
            tiny_runtime.prefill([(seq, n)])
            uploader.chunk_done()
            await asyncio.sleep(0)
        handle_keys = await uploader.finish()
        return uploader, handle_keys

    uploader, handle_keys = asyncio.run(scenario())
    tail = handle_keys[-1]
    # block 0 was already stored; 1 after the second chunk (32 <= 40 tokens); 2, 3 and the tail after the last
    assert kv.calls == [[keys[1]], [keys[2], keys[3], tail]]
    assert handle_keys == keys + [tail] and uploader.puts == 2
    for i, key in enumerate(handle_keys[1:], start=1):
        assert kv.data[key] == seq.kv.export_block(i)


class SlowKV(RecordingKV):
    """Each Put takes a few event-loop turns, so that concurrent Puts would overlap."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, str]] = []

    async def put(self, blocks, lease_id, ttl):
        self.events.append(("start", lease_id))
        for _ in range(3):
            await asyncio.sleep(0)
        self.events.append(("end", lease_id))
        return await super().put(blocks, lease_id, ttl)


def test_a_workers_uploaders_store_one_request_at_a_time_in_order(tiny_runtime):
    """The requests of one step finish together; their Puts go one after another, so the first is stored (and
    answered) after one Put's time, not after all of them."""
    kv, turns = SlowKV(), asyncio.Lock()
    prompts = [list(range(3 + i, 40 + i)) for i in range(3)]
    seqs = [tiny_runtime.new_sequence(p, PARAMS, f"r{i}") for i, p in enumerate(prompts)]
    tiny_runtime.prefill([(s, len(s.prompt_ids)) for s in seqs])

    async def scenario():
        uploaders = [BlockUploader(kv, LocalPrefixCache(1 << 24), s,
                                   block_keys(s.prompt_ids, tiny_runtime.config.fingerprint, tiny_runtime.block_tokens),
                                   0, KVLease(kv, f"lease-{i}", 30.0), turns) for i, s in enumerate(seqs)]
        await asyncio.gather(*(u.finish() for u in uploaders))

    asyncio.run(scenario())
    assert kv.events == [(edge, f"lease-{i}") for i in range(3) for edge in ("start", "end")]


def _waiting_gets(stack) -> float:
    return scrape(stack.kvstores[0].metrics_port).get(("pdserve_kvstore_waiting_gets", ()), 0.0)


def _kv_puts(stack) -> float:
    return scrape(stack.kvstores[0].metrics_port).get(
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


def _prefill(stack, prompt: list[int]) -> prefill_pb2.PrefillReply:
    sampling = common_pb2.SamplingParams(max_tokens=PARAMS.max_tokens, temperature=0.0, ignore_eos=True)
    with grpc.insecure_channel(stack.prefills[0].target) as ch:
        return prefill_pb2_grpc.PrefillStub(ch).Prefill(prefill_pb2.PrefillRequest(
            request_id="early", token_ids=prompt, sampling=sampling))


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
    async with grpc.aio.insecure_channel(stack.decodes[0].target) as ch:
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

    async def scenario():
        kv = KVStoreClient([chunked_stack.kvstores[0].target])
        try:
            blocks = await kv.get(list(reply.kv.block_keys))

            async def feed():  # the blocks arrive one by one once decode is waiting for them
                await asyncio.to_thread(wait_until, lambda: _waiting_gets(chunked_stack) == 1, 30, "decode waiting")
                for key, block in zip(late, blocks):
                    await asyncio.sleep(0.1)
                    await kv.put([BlockData(key, block.token_count, block.data)], "late-lease", 60)
            return await _decode_early(chunked_stack, prompt, reply, late, "late-lease", feed)
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
    before = scrape(chunked_stack.decodes[0].metrics_port).get(failures, 0.0)

    async def scenario():
        kv = KVStoreClient([chunked_stack.kvstores[0].target])
        try:
            [first] = await kv.get(list(reply.kv.block_keys[:1]))

            async def feed():
                await kv.put([BlockData(gone[0], first.token_count, first.data)], "gone-lease", 60)
                await asyncio.to_thread(wait_until, lambda: _waiting_gets(chunked_stack) == 1, 30, "decode waiting")
                await kv.release("gone-lease")
            return await _decode_early(chunked_stack, prompt, reply, gone, "gone-lease", feed)
        finally:
            await kv.close()

    assert asyncio.run(scenario()) == want
    assert scrape(chunked_stack.decodes[0].metrics_port).get(failures, 0.0) == before + 1


def test_a_waiting_get_ends_at_its_deadline(chunked_stack):
    async def scenario():
        kv = KVStoreClient([chunked_stack.kvstores[0].target])
        try:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.get(["never-stored"], wait_s=0.3)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND and "wait_s" in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.get(["x"], wait_s=-1)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "wait_s" in err.value.details()
        finally:
            await kv.close()

    asyncio.run(scenario())


def test_a_decode_cancelled_while_its_blocks_arrive_is_counted_as_an_abort(chunked_stack):
    """The caller goes away while decode still waits for the KV: the fetch stops, and the request is counted."""
    prompt = list(range(11, 81))
    reply = _prefill(chunked_stack, prompt)
    never = [f"never-{i}" for i in range(len(reply.kv.block_keys))]
    port = chunked_stack.decodes[0].metrics_port
    aborts = ("pdserve_decode_requests_total", (("finished_reason", "abort"),))
    before = scrape(port).get(aborts, 0.0)

    async def scenario():
        async with grpc.aio.insecure_channel(chunked_stack.decodes[0].target) as ch:
            call = decode_pb2_grpc.DecodeStub(ch).Decode(_early_request(prompt, reply, never, "never-lease"))
            await asyncio.to_thread(wait_until, lambda: _waiting_gets(chunked_stack) == 1, 30, "decode waiting")
            call.cancel()

    asyncio.run(scenario())
    wait_until(lambda: _waiting_gets(chunked_stack) == 0, 30, "the fetch stopped")
    wait_until(lambda: scrape(port).get(aborts, 0.0) == before + 1, 30, "the abort counted")
