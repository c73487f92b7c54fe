"""How blocks travel: a header message, then data messages well under gRPC's message limit.

The data messages dominate the bytes, so they skip the protobuf runtime on both ends while staying wire-compatible
with ``PutChunk``/``GetChunk`` (any protobuf client or server still reads them). A message holding only ``data``
(field 2, length-delimited) is one tag byte, a varint length and the payload:

- sending, :func:`encode_data` writes those into one new ``bytes`` object: the one copy a Python gRPC message needs
  (the protobuf route copied twice more: ``bytes(slice)``, then into the message, then out at serialization);
- receiving, :func:`decoder` recognises such a message and hands out a ``memoryview`` of the received ``bytes``
  (no copy), which :class:`BlockAssembler` copies once into the block's buffer, computing the CRC32 on the way while
  the chunk is still in cache. Anything else (headers, leases) goes through the generated parser.

See docs/kv-transfer.md for the copies on each path, counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kvstore.store import checksum
from protos import kvstore_pb2

CHUNK_BYTES = 1 << 20  # 1 MiB, far below gRPC's 4 MiB default
MAX_BLOCK_BYTES = 512 << 20  # a block larger than this is refused by the store and by a client reading one
DATA_TAG = 0x12  # field 2, wire type 2 (length-delimited): PutChunk.data and GetChunk.data


class DataPart:
    """A received data message, kept whole: ``data`` is a view of its payload, not a copy."""

    __slots__ = ("raw", "offset")
    lease_id = ""  # the fields a PutChunk holding only data leaves unset
    lease_ttl_s = 0.0
    shm_name = ""

    def __init__(self, raw: bytes, offset: int) -> None:
        self.raw, self.offset = raw, offset

    @property
    def data(self) -> memoryview:
        return memoryview(self.raw)[self.offset:]

    @staticmethod
    def HasField(name: str) -> bool:  # noqa: N802 (reads like the protobuf message it stands for)
        return name == "data"


class WireBlock:
    """A block's bytes kept as the serialized data messages that carried them.

    The kvstore stores a received block this way, so a Put copies nothing into the store and a Get sends the same
    message objects back (a PutChunk's data and a GetChunk's data are both field 2: the bytes are identical).
    """

    __slots__ = ("messages", "offsets", "nbytes")

    def __init__(self, messages: list[bytes], offsets: list[int]) -> None:
        self.messages, self.offsets = messages, offsets
        self.nbytes = sum(len(m) - o for m, o in zip(messages, offsets))

    @classmethod
    def from_bytes(cls, data) -> "WireBlock":
        """Encode a contiguous block (one copy)."""
        messages = list(_encode_chunks(data))
        return cls(messages, [_data_offset(m) for m in messages])

    def views(self) -> Iterator[memoryview]:
        for message, offset in zip(self.messages, self.offsets):
            yield memoryview(message)[offset:]

    def __len__(self) -> int:
        return self.nbytes

    def tobytes(self) -> bytes:
        return b"".join(self.views())

    def contiguous(self):
        """The payload as one buffer: a view (no copy) when one message holds it all, else a joined copy."""
        return next(self.views()) if len(self.messages) == 1 else self.tobytes()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def encode_data(payload: memoryview) -> bytes:
    """The serialized data message for ``payload``: exactly what ``PutChunk(data=...)`` serializes to."""
    return b"".join((bytes((DATA_TAG,)), _varint(len(payload)), payload))


def _data_offset(raw: bytes) -> int | None:
    """Where the payload of a message holding only field 2 (length-delimited) starts; None for any other message."""
    if len(raw) < 2 or raw[0] != DATA_TAG:
        return None
    length, shift, i = 0, 0, 1
    while i < len(raw) and i < 11:
        byte = raw[i]
        length |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            return i if i + length == len(raw) else None
        shift += 7
    return None


def decoder(message_type) -> Callable[[bytes], object]:
    """A gRPC deserializer: a :class:`DataPart` for a data-only message, else ``message_type.FromString``."""
    parse = message_type.FromString

    def decode(raw: bytes):
        offset = _data_offset(raw)
        return DataPart(raw, offset) if offset is not None else parse(raw)
    return decode


def serialize(message) -> bytes:
    """A gRPC serializer that passes pre-encoded data messages (``bytes``) through and serializes the rest."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def _encode_chunks(data) -> Iterator[bytes]:
    view = memoryview(data).cast("B")
    for start in range(0, len(view), CHUNK_BYTES):
        yield encode_data(view[start:start + CHUNK_BYTES])


def chunks_of(header: kvstore_pb2.BlockHeader, data, message_type) -> Iterator:
    """A block as ``message_type(header=...)``, then its data as serialized messages of at most CHUNK_BYTES (a
    :class:`WireBlock`'s own messages, as they are)."""
    yield message_type(header=header)
    yield from data.messages if isinstance(data, WireBlock) else _encode_chunks(data)


class BlockAssembler:
    """Collects one block's data messages, computing the CRC32 as they arrive; copies nothing it was handed whole."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.messages: list[bytes] = []
        self.offsets: list[int] = []
        self.received = 0
        self.crc32 = 0

    def add(self, message) -> bool:
        """Take one data message (a :class:`DataPart`, or a message the protobuf runtime parsed); False (nothing
        taken) if it would overflow the declared size."""
        if isinstance(message, DataPart):
            raw, offset = message.raw, message.offset
        else:  # a message that also carried other fields: its data re-encoded, one copy
            raw = encode_data(memoryview(message.data))
            offset = len(raw) - len(message.data)
        n = len(raw) - offset
        if self.received + n > self.nbytes:
            return False
        self.messages.append(raw)
        self.offsets.append(offset)
        self.crc32 = checksum(memoryview(raw)[offset:], self.crc32)
        self.received += n
        return True

    @property
    def complete(self) -> bool:
        return self.received == self.nbytes

    def block(self) -> WireBlock:
        return WireBlock(self.messages, self.offsets)
