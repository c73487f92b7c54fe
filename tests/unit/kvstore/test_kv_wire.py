"""The KV hand-off's wire path: data messages that skip the protobuf runtime yet stay protobuf on the wire, blocks
kept as the messages that carried them, and ``pdserve bench kv``'s table."""

import zlib

import pytest

from pdserve.kvstore.faults import corrupt_block
from pdserve.kvstore.store import BlockStore
from pdserve.kvstore.stored import block_charge, checksum
from pdserve.kvstore.wire import (
    CHUNK_BYTES,
    BlockAssembler,
    DataPart,
    InlineBlock,
    WireBlock,
    chunks_of,
    decoder,
    encode_block,
    encode_data,
)
from pdserve.v1 import kvstore_pb2


@pytest.mark.parametrize("size", [0, 1, 127, 128, 300, 16384, CHUNK_BYTES])
def test_encoded_data_is_what_protobuf_writes_and_reads(size):
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    raw = encode_data(memoryview(payload))
    assert raw == kvstore_pb2.PutChunk(data=payload).SerializeToString()
    assert raw == kvstore_pb2.GetChunk(data=payload).SerializeToString()
    assert kvstore_pb2.GetChunk.FromString(raw).data == payload
    if size:  # (an empty data message serializes to nothing at all)
        part = decoder(kvstore_pb2.PutChunk)(raw)
        assert isinstance(part, DataPart) and part.raw is raw  # a view of the received bytes, no copy
        assert part.data == payload and part.ByteSize() == len(raw)  # as a message's (a refused Put's drain)


@pytest.mark.parametrize("size", [1, 300, CHUNK_BYTES])
def test_a_block_in_its_header_is_what_protobuf_writes_and_reads(size):
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    header = kvstore_pb2.BlockHeader(key="k" * 64, token_count=16, nbytes=size, crc32=zlib.crc32(payload))
    raw = encode_block(header, memoryview(payload))
    with_data = kvstore_pb2.BlockHeader()
    with_data.CopyFrom(header)
    with_data.data = payload
    assert raw == kvstore_pb2.GetChunk(header=with_data).SerializeToString()
    assert kvstore_pb2.PutChunk.FromString(raw).header == with_data
    part = decoder(kvstore_pb2.GetChunk)(raw)
    assert isinstance(part, InlineBlock) and part.whole and part.HasField("header")
    assert part.header == header and part.part.raw is raw and part.part.data == payload  # a view, no copy
    assert part.ByteSize() == len(raw)
    block = BlockAssembler(size)
    assert block.add(part) and block.complete and block.block().whole
    assert list(chunks_of(header, block.block(), kvstore_pb2.GetChunk)) == [raw]  # sent back as it came
    # with a lease after the header (a protobuf writer's first message): read the same, but not sent back as is
    leased = kvstore_pb2.PutChunk(header=with_data, lease_id="L", lease_ttl_s=5).SerializeToString()
    part = decoder(kvstore_pb2.PutChunk)(leased)
    assert isinstance(part, InlineBlock) and not part.whole
    assert part.lease_id == "L" and part.lease_ttl_s == 5 and part.header == header and part.part.data == payload


def test_other_messages_go_through_protobuf():
    decode = decoder(kvstore_pb2.PutChunk)
    header = kvstore_pb2.PutChunk(header=kvstore_pb2.BlockHeader(key="k", nbytes=3), lease_id="L")
    assert decode(header.SerializeToString()) == header
    mixed = kvstore_pb2.PutChunk(data=b"abc", lease_id="L")  # data and another field: not the fast path
    parsed = decode(mixed.SerializeToString())
    assert not isinstance(parsed, DataPart) and parsed.data == b"abc" and parsed.lease_id == "L"
    block = BlockAssembler(3)
    assert block.add(parsed) and block.complete and block.block().tobytes() == b"abc"


def test_wire_block_round_trip_checksum_and_overflow():
    data = bytes(range(251)) * 9000  # > 2 chunks
    wb = WireBlock.from_bytes(data)
    assert len(wb.messages) == 3 and len(wb) == len(data) and wb.tobytes() == data
    assert checksum(wb) == zlib.crc32(data) == checksum(data)
    messages = list(chunks_of(kvstore_pb2.BlockHeader(key="k"), wb, kvstore_pb2.GetChunk))
    assert messages[1:] == wb.messages  # the stored messages are sent as they are
    block = BlockAssembler(len(data))
    decode = decoder(kvstore_pb2.GetChunk)
    for raw in messages[1:]:
        assert block.add(decode(raw))
    assert block.complete and block.crc32 == zlib.crc32(data) and block.block().tobytes() == data
    assert not block.add(decode(encode_data(memoryview(b"x"))))  # past the declared size: refused, not taken


def test_store_keeps_wire_blocks_and_catches_their_corruption():
    store = BlockStore(1 << 20)
    data = b"kv" * 1000
    store.put("k", 4, WireBlock.from_bytes(data), zlib.crc32(data))
    assert store.bytes_used == block_charge("k", store.blocks["k"].data) > len(data)
    assert store.get("k").data.tobytes() == data
    corrupt_block(store, "k")
    with pytest.raises(Exception, match="checksum"):
        store.get("k")
    assert "k" not in store.blocks and store.bytes_used == 0


