"""The wire format against real kvstores: the generated stub and the fast client interoperate, blocks arrive in
key order across shards, and pdserve bench kv's table."""

import asyncio
import zlib

import pytest

from pdserve.kvstore.client import BlockData
from pdserve.kvstore.mac import BlockMAC
from pdserve.kvstore.wire import CHUNK_BYTES
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc
from tests.helpers import router_lease


def test_generated_stub_and_fast_client_interoperate(kv_stack):
    """A plain protobuf client (here with lease and data in one message, off the fast path; the block signed as
    prefill signs it) and the kvstore client read each other's blocks."""
    target = kv_stack.kvstores[0].target
    lease = router_lease(kv_stack)
    mac = BlockMAC(kv_stack.identities.identity("prefill").kv_key)

    async def scenario():
        data = bytes(range(200)) * 10_000  # two data messages
        async with kv_stack.aio_channel(target, "prefill") as ch:
            stub = kvstore_pb2_grpc.KVStoreStub(ch)
            header = kvstore_pb2.BlockHeader(key="plain", token_count=16, nbytes=len(data), crc32=zlib.crc32(data),
                                             mac=mac.sign("plain", 16, data))
            reply = await stub.Put(iter([kvstore_pb2.PutChunk(header=header, lease_id=lease, lease_ttl_s=30),
                                         kvstore_pb2.PutChunk(data=data[:CHUNK_BYTES], lease_id="x"),
                                         kvstore_pb2.PutChunk(data=data[CHUNK_BYTES:])]))
            assert reply.stored == 1
            kv = kv_stack.kv_client("prefill", targets=[target])
            try:
                [got] = await kv.get(["plain"], lease_id=lease)
                assert bytes(got.data) == data
                await kv.put([BlockData("fast", 16, data)], lease, 30)
            finally:
                await kv.close()
            chunks = [c async for c in stub.Get(kvstore_pb2.GetRequest(keys=["fast"], lease_id=lease))]
            assert chunks[0].header.nbytes == len(data) and b"".join(c.data for c in chunks[1:]) == data
            mac.verify("fast", 16, data, chunks[0].header.mac)  # the fast client signed it as prefill does

    asyncio.run(scenario())


@pytest.fixture(scope="module")
def kv_stack():
    from pdserve.launcher.stack import Stack, StackSpec

    stack = Stack(StackSpec(n_prefill=0, n_decode=0, n_kvstore=2, kv_capacity_mb=16))
    stack.start(60)
    yield stack
    stack.stop()


def test_blocks_reach_on_block_in_key_order_across_shards(kv_stack):
    blocks = [BlockData(f"order-{i}", 1, bytes([i]) * (1000 + i)) for i in range(12)]
    lease = router_lease(kv_stack)

    async def scenario():
        kv = kv_stack.kv_client("prefill")
        try:
            await kv.put(blocks, lease, 30)
            assert {kv.shard_of(b.key) for b in blocks} == {0, 1}
            seen = []
            got = await kv.get([b.key for b in blocks], on_block=seen.append, lease_id=lease)
            assert [b.key for b in seen] == [b.key for b in blocks] == [b.key for b in got]
            assert [bytes(b.data) for b in seen] == [b.data for b in blocks]
        finally:
            await kv.close()

    asyncio.run(scenario())


def test_bench_kv_prints_its_table(capsys):
    """At a tiny size: the table's shape and its figures' consistency, never their values."""
    from pdserve.cli.main import main

    assert main(["bench", "kv", "--total-mb", "0.25", "--block-kb", "64", "--streams", "1,2", "--repeat", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("kvstore hand-off")
    assert lines[1].split()[:6] == ["op", "streams", "MB", "kv", "MB/s", "insecure"]
    rows = [line.split() for line in lines[2:]]
    assert [(r[0], r[1]) for r in rows] == [("put", "1"), ("put", "2"), ("get", "1"), ("get", "2")]
    for r in rows:
        kv, insecure, bare, memcpy, vs_insecure, vs_bare = (float(x) for x in r[3:9])
        assert kv > 0 and insecure > 0 and bare > 0 and memcpy > 0
        assert vs_insecure == pytest.approx(kv / insecure, rel=0.05, abs=0.01)
        assert vs_bare == pytest.approx(kv / bare, rel=0.05, abs=0.01)


def test_bench_kv_rejects_bad_flags(capsys):
    from pdserve.cli.main import main

    assert main(["bench", "kv", "--total-mb", "0"]) == 2
    assert "--total-mb" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "kv", "--streams", "0"])
