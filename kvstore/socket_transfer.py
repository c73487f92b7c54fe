"""The socket path of the kvstore client: a Put's messages out, a Get's stream of messages back into blocks.

Blocks travel as ``kvstore/wire.py`` frames them: a block that fits one message is its header with the bytes inside,
a larger one a header and then data messages. Nothing here is copied that the wire format does not need.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

from pdserve.kvstore.block_data import BlockData, KVIntegrityError
from pdserve.kvstore.wire import MAX_BLOCK_BYTES, BlockAssembler, InlineBlock, chunks_of
from pdserve.v1 import kvstore_pb2


def put_messages(blocks: list[BlockData], positions: list[int], header_of: Callable[[BlockData], object],
                 lease_id: str, lease_ttl_s: float) -> Iterator[kvstore_pb2.PutChunk]:
    """The messages of one shard's Put: the lease, then each block's header and bytes."""
    if lease_id:  # on a message of its own, so that each block's message is its header and bytes alone
        yield kvstore_pb2.PutChunk(lease_id=lease_id, lease_ttl_s=lease_ttl_s)
    for i in positions:
        b = blocks[i]
        yield from chunks_of(header_of(b), b.data, kvstore_pb2.PutChunk)  # the one copy


async def received_blocks(call) -> AsyncIterator[tuple[kvstore_pb2.BlockHeader, int, bool, object]]:
    """Each block of a Get's stream as it completes: (header, CRC32 of the bytes received, whether they are all
    there, the bytes). A stream that breaks the framing raises KVIntegrityError."""
    header, block = None, None
    async for chunk in call:
        if chunk.HasField("header"):
            if header is not None:
                yield header, block.crc32, block.complete, block.block().contiguous()
            if chunk.header.nbytes > MAX_BLOCK_BYTES:
                raise KVIntegrityError(f"block {chunk.header.key}: {chunk.header.nbytes} bytes is too big")
            header, block = chunk.header, BlockAssembler(chunk.header.nbytes)
            if (isinstance(chunk, InlineBlock) or header.data) and not block.add(
                    chunk if isinstance(chunk, InlineBlock) else header):
                raise KVIntegrityError(f"block {header.key}: more bytes than its declared size")
        elif header is None or not block.add(chunk):
            raise KVIntegrityError("kvstore sent data outside a block's declared size")
    if header is not None:
        yield header, block.crc32, block.complete, block.block().contiguous()
