"""A decode worker's KV imports: one registry for the two ways a request's KV arrives.

The router may ask for a request's KV while prefill still computes it (``Decode.Prefetch``): :meth:`KVImports.start`
begins importing the blocks as prefill stores them. The ``Decode`` call that follows :meth:`KVImports.take`\\ s that
import when it has one for the same handle (fetching what it has not brought yet), or imports the KV itself. Either
way the lease is kept renewed while blocks arrive and released once the worker has its copy. An import nobody takes
(the Decode call went to another worker) is dropped when its lease would have expired.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from pdserve.decode_server.metrics import KV_FETCH, PREFETCH_OUTCOMES, PREFETCHES
from pdserve.engine.kv.cache import SequenceKV
from pdserve.engine.sequence import Sequence
from pdserve.kvstore.client import KVIntegrityError, KVStoreClient
from pdserve.kvstore.contract import from_block, same_blocks
from pdserve.kvstore.lease import KVLease
from pdserve.worker.clock import StepClock

KV_ERRORS = (KVIntegrityError, ValueError, grpc.aio.AioRpcError)  # a fetch that failed: the KV is not (all) here
DEFAULT_MAX_PREFETCHES = 16
DEFAULT_PREFETCH_HOLD_S = 60.0  # the longest a prefetch slot is held, whatever lease TTL its request names


class ImportExists(Exception):
    """An import for this request id is already running."""


class ImportsFull(Exception):
    """As many imports are held as the worker allows (``--max-prefetches``)."""


def kv_error_detail(exc: Exception) -> str:
    return exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)


@dataclass
class KVImport:
    """A request's KV being imported ahead of its Decode call."""

    handle: object  # the KVHandle it fetches
    lease: KVLease  # the request's lease in this worker: kept renewed by the import, released by the Decode call
    cache: SequenceKV  # the request's KV cache, filling as blocks arrive
    task: asyncio.Task  # (wall seconds, modeled transfer seconds) of the import
    expiry: asyncio.TimerHandle | None = None
    taken: bool = False


