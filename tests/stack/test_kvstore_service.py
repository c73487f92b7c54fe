"""The kvstore service on loopback: eviction under its budget, leases, corruption caught, sharding, bad input."""

import asyncio

import grpc
import pytest

from pdserve.kvstore.client import BlockData, KVIntegrityError, KVStoreClient


@pytest.fixture(scope="module")
def small_kvstores():
    from pdserve.launcher.stack import Stack, StackSpec

    stack = Stack(StackSpec(n_prefill=0, n_decode=0, n_kvstore=2, kv_capacity_mb=0.001, fault_injection=True))
    stack.start(60)
    assert stack.router is None and len(stack.processes) == 2
    yield stack
    stack.stop()


def run(coro):
    return asyncio.run(coro)


def test_service_eviction_leases_and_corruption(small_kvstores):
    target = small_kvstores.kvstores[0].target  # one shard, capacity 1048 bytes

    async def scenario():
        kv = KVStoreClient([target])
        try:
            blocks = [BlockData(f"blk{i}", 16, bytes([i]) * 300) for i in range(3)]
            assert await kv.put(blocks[:1], lease_id="lease-1", lease_ttl_s=60) == 1
            assert await kv.put(blocks[:1], lease_id="lease-1", lease_ttl_s=60) == 0  # idempotent
            await kv.put(blocks[1:3])  # 900 bytes in use
            await kv.put([BlockData("blk3", 16, b"\x07" * 300)])  # evicts blk1 (LRU, unleased), never blk0
            assert await kv.lookup(["blk0"]) == 1 and await kv.lookup(["blk1"]) == 0
            [stats] = await kv.stats()
            assert stats.evictions == 1 and stats.leased_blocks == 1
            # a corrupted block is detected and never served
            await kv.corrupt("blk2")
            with pytest.raises(KVIntegrityError):
                await kv.get(["blk2"])
            [stats] = await kv.stats()
            assert stats.checksum_failures == 1
            assert await kv.lookup(["blk2"]) == 0
            # everything leased and full: a clear RESOURCE_EXHAUSTED
            await kv.put([BlockData("big1", 16, b"a" * 300), BlockData("big2", 16, b"b" * 300)], "lease-2", 60)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.put([BlockData("big3", 16, b"c" * 300)], "lease-3", 60)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert await kv.release("lease-1") == 1
            assert await kv.release("lease-2") == 2
            got = await kv.get(["big1", "blk0"])
            assert [b.data[:1] for b in got] == [b"a", b"\x00"]
        finally:
            await kv.close()

    run(scenario())


def test_service_sharded_put_get_lookup(small_kvstores):
    targets = [p.target for p in small_kvstores.kvstores]

    async def scenario():
        kv = KVStoreClient(targets)
        try:
            blocks = [BlockData(f"shard-test-{i}", 1, bytes([i]) * 50, ("", "float16", "bfloat16")[i % 3])
                      for i in range(8)]
            await kv.put(blocks, "sh", 60)
            assert {kv.shard_of(b.key) for b in blocks} == {0, 1}
            assert await kv.lookup([b.key for b in blocks] + ["missing"]) == 8
            got = await kv.get([b.key for b in reversed(blocks)])
            assert [g.data for g in got] == [b.data for b in reversed(blocks)]
            assert [g.kv_dtype for g in got] == [b.kv_dtype for b in reversed(blocks)]  # kept, sent back
            assert await kv.release("sh") == 8
        finally:
            await kv.close()

    run(scenario())


def test_service_rejects_bad_input(small_kvstores):
    target = small_kvstores.kvstores[0].target

    async def scenario():
        kv = KVStoreClient([target])
        try:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.lookup([""])
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "keys" in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.acquire(["x"], "", 10)
            assert "lease_id" in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.renew("x", 99999)
            assert "lease_ttl_s" in err.value.details()
            for dtype in ("x" * 17, "float 16"):  # a bounded name of letters and digits, stored with the block
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await kv.put([BlockData("dtype", 1, b"1", dtype)])
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert err.value.details().startswith("header.kv_dtype")
            assert await kv.lookup(["nothing"]) == 0  # still serving
        finally:
            await kv.close()

    run(scenario())


async def _corrupt_status(target: str) -> grpc.StatusCode:
    from pdserve.common.server import channel
    from pdserve.testing.v1 import kvstore_faults_pb2, kvstore_faults_pb2_grpc

    async with channel(target) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await kvstore_faults_pb2_grpc.KVStoreFaultsStub(ch).Corrupt(kvstore_faults_pb2.CorruptRequest(key="nope"))
    return err.value.code()


def test_fault_injection_is_served_only_with_the_flag(small_kvstores):
    """A kvstore started without --enable-fault-injection does not even have the test-only service."""
    from pdserve.launcher.stack import Stack, StackSpec

    assert run(_corrupt_status(small_kvstores.kvstores[0].target)) == grpc.StatusCode.NOT_FOUND
    plain = Stack(StackSpec(n_prefill=0, n_decode=0, n_kvstore=1)).start(60)
    try:
        assert run(_corrupt_status(plain.kvstores[0].target)) == grpc.StatusCode.UNIMPLEMENTED
    finally:
        plain.stop()
