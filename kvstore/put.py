"""The kvstore's Put RPC: a stream of blocks, each a header and its bytes (or a header naming them in shared memory).

A mixin of :class:`kvstore.server.KVStoreService`, using its store, checks and gauges. The bytes of a block still
arriving are charged to the store's budget as they come, so that unfinished Puts cannot hold memory the budget does
not see; a Put that fails (a block past the budget, a bad checksum, the caller gone) stores nothing: the blocks it had
stored are dropped again, unless another lease holds them.
"""

from __future__ import annotations

import grpc

from pdserve.common.client_stream import refuse_after_stream
from pdserve.common.status import abort_code
from pdserve.kvstore import metrics
from pdserve.kvstore.put_stream import PutStream
from pdserve.kvstore.wire import MAX_BLOCK_BYTES
from pdserve.v1 import kvstore_pb2

MAX_DTYPE_CHARS = 16  # BlockHeader.kv_dtype: a name such as "bfloat16", stored with the block


class PutRPC:
    async def Put(self, request_iterator, context):
        async def timed(ctx):  # the Put itself: a refused one's drain is not the store's time
            with metrics.OP_SECONDS.labels("put").time():
                return await self._put(request_iterator, ctx)
        return await refuse_after_stream(timed, request_iterator, context)

    async def _put(self, request_iterator, context):
        """Store the blocks of one Put stream (``kvstore/put_stream.py``)."""
        return await PutStream(self, context).run(request_iterator)

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