class KVImports:
    def __init__(self, kv_client: KVStoreClient, clock: StepClock, new_cache: Callable[[int], SequenceKV], link: str = "nvlink",
                 max_pending: int = DEFAULT_MAX_PREFETCHES, hold_s: float = DEFAULT_PREFETCH_HOLD_S) -> None:
        """``new_cache(tokens)``: an empty cache for a prompt of that many tokens. A prefetch holds its slot until a
        Decode call takes it, or for its lease TTL (validated by the caller) but never longer than ``hold_s``."""
        if not 0 < hold_s < float("inf") or max_pending < 1:
            raise ValueError("prefetch: --prefetch-hold-s must be positive and finite, --max-prefetches at least 1")
        self.hold_s = hold_s
        self.kv_client = kv_client
        self.clock = clock
        self.new_cache = new_cache
        self.link = link
        self.max_pending = max_pending
        self.pending: dict[str, KVImport] = {}
        for outcome in PREFETCH_OUTCOMES:
            PREFETCHES.labels(outcome)

    # --- Prefetch ---------------------------------------------------------------------------------------------------
    def start(self, request_id: str, handle) -> KVImport:
        """Begin importing a request's KV ahead of its Decode call; the copy waits for that call until the lease
        would have expired."""
        if request_id in self.pending:
            raise ImportExists(f"request_id: {request_id} is being prefetched")
        if len(self.pending) >= self.max_pending:
            raise ImportsFull(f"decode: {self.max_pending} prefetches in flight (--max-prefetches)")
        cache = self.new_cache(handle.token_count + 1)
        lease = _lease(self.kv_client, handle)
        imp = KVImport(handle, lease, cache, asyncio.ensure_future(self._import(cache, handle, lease)))
        self.pending[request_id] = imp
        hold = min(max(handle.lease_ttl_s, 1.0), self.hold_s)
        imp.expiry = asyncio.get_running_loop().call_later(hold, self.drop, request_id, imp)
        return imp

    def drop(self, request_id: str, imp: KVImport, failed: bool = False) -> None:
        """Forget an import nobody took (its memory goes with it); one a Decode call took stays with that call."""
        if imp.taken or self.pending.get(request_id) is not imp:
            return
        del self.pending[request_id]
        imp.task.cancel()
        imp.expiry.cancel()
        PREFETCHES.labels("failed" if failed else "dropped").inc()

    # --- Decode -----------------------------------------------------------------------------------------------------
    async def take(self, seq: Sequence, handle) -> tuple[float, float]:
        """The request's KV into ``seq``: the prefetched copy of the same handle (what it has not brought yet is
        fetched now), or imported now. Returns the wall seconds this call spent on it and the modeled transfer
        seconds. The lease is released at the end, also when the fetch fails (KV_ERRORS)."""
        imp = self.pending.get(seq.request_id)
        if imp is not None and not same_blocks(imp.handle, handle):
            imp = None
        lease = imp.lease if imp is not None else _lease(self.kv_client, handle)
        async with lease:  # we have our copy: evictable after
            if imp is None:
                return await self._import(seq.kv, handle, lease)
            return await self._adopt(seq, imp, handle)

    async def _adopt(self, seq: Sequence, imp: KVImport, handle) -> tuple[float, float]:
        """Take a prefetched copy. Prefill has returned, so every block is stored: an import still running is either
        receiving the last blocks or waiting for some that were lost (a kvstore restarted empty). It is stopped, and
        the blocks it has not imported are fetched here without waiting, as a Decode call without a prefetch would;
        a failed import is finished the same way."""
        start = time.perf_counter()
        del self.pending[seq.request_id]
        imp.taken = True
        imp.expiry.cancel()
        seq.kv = imp.cache
        if not imp.task.done() and seq.kv.length < handle.token_count:  # (with every block here, it only paces)
            imp.task.cancel()
        await asyncio.wait({imp.task})
        whole = not imp.task.cancelled() and imp.task.exception() is None
        PREFETCHES.labels("adopted" if whole else "partial").inc()
        if whole:
            return time.perf_counter() - start, imp.task.result()[1]
        imported = seq.kv.length // seq.kv.block_tokens  # blocks arrive whole and in order
        _, modeled = await self._import(seq.kv, from_block(handle, imported), imp.lease)
        return time.perf_counter() - start, modeled

    # --- the import itself ------------------------------------------------------------------------------------------
    async def _import(self, cache: SequenceKV, handle, lease: KVLease) -> tuple[float, float]:
        """Import the handle's blocks into ``cache`` under ``lease``; returns (wall seconds, modeled transfer seconds)."""
        start = time.perf_counter()
        async with lease.keep():  # no expiry during a slow fetch
            # each block is imported as it arrives, while the rest is on the wire; with wait_s, blocks prefill is
            # still storing stream in as they are stored
            if handle.block_keys:  # (none left when a prefetch brought them all)
                await self.kv_client.get(list(handle.block_keys), wait_s=handle.wait_s, lease_id=handle.lease_id,
                                  on_block=lambda b: cache.append_block(b.data, b.token_count, b.kv_dtype))
            if cache.length != handle.token_count:
                raise KVIntegrityError(f"blocks hold {cache.length} tokens, the handle says {handle.token_count}")
            modeled = await self.clock.pace_transfer(handle.token_count, self.link, time.perf_counter() - start)
        elapsed = time.perf_counter() - start
        KV_FETCH.observe(elapsed)
        return elapsed, modeled


def _lease(kv_client: KVStoreClient, handle) -> KVLease:
    """The worker's one hold on a request's lease (made by the router, handed over by prefill in ``handle``)."""
    return KVLease(kv_client, handle.lease_id, handle.lease_ttl_s)
