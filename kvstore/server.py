"""The KVStore gRPC service over a BlockStore."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

import grpc

from pdserve.common.status import abort_code
from pdserve.kvstore import metrics, shm
from pdserve.kvstore.contract import UNKNOWN_LEASE, check_lease_id, check_wait_s
from pdserve.kvstore.lease_rpcs import LeaseRPCs, checked
from pdserve.kvstore.put import PutRPC
from pdserve.kvstore.store import BlockStore
from pdserve.kvstore.stored import Block, ChecksumMismatch, MacMismatch, block_views
from pdserve.kvstore.wire import chunks_of
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc

log = logging.getLogger("pdserve.kvstore")

MAX_KEY_CHARS = 256
MAX_KEYS_PER_CALL = 65536

OPS = ("put", "get", "lookup", "acquire", "renew", "release")


class KVStoreService(PutRPC, LeaseRPCs, kvstore_pb2_grpc.KVStoreServicer):
    def __init__(self, store: BlockStore, shm_files: shm.ShmRegistry | None = None) -> None:
        """``shm_files``: the shared-memory files clients registered (the kvstore run with --kv-shm), or None."""
        self.store = store
        self.shm_files = shm_files
        self._changed = asyncio.Event()  # replaced each time it is set (see _notify)
        self.shm_bytes = 0
        self._evictions_counted = 0
        metrics.CAPACITY.set(store.capacity_bytes)
        for op in OPS:
            metrics.OP_SECONDS.labels(op)
        for op in ("get", "lookup", "acquire"):
            metrics.HITS.labels(op)
            metrics.MISSES.labels(op)

    def _update_gauges(self) -> None:
        metrics.EVICTIONS.inc(self.store.evictions - self._evictions_counted)
        self._evictions_counted = self.store.evictions
        metrics.BYTES_USED.set(self.store.bytes_used)
        metrics.BLOCKS.set(len(self.store.blocks))
        metrics.LEASED.set(self.store.leased_blocks)
        metrics.LEASES.set(len(self.store.leases))
        metrics.PUTS_ARRIVING.set(self.store.reserved)

    @staticmethod
    async def _check_keys(keys, context) -> list[str]:
        keys = list(keys)
        if len(keys) > MAX_KEYS_PER_CALL:
            await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT, f"keys: at most {MAX_KEYS_PER_CALL} per call")
        for key in keys:
            if not key or len(key) > MAX_KEY_CHARS:
                await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                                    f"keys: each key must have 1..{MAX_KEY_CHARS} characters")
        return keys

    @staticmethod
    def _count_lookup(op: str, asked: int, found: int) -> None:
        metrics.HITS.labels(op).inc(found)
        metrics.MISSES.labels(op).inc(asked - found)

    async def _open_shm(self, name: str, context) -> int:
        if self.shm_files is None:
            await abort_code(context, grpc.StatusCode.FAILED_PRECONDITION,
                             "shm_name: this kvstore does not use shared memory (start it with --kv-shm)")
        try:
            return self.shm_files.open(name)
        except shm.ShmUnavailable as exc:
            await abort_code(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))

    def _count_shm(self, nbytes: int) -> None:
        self.shm_bytes += nbytes
        metrics.SHM_BYTES.inc(nbytes)

    def _notify(self) -> None:
        """Wake the Gets waiting for blocks: something was stored or a lease given up."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def Get(self, request, context):
        with metrics.OP_SECONDS.labels("get").time():
            async for message in self._get(request, context):
                yield message

    async def _block(self, key: str, lease_id: str, context) -> Block:
        """A stored block the lease holds, verified; NOT_FOUND (the same answer whether it is stored or not) or
        DATA_LOSS (the block dropped) otherwise."""
        if not self.store.held(key, lease_id):
            metrics.MISSES.labels("get").inc()
            await context.abort(grpc.StatusCode.NOT_FOUND, f"keys: block {key} is not held by lease {lease_id}")
        try:
            block = self.store.get(key)
        except ChecksumMismatch as exc:
            metrics.CHECKSUM_FAILURES.inc()
            self._update_gauges()
            await context.abort(grpc.StatusCode.DATA_LOSS, str(exc))
        except MacMismatch as exc:
            metrics.MAC_FAILURES.inc()
            self._update_gauges()
            await context.abort(grpc.StatusCode.DATA_LOSS, str(exc))
        metrics.HITS.labels("get").inc()
        return block

    async def _wait_block(self, key: str, deadline: float, lease_id: str, context) -> Block:
        """Wait for a block still being written (or not yet held by the lease: prefill may still be acquiring it);
        ABORTED once the lease is released, NOT_FOUND at the deadline, or at once for a lease this shard does not know
        (the router makes a lease before anyone reads under it: this shard was down then, or restarted since, so the
        block went to another shard or is gone)."""
        loop = asyncio.get_running_loop()
        while not self.store.held(key, lease_id):
            if not self.store.knows_lease(lease_id):
                metrics.MISSES.labels("get").inc()
                await context.abort(grpc.StatusCode.NOT_FOUND, f"{UNKNOWN_LEASE} {lease_id} on this kvstore")
            if lease_id in self.store.released:
                metrics.MISSES.labels("get").inc()
                await context.abort(grpc.StatusCode.ABORTED,
                                    f"keys: block {key} will not come: its writer released lease {lease_id}")
            remaining = deadline - loop.time()
            if remaining <= 0:
                metrics.MISSES.labels("get").inc()
                await context.abort(grpc.StatusCode.NOT_FOUND, f"keys: block {key} was not stored within wait_s")
            metrics.WAITING_GETS.inc()
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)
            finally:
                metrics.WAITING_GETS.dec()
        return await self._block(key, lease_id, context)

    async def _get(self, request, context):
        keys = await self._check_keys(request.keys, context)
        await checked(context, check_lease_id, request.lease_id)  # a Get reads only the blocks its lease holds
        wait_s = await checked(context, check_wait_s, request.wait_s)
        deadline = asyncio.get_running_loop().time() + wait_s
        shm_fd = await self._open_shm(request.shm_name, context) if request.shm_name else None
        offset = 0
        try:
            # without a wait, resolve (and verify) every block before streaming any; with one, stream each as it comes
            blocks = [await self._block(key, request.lease_id, context) for key in keys] if not wait_s else None
            for i, key in enumerate(keys):
                block = blocks[i] if blocks is not None else await self._wait_block(key, deadline, request.lease_id,
                                                                                     context)
                n = len(block.data)
                header = kvstore_pb2.BlockHeader(key=block.key, token_count=block.token_count, nbytes=n,
                                                 crc32=block.crc32, kv_dtype=block.kv_dtype, mac=block.mac)
                if shm_fd is None:
                    for message in chunks_of(header, block.data, kvstore_pb2.GetChunk):
                        yield message
                else:
                    shm.write_block(shm_fd, offset, block_views(block.data))
                    header.shm_offset, offset = offset, offset + n
                    self._count_shm(n)
                    yield kvstore_pb2.GetChunk(header=header)
                metrics.GET_BYTES.inc(n)
        finally:
            if shm_fd is not None:
                os.close(shm_fd)

    async def Lookup(self, request, context):
        with metrics.OP_SECONDS.labels("lookup").time():
            keys = await self._check_keys(request.keys, context)
            n = self.store.present_prefix(keys)
            self._count_lookup("lookup", len(keys), n)
            return kvstore_pb2.LookupReply(present_prefix=n)

    async def Stats(self, request, context):
        s = self.store
        s.expire_leases()
        self._update_gauges()
        return kvstore_pb2.StatsReply(blocks=len(s.blocks), bytes_used=s.bytes_used, capacity_bytes=s.capacity_bytes,
                                      leased_blocks=s.leased_blocks, leases=len(s.leases), evictions=s.evictions,
                                      checksum_failures=s.checksum_failures, shm_bytes=self.shm_bytes,
                                      mac_failures=s.mac_failures,
                                      shm_files=self.shm_files.files if self.shm_files is not None else 0)
