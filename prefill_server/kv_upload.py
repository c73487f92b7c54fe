"""Storing a prompt's KV blocks while the prompt is still being computed.

A prompt longer than one step's token budget is prefilled in chunks. As each chunk's step ends, the blocks it
completed are exported and Put in the background (leased for decode), while the next chunk computes: what is left
when the last chunk ends is that chunk's blocks and the partial tail, not the whole prompt (the chunk-wise form of
the layer-wise transfer of Mooncake and vLLM's KV connectors). A later chunk never writes the positions of an earlier
block, so exporting a finished block beside the running step is safe.
"""

from __future__ import annotations

import asyncio
import contextlib

from pdserve.engine.sequence import Sequence
from pdserve.kvstore.client import BlockData, KVStoreClient
from pdserve.kvstore.contract import handle_keys
from pdserve.kvstore.lease import KVLease
from pdserve.prefill_server.prefix_cache import LocalPrefixCache


class BlockUploader:
    """Puts ``seq``'s full blocks ``keys[first:]`` as they are completed; :meth:`finish` adds the tail and waits.

    ``turns`` is shared by a worker's uploaders: their Puts go one at a time, in the order they were started. The
    requests of one step then get their blocks stored, and their replies, one after another (mean wait about half a
    step's hand-off) instead of all at the end of it, as concurrent streams sharing the link would.
    """

    def __init__(self, kv_client: KVStoreClient, cache: LocalPrefixCache, seq: Sequence, keys: list[str], first: int,
                 lease: KVLease, turns: asyncio.Lock | None = None) -> None:
        self.kv_client, self.cache, self.seq, self.keys = kv_client, cache, seq, keys
        self.turns = turns or asyncio.Lock()
        self.next = first  # the next block to store
        self.lease = lease  # the blocks are stored under it
        self.pending: list[asyncio.Task] = []
        self.puts = 0  # Put calls made (one per chunk before the last that completed a block, then one)

    def _export_ready(self) -> list[BlockData]:
        bt = self.seq.kv.block_tokens
        ready = min(self.seq.kv.length // bt, len(self.keys))
        blocks = []
        for i in range(self.next, ready):
            data = self.seq.kv.export_block(i)
            blocks.append(BlockData(self.keys[i], bt, data, self.seq.kv.kv_dtype))
            self.cache.add(self.keys[i], data)
        self.next = max(self.next, ready)
        return blocks

    def _put(self, blocks: list[BlockData]) -> None:
        if blocks:
            self.puts += 1
            self.pending.append(asyncio.ensure_future(self._put_in_turn(blocks)))

    async def _put_in_turn(self, blocks: list[BlockData]) -> None:
        async with self.turns:
            await self.kv_client.put(blocks, self.lease.lease_id, self.lease.ttl_s)

    def chunk_done(self) -> None:
        """A prompt chunk's step ended: start storing the blocks it completed. After the last chunk nothing starts
        here: :meth:`finish` stores the rest with the tail, in one Put."""
        if self.seq.kv.length < len(self.seq.prompt_ids):
            self._put(self._export_ready())

    async def finish(self) -> list[str]:
        """Store what is left (the last full blocks and the partial tail) and wait for every Put; returns the
        handle's keys. A failed Put raises here, after the others are cancelled."""
        blocks = self._export_ready()
        n, bt = len(self.seq.prompt_ids), self.seq.kv.block_tokens
        keys = handle_keys(self.keys, self.lease.lease_id, n, bt)
        if len(keys) > len(self.keys):  # the partial tail
            blocks.append(BlockData(keys[-1], n % bt, self.seq.kv.export_block(len(self.keys)), self.seq.kv.kv_dtype))
        self._put(blocks)
        try:
            await asyncio.gather(*self.pending)
        except BaseException:
            self.cancel()
            raise
        return keys

    def cancel(self) -> None:
        """The request failed or was cancelled: stop the Puts in flight (their blocks die with the lease)."""
        for task in self.pending:
            if not task.done():
                task.cancel()
            else:
                with contextlib.suppress(BaseException):
                    task.exception()  # retrieved: no "exception was never retrieved" warning
