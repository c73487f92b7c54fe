"""The kvstore's Put RPC: a stream of blocks, each a header and its bytes (or a header naming them in shared memory).

A mixin of :class:`kvstore.server.KVStoreService`, using its store, checks and gauges. The bytes of a block still
arriving are charged to the store's budget as they come, so that unfinished Puts cannot hold memory the budget does
not see; a Put that fails (a block past the budget, a bad checksum, the caller gone) stores nothing: the blocks it had
stored are dropped again, unless another lease holds them.
"""

from __future__ import annotations

import os

import grpc

from pdserve.common.client_stream import refuse_after_stream
from pdserve.common.status import abort_code, abort_exhausted
from pdserve.kvstore import metrics, shm
from pdserve.kvstore.contract import check_lease_id, check_lease_ttl
from pdserve.kvstore.lease_rpcs import checked
from pdserve.kvstore.store import ChecksumMismatch, MacMismatch, StoreFull, UnknownLease
from pdserve.kvstore.wire import MAX_BLOCK_BYTES, BlockAssembler, InlineBlock, chunk_bytes
from pdserve.v1 import kvstore_pb2

MAX_DTYPE_CHARS = 16  # BlockHeader.kv_dtype: a name such as "bfloat16", stored with the block


class PutRPC:
    async def Put(self, request_iterator, context):
        async def timed(ctx):  # the Put itself: a refused one's drain is not the store's time
            with metrics.OP_SECONDS.labels("put").time():
                return await self._put(request_iterator, ctx)
        return await refuse_after_stream(timed, request_iterator, context)

    async def _put(self, request_iterator, context):
        """Store the blocks of one Put stream. The bytes of a block still arriving are charged to the budget as they
        come (RESOURCE_EXHAUSTED once they cannot fit); a stream that fails stores nothing: the blocks it had
        stored are dropped again, unless another lease holds them."""
        stored = duplicates = 0
        lease_id, ttl = "", 0.0
        header: kvstore_pb2.BlockHeader | None = None
        block: BlockAssembler | None = None
        shm_fd: int | None = None
        reserved = 0  # bytes of the block being assembled, charged to the store
        new_keys: list[str] = []

        async def take(chunk) -> None:
            """Add a message's bytes to the block being assembled, charging them first."""
            nonlocal reserved
            n = chunk_bytes(chunk)
            try:
                self.store.reserve(n)
            except StoreFull as exc:
                await abort_exhausted(context, f"data: block {header.key} does not fit: {exc}")
            reserved += n
            if not block.add(chunk):
                await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                                 f"data: block {header.key} exceeds its declared {header.nbytes} bytes")

        async def store_block(h: kvstore_pb2.BlockHeader, data, computed_crc32: int | None) -> None:
            nonlocal stored, duplicates, reserved
            self.store.unreserve(reserved)  # the block's own charge replaces what its bytes held while arriving
            reserved = 0
            try:
                new = self.store.put(h.key, h.token_count, data, h.crc32, lease_id, ttl, computed_crc32, mac=h.mac,
                                     kv_dtype=h.kv_dtype)
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
                new_keys.append(h.key)
            stored += new
            duplicates += not new
            metrics.PUT_BYTES.inc(h.nbytes)
            self._notify()

        async def finish_block() -> None:
            nonlocal header, block
            if not block.complete:
                await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                                 f"data: block {header.key} got {block.received} of {header.nbytes} bytes")
            await store_block(header, block.block(), block.crc32)
            header = block = None

        first = True
        try:
            async for chunk in request_iterator:
                if first:
                    lease_id, first = await checked(context, check_lease_id, chunk.lease_id), False
                    ttl = await checked(context, check_lease_ttl, chunk.lease_ttl_s)
                    try:
                        self.store.check_lease(lease_id)
                    except UnknownLease as exc:
                        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
                    if chunk.shm_name:
                        shm_fd = await self._open_shm(chunk.shm_name, context)
                if chunk.HasField("header"):
                    if header is not None:
                        await finish_block()
                    h = chunk.header
                    await self._check_header(h, context)
                    if shm_fd is None:
                        header, block = h, BlockAssembler(h.nbytes)
                        if isinstance(chunk, InlineBlock) or h.data:
                            await take(chunk if isinstance(chunk, InlineBlock) else h)
                        continue
                    data = shm.read_block(shm_fd, h.shm_offset, h.nbytes)
                    if len(data) != h.nbytes:
                        await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                                         f"header.shm_offset: block {h.key} lies past the end of the shm file")
                    await store_block(h, data, None)
                    self._count_shm(h.nbytes)
                elif chunk.HasField("data"):
                    if header is None:
                        await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                                         "data: sent before any header" if shm_fd is None else
                                         "data: a Put through shm sends headers only")
                    await take(chunk)
            if header is not None:
                await finish_block()
        except BaseException:
            self.store.discard_new(new_keys, lease_id)  # nothing half-stored
            raise
        finally:
            self.store.unreserve(reserved)
            if shm_fd is not None:
                os.close(shm_fd)
            self._update_gauges()
        return kvstore_pb2.PutReply(stored=stored, duplicates=duplicates)

    async def _check_header(self, h: kvstore_pb2.BlockHeader, context) -> None:
        await self._check_keys([h.key], context)
        if not 1 <= h.token_count <= 1 << 20:
            await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                             f"header.token_count: must be at least 1, got {h.token_count}")
        if not 0 < h.nbytes <= MAX_BLOCK_BYTES:
            await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                             f"header.nbytes: must be in 1..{MAX_BLOCK_BYTES}, got {h.nbytes}")
        if len(h.kv_dtype) > MAX_DTYPE_CHARS or (h.kv_dtype and not h.kv_dtype.isalnum()):
            await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT,
                             f"header.kv_dtype: at most {MAX_DTYPE_CHARS} letters and digits")
