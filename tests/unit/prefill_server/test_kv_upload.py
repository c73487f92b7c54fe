"""Prefill's BlockUploader against recording kvstore clients: each chunk's blocks stored as the chunk completes,
one request's Puts at a time."""

import asyncio

from pdserve.engine.kv.blocks import block_keys
from pdserve.engine.params import SamplingParams
from pdserve.kvstore.lease import KVLease
from pdserve.prefill_server.kv_upload import BlockUploader
from pdserve.prefill_server.prefix_cache import LocalPrefixCache

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


def test_a_prompt_done_before_its_steps_last_forward_stores_its_rest_at_once(tiny_runtime):
    """The forward that completes a prompt while the step computes more starts the Put of its last blocks and tail
    (overlapping the step's later forwards); after the step's last forward the rest waits for finish()."""
    prompt = list(range(3, 43))  # 40 tokens: 2 full blocks and a tail of 8
    keys = block_keys(prompt, tiny_runtime.config.fingerprint, tiny_runtime.block_tokens)

    def calls_after_the_forward(step_goes_on: bool) -> list[list[str]]:
        kv = RecordingKV()
        seq = tiny_runtime.new_sequence(prompt, PARAMS, f"r{step_goes_on}")

        async def scenario():
            uploader = BlockUploader(kv, LocalPrefixCache(1 << 24), seq, keys, 0, KVLease(kv, "lease", 30.0))
            tiny_runtime.prefill([(seq, len(prompt))])
            uploader.chunk_done(step_goes_on)
            await asyncio.sleep(0)
            before_finish = list(kv.calls)
            await uploader.finish()
            return before_finish, uploader.puts

        return asyncio.run(scenario())

    (early, puts), (late, late_puts) = calls_after_the_forward(True), calls_after_the_forward(False)
    assert len(early) == 1 and early[0][:2] == keys and puts == 1  # all of it, at once, before finish()
    assert late == [] and late_puts == 1
