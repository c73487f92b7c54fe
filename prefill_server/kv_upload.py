"""Storing a prompt's KV blocks while the prompt is still being computed.

A prompt is computed in forwards (a step's chunks, cut to the worker's compute chunk). As each forward ends, the
blocks it completed are exported and Put in the background (leased for decode), while the next forward computes; a
forward that completes a prompt before its step's last starts the Put of the rest, partial tail included, at once,
while the other prompts of the step still compute (the chunk-wise form of the layer-wise transfer of Mooncake and vLLM's KV
connectors). A later forward never writes the positions of an earlier block, so exporting a finished block beside
the running forward is safe.
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
        self.puts = 0  # Put calls made (one per forward before the last that completed a block, then one)
        self.rest_sent = False  # the last blocks and the tail are on their way

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

    def chunk_done(self, step_goes_on: bool = False) -> None:
        """A forward over this prompt ended: start storing the blocks it completed. Once the whole prompt is in the
        cache, the rest (with the partial tail) starts here only while the step still has forwards to compute, which
        its Put then overlaps; after the step's last forward :meth:`finish` stores it."""
        if self.seq.kv.length < len(self.seq.prompt_ids):
            self._put(self._export_ready())
        elif step_goes_on:
            self._put_rest()

    def _put_rest(self) -> None:
        """Put the last full blocks and the partial tail, once."""
        if self.rest_sent:
            return
        self.rest_sent = True
        blocks, keys = self._export_ready(), self.stored_keys
        if len(keys) > len(self.keys):  # the partial tail
            tail_tokens = len(self.seq.prompt_ids) % self.seq.kv.block_tokens
            blocks.append(BlockData(keys[-1], tail_tokens, self.seq.kv.export_block(len(self.keys)),
                                    self.seq.kv.kv_dtype))
        self._put(blocks)

    @property
    def stored_keys(self) -> list[str]:
        """The keys of the handle: the full blocks', then the partial tail's."""
        return handle_keys(self.keys, self.lease.lease_id, len(self.seq.prompt_ids), self.seq.kv.block_tokens)

    async def finish(self) -> list[str]:
        """Store what is left, if the last forward has not, and wait for every Put; returns the handle's keys. A
        failed Put raises here, after the others are cancelled."""
        self._put_rest()
        keys = self.stored_keys
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
