"""How blocks travel: a header that carries the block's bytes when they fit one message (``BlockHeader.data``), or a
header and then data messages, all well under gRPC's message limit.

These messages carry nearly all the bytes, so they skip the protobuf runtime on both ends while staying
wire-compatible with ``PutChunk``/``GetChunk`` (any protobuf client or server still reads and writes them):

- sending, :func:`encode_block` / :func:`encode_data` write the message into one new ``bytes`` object: the one copy
  a Python gRPC message needs (the protobuf route copied three times: ``bytes(slice)``, into the message's field,
  out at serialization);
- receiving, :func:`decoder` recognises them and hands out views of the received ``bytes`` (no copy), which
  :class:`BlockAssembler` keeps as they are, computing the CRC32 on the way. Anything else (a bare header, leases)
  goes through the generated parser.

See docs/kv-transfer.md for the copies on each path, counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from pdserve.kvstore.stored import checksum
from pdserve.v1 import kvstore_pb2

CHUNK_BYTES = 1 << 20  # 1 MiB, far below gRPC's 4 MiB default
MAX_BLOCK_BYTES = 512 << 20  # a block larger than this is refused by the store and by a client reading one
DATA_TAG = 0x12  # field 2, wire type 2 (length-delimited): PutChunk.data and GetChunk.data
HEADER_TAG = 0x0A  # field 1, length-delimited: PutChunk.header and GetChunk.header
INLINE_TAG = 0x32  # field 6, length-delimited: BlockHeader.data


class DataPart:
    """Block bytes inside a received message, kept whole: ``data`` is a view of them, not a copy."""

    __slots__ = ("raw", "start", "end")
    lease_id = ""  # the fields a PutChunk holding only data leaves unset
    lease_ttl_s = 0.0
    shm_name = ""

    def __init__(self, raw: bytes, start: int, end: int) -> None:
        self.raw, self.start, self.end = raw, start, end

    @property
    def data(self) -> memoryview:
        return memoryview(self.raw)[self.start:self.end]

    @staticmethod
    def HasField(name: str) -> bool:  # noqa: N802 (reads like the protobuf message it stands for)
        return name == "data"

    def ByteSize(self) -> int:  # noqa: N802
        """The size of the message as received."""
        return len(self.raw)


class InlineBlock:
    """A received header that carries its block's bytes (``BlockHeader.data``): one message for a whole block.

    ``message`` is the parsed message without those bytes; ``part`` views them in the received ``bytes``; ``whole``
    says the received message is nothing but that header, so a Get can send it back as it is."""

    __slots__ = ("message", "part", "whole")

    def __init__(self, message, part: DataPart, whole: bool) -> None:
        self.message, self.part, self.whole = message, part, whole

    def __getattr__(self, name: str):  # header, lease_id, lease_ttl_s, shm_name: the parsed message's
        return getattr(self.message, name)

    @staticmethod
    def HasField(name: str) -> bool:  # noqa: N802
        return name == "header"

    def ByteSize(self) -> int:  # noqa: N802
        """The size of the message as received (the parsed message's would leave out the block's bytes)."""
        return len(self.part.raw)


class WireBlock:
    """A block's bytes kept as the serialized messages that carried them.

    The kvstore stores a received block this way, so a Put copies nothing into the store and a Get sends the same
    message objects back: a PutChunk's data and a GetChunk's data are both field 2, their headers both field 1, so
    the bytes are identical. ``whole``: the one message is a header carrying the whole block (nothing else in it).
    """

    __slots__ = ("messages", "spans", "whole", "nbytes")

    def __init__(self, messages: list[bytes], spans: list[tuple[int, int]], whole: bool = False) -> None:
        self.messages, self.spans, self.whole = messages, spans, whole
        self.nbytes = sum(end - start for start, end in spans)

    @classmethod
    def from_bytes(cls, data) -> "WireBlock":
        """Encode a contiguous block as data messages (one copy)."""
        messages = list(_encode_chunks(data))
        return cls(messages, [(_data_offset(m), len(m)) for m in messages])

    def views(self) -> Iterator[memoryview]:
        for message, (start, end) in zip(self.messages, self.spans):
            yield memoryview(message)[start:end]

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


def _read_varint(raw: bytes, i: int) -> tuple[int, int]:
    """(value, index after it); IndexError or ValueError if malformed."""
    value = shift = 0
    while True:
        byte = raw[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def encode_data(payload: memoryview) -> bytes:
    """The serialized data message for ``payload``: exactly what ``PutChunk(data=...)`` serializes to."""
    return b"".join((bytes((DATA_TAG,)), _varint(len(payload)), payload))


def encode_block(header: kvstore_pb2.BlockHeader, payload: memoryview) -> bytes:
    """One message for a whole block: exactly what ``PutChunk(header=<header with data=payload>)`` serializes to
    (``header`` itself has no data set), written with one copy of the payload."""
    fields = header.SerializeToString()
    length = _varint(len(payload))
    inner = len(fields) + 1 + len(length) + len(payload)
    return b"".join((bytes((HEADER_TAG,)), _varint(inner), fields, bytes((INLINE_TAG,)), length, payload))


def _data_offset(raw: bytes) -> int | None:
    """Where the payload of a message holding only field 2 (length-delimited) starts; None for any other message."""
    if len(raw) < 2 or raw[0] != DATA_TAG:
        return None
    try:
        length, i = _read_varint(raw, 1)
    except (IndexError, ValueError):
        return None
    return i if i + length == len(raw) else None


def _inline_spans(raw: bytes) -> tuple[int, int, int, int, int] | None:
    """For a message whose field 1 (the header) holds field 6 (its block's bytes): (header start, data field
    start, payload start, payload end, header end); None for any other message."""
    if len(raw) < 2 or raw[0] != HEADER_TAG:
        return None
    try:
        length, start = _read_varint(raw, 1)
        end, i, found = start + length, start, None
        if end > len(raw):
            return None
        while i < end:
            tag, j = _read_varint(raw, i)
            kind = tag & 7
            if kind == 0:
                _, j = _read_varint(raw, j)
            elif kind == 2:
                n, j = _read_varint(raw, j)
                if tag >> 3 == 6:
                    found = (i, j, j + n)
                j += n
            elif kind in (1, 5):
                j += 8 if kind == 1 else 4
            else:
                return None
            i = j
    except (IndexError, ValueError):
        return None
    if i != end or found is None:
        return None
    return (start, *found, end)


def decoder(message_type) -> Callable[[bytes], object]:
    """A gRPC deserializer: a :class:`DataPart` for a data-only message, an :class:`InlineBlock` for a header that
    carries its block, else ``message_type.FromString``."""
    parse = message_type.FromString

    def decode(raw: bytes):
        offset = _data_offset(raw)
        if offset is not None:
            return DataPart(raw, offset, len(raw))
        spans = _inline_spans(raw)
        if spans is None:
            return parse(raw)
        start, field, payload, payload_end, end = spans
        message = parse(raw[end:]) if end < len(raw) else message_type()
        message.header.MergeFromString(raw[start:field] + raw[payload_end:end])  # the header's fields, no data
        return InlineBlock(message, DataPart(raw, payload, payload_end), end == len(raw) and payload_end == end)
    return decode


def serialize(message) -> bytes:
    """A gRPC serializer that passes pre-encoded messages (``bytes``) through and serializes the rest."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def _encode_chunks(data) -> Iterator[bytes]:
    view = memoryview(data).cast("B")
    for start in range(0, len(view), CHUNK_BYTES):
        yield encode_data(view[start:start + CHUNK_BYTES])


