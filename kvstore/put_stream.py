"""One Put stream on the kvstore's side: blocks assembled from their messages (or read from shared memory), charged
to the budget while they arrive, stored under the stream's lease, and dropped again if the stream fails.

The first message names the lease (and the shared-memory file, when the blocks come that way); each block is then a
header and its bytes, in one message or several. A stream that fails (a block past the budget, a bad checksum or
MAC, the caller gone) stores nothing: the blocks it had stored are dropped again, unless another lease holds them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import grpc

from pdserve.common.status import abort_code, abort_exhausted
from pdserve.kvstore import metrics, shm
from pdserve.kvstore.contract import check_lease_id, check_lease_ttl
from pdserve.kvstore.lease_rpcs import checked
from pdserve.kvstore.stored import ChecksumMismatch, MacMismatch, StoreFull, UnknownLease
from pdserve.kvstore.wire import BlockAssembler, InlineBlock, chunk_bytes
from pdserve.v1 import kvstore_pb2

if TYPE_CHECKING:
    from pdserve.kvstore.server import KVStoreService


class PutStream:
    """The state of one Put: its lease, the block being assembled and what the stream has stored so far."""

    def __init__(self, service: KVStoreService, context) -> None:
        self.service = service
        self.store = service.store
        self.context = context
        self.lease_id = ""
        self.ttl_s = 0.0
        self.shm_fd: int | None = None  # the shared-memory file the blocks are in, if they come that way
        self.header: kvstore_pb2.BlockHeader | None = None  # of the block being assembled
        self.block: BlockAssembler | None = None
        self.reserved = 0  # bytes of the block being assembled, charged to the store
        self.new_keys: list[str] = []  # blocks this stream stored that were not there before
        self.stored = 0
        self.duplicates = 0

    async def run(self, request_iterator) -> kvstore_pb2.PutReply:
        first = True
        try:
            async for chunk in request_iterator:
                if first:
                    await self._open(chunk)
                    first = False
                if chunk.HasField("header"):
                    await self._header(chunk)
                elif chunk.HasField("data"):
                    if self.header is None:
                        await abort_code(self.context, grpc.StatusCode.INVALID_ARGUMENT,
                                         "data: sent before any header" if self.shm_fd is None else
                                         "data: a Put through shm sends headers only")
                    await self._take(chunk)
            if self.header is not None:
                await self._finish_block()
        except BaseException:
            self.store.discard_new(self.new_keys, self.lease_id)  # nothing half-stored
            raise
        finally:
            self.store.unreserve(self.reserved)
            if self.shm_fd is not None:
                os.close(self.shm_fd)
            self.service._update_gauges()
        return kvstore_pb2.PutReply(stored=self.stored, duplicates=self.duplicates)

    async def _open(self, chunk) -> None:
        """The first message: the lease every block is stored under, and the shared-memory file if any."""
        self.lease_id = await checked(self.context, check_lease_id, chunk.lease_id)
        self.ttl_s = await checked(self.context, check_lease_ttl, chunk.lease_ttl_s)
        try:
            self.store.check_lease(self.lease_id)
        except UnknownLease as exc:
            await self.context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        if chunk.shm_name:
            self.shm_fd = await self.service._open_shm(chunk.shm_name, self.context)

    async def _header(self, chunk) -> None:
        """A block's header: the previous block is complete; this one's bytes follow (or lie in shared memory)."""
        if self.header is not None:
            await self._finish_block()
        h = chunk.header
        await self.service._check_header(h, self.context)
        if self.shm_fd is None:
            self.header, self.block = h, BlockAssembler(h.nbytes)
            if isinstance(chunk, InlineBlock) or h.data:
                await self._take(chunk if isinstance(chunk, InlineBlock) else h)
            return
        data = shm.read_block(self.shm_fd, h.shm_offset, h.nbytes)
        if len(data) != h.nbytes:
            await abort_code(self.context, grpc.StatusCode.INVALID_ARGUMENT,
                             f"header.shm_offset: block {h.key} lies past the end of the shm file")
        await self._store(h, data, None)
        self.service._count_shm(h.nbytes)

    async def _take(self, chunk) -> None:
        """Add a message's bytes to the block being assembled, charging them first."""
        n = chunk_bytes(chunk)
        try:
            self.store.reserve(n)
        except StoreFull as exc:
            await abort_exhausted(self.context, f"data: block {self.header.key} does not fit: {exc}")
        self.reserved += n
        if not self.block.add(chunk):
            await abort_code(self.context, grpc.StatusCode.INVALID_ARGUMENT,
                             f"data: block {self.header.key} exceeds its declared {self.header.nbytes} bytes")

    async def _finish_block(self) -> None:
        header, block = self.header, self.block
        if not block.complete:
            await abort_code(self.context, grpc.StatusCode.INVALID_ARGUMENT,
                             f"data: block {header.key} got {block.received} of {header.nbytes} bytes")
        await self._store(header, block.block(), block.crc32)
        self.header = self.block = None

    async def _store(self, h: kvstore_pb2.BlockHeader, data, computed_crc32: int | None) -> None:
        context = self.context
        self.store.unreserve(self.reserved)  # the block's own charge replaces what its bytes held while arriving
        self.reserved = 0
        try:
            new = self.store.put(h.key, h.token_count, data, h.crc32, self.lease_id, self.ttl_s, computed_crc32,
                                 mac=h.mac, kv_dtype=h.kv_dtype)
        except ChecksumMismatch as exc:
            metrics.CHECKSUM_FAILURES.inc()
            await context.abort(grpc.StatusCode.DATA_LOSS, f"data: {exc}")
        except MacMismatch as exc:
            metrics.MAC_FAILURES.inc()
            await context.abort(grpc.StatusCode.DATA_LOSS, f"header.mac: {exc}")
        except UnknownLease as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except StoreFull as exc:
            await abort_exhausted(context, str(exc))
        if new:
            self.new_keys.append(h.key)
        self.stored += new
        self.duplicates += not new
        metrics.PUT_BYTES.inc(h.nbytes)
        self.service._notify()
