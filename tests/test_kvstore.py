"""The block store: unit tests of its rules, then the real service over gRPC (eviction, leases, checksums, shards)."""

import asyncio
import zlib

import grpc
import pytest

from pdserve.kvstore.client import BlockData, KVIntegrityError, KVStoreClient, rendezvous_shard
from pdserve.kvstore.store import BlockStore, ChecksumMismatch, StoreFull


def crc(data):
    return zlib.crc32(data)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_store_evicts_lru_unleased_never_leased():
    store = BlockStore(capacity_bytes=300)
    for key in "abc":
        store.put(key, 1, bytes(100), crc(bytes(100)), lease_id="L" if key == "a" else "", lease_ttl_s=10)
    store.get("b")  # b is now more recent than c
    store.put("d", 1, bytes(100), crc(bytes(100)))
    assert set(store.blocks) == {"a", "b", "d"}  # c: least recently used and unleased
    store.put("e", 1, bytes(100), crc(bytes(100)))
    assert "a" in store.blocks  # leased: kept although oldest
    store.put("x", 1, bytes(100), crc(bytes(100)), lease_id="M", lease_ttl_s=10)
    store.put("y", 1, bytes(100), crc(bytes(100)), lease_id="M", lease_ttl_s=10)
    with pytest.raises(StoreFull):
        store.put("z", 1, bytes(100), crc(bytes(100)))


def test_released_lease_is_never_revived_by_a_late_put_or_acquire():
    """A cancelled request's lease is released while its Put may still be on the wire: that Put stores the block but
    must not lease it again (the lease would outlive the request until its TTL). An expired lease is not barred."""
    clock = FakeClock()
    store = BlockStore(capacity_bytes=1000, clock=clock)
    store.put("a", 1, bytes(10), crc(bytes(10)), lease_id="R", lease_ttl_s=10)
    assert store.release("R") == 1
    store.put("b", 1, bytes(10), crc(bytes(10)), lease_id="R", lease_ttl_s=10)
    assert store.acquire(["a", "b"], "R", 10) == 2
    assert store.leases == {} and store.leased_blocks == 0
    store.put("c", 1, bytes(10), crc(bytes(10)), lease_id="E", lease_ttl_s=1)
    clock.now = 5.0
    assert store.expire_leases() == 1
    assert store.acquire(["c"], "E", 10) == 1 and store.leased_blocks == 1


def test_store_put_is_idempotent_and_checks_crc():
    store = BlockStore(1000)
    assert store.put("k", 2, b"abc", crc(b"abc")) is True
    assert store.put("k", 2, b"abc", crc(b"abc")) is False
    assert store.bytes_used == 3
    with pytest.raises(ChecksumMismatch):
        store.put("j", 1, b"abc", 123)


def test_leases_expire_and_renew():
    clock = FakeClock()
    store = BlockStore(1000, clock)
    store.put("k", 1, b"x", crc(b"x"), lease_id="L", lease_ttl_s=5)
    clock.now = 4
    assert store.renew("L", 5) == 1
    clock.now = 8
    store.expire_leases()
    assert store.leased_blocks == 1
    clock.now = 9.5
    store.expire_leases()
    assert store.leased_blocks == 0 and not store.leases


def test_rendezvous_is_stable_and_spreads():
    shards = ["a:1", "b:2", "c:3"]
    keys = [f"key{i}" for i in range(3000)]
    placement = [rendezvous_shard(k, shards) for k in keys]
    counts = [placement.count(i) for i in range(3)]
    assert min(counts) > 800
    # adding a shard moves only keys to the new shard
    moved = [(p, rendezvous_shard(k, shards + ["d:4"])) for k, p in zip(keys, placement)]
    assert all(new in (old, 3) for old, new in moved)


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
            blocks = [BlockData(f"shard-test-{i}", 1, bytes([i]) * 50) for i in range(8)]
            await kv.put(blocks, "sh", 60)
            assert {kv.shard_of(b.key) for b in blocks} == {0, 1}
            assert await kv.lookup([b.key for b in blocks] + ["missing"]) == 8
            got = await kv.get([b.key for b in reversed(blocks)])
            assert [g.data for g in got] == [b.data for b in reversed(blocks)]
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