def chunks_of(header: kvstore_pb2.BlockHeader, data, message_type) -> Iterator:
    """A block as messages: one header carrying the bytes when they fit one message, else the header and then data
    messages of at most CHUNK_BYTES. A :class:`WireBlock`'s own messages go out as they are."""
    if isinstance(data, WireBlock):
        if not data.whole:
            yield message_type(header=header)
        yield from data.messages
    elif len(data) <= CHUNK_BYTES:
        yield encode_block(header, memoryview(data).cast("B"))
    else:
        yield message_type(header=header)
        yield from _encode_chunks(data)


def chunk_bytes(message) -> int:
    """The bytes a received message will keep alive once its block's data is taken from it."""
    if isinstance(message, InlineBlock):
        return len(message.part.raw)
    if isinstance(message, DataPart):
        return len(message.raw)
    return len(message.data) + 8  # re-encoded as a data message (BlockAssembler.add)


class BlockAssembler:
    """Collects one block's data as it arrives, computing the CRC32 on the way; copies nothing it was handed whole."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.messages: list[bytes] = []
        self.spans: list[tuple[int, int]] = []
        self.whole = False
        self.received = 0
        self.crc32 = 0

    def add(self, message, whole: bool = False) -> bool:
        """Take the bytes of one message (a :class:`DataPart`, an :class:`InlineBlock`, or a message the protobuf
        runtime parsed); False (nothing taken) if they would overflow the declared size."""
        if isinstance(message, InlineBlock):
            message, whole = message.part, message.whole
        if isinstance(message, DataPart):
            raw, start, end = message.raw, message.start, message.end
        else:  # a message that also carried other fields: its data re-encoded, one copy
            raw = encode_data(memoryview(message.data))
            start, end = len(raw) - len(message.data), len(raw)
        if self.received + end - start > self.nbytes:
            return False
        self.whole = whole and not self.messages
        self.messages.append(raw)
        self.spans.append((start, end))
        self.crc32 = checksum(memoryview(raw)[start:end], self.crc32)
        self.received += end - start
        return True

    @property
    def complete(self) -> bool:
        return self.received == self.nbytes

    def block(self) -> WireBlock:
        return WireBlock(self.messages, self.spans, self.whole and len(self.messages) == 1)
