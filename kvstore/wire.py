"""How blocks travel: a header message, then data messages well under gRPC's message limit."""

from __future__ import annotations

from pdserve.v1 import kvstore_pb2

CHUNK_BYTES = 1 << 20  # 1 MiB, far below gRPC's 4 MiB default


def chunks_of(header: kvstore_pb2.BlockHeader, data: bytes, message_type):
    """A block as ``message_type(header=...)`` then ``message_type(data=...)`` pieces of at most CHUNK_BYTES."""
    yield message_type(header=header)
    view = memoryview(data)
    for start in range(0, len(data), CHUNK_BYTES):
        yield message_type(data=bytes(view[start:start + CHUNK_BYTES]))
