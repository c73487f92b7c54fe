"""The kvstore service on loopback: eviction under its budget, leases, corruption caught, sharding, bad input."""

import asyncio

import grpc
import pytest

from pdserve.kvstore.client import BlockData, KVIntegrityError


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


class Roles:
    """One client per role on a stack's kvstores: leases are made (and given up) by the router, blocks put by prefill,
    read under a lease, Stats and Corrupt by the test identity."""

    def __init__(self, stack, targets: list[str]) -> None:
        self.router, self.prefill, self.test = (stack.kv_client(role, targets=targets)
                                                for role in ("router", "prefill", "test"))

    async def lease(self, name: str) -> str:
        await self.router.create_lease(name, 60)
        return name

    async def close(self) -> None:
        await asyncio.gather(self.router.close(), self.prefill.close(), self.test.close())


def test_service_eviction_leases_and_corruption(small_kvstores):
    target = small_kvstores.kvstores[0].target  # one shard, capacity 1048 bytes

    async def scenario():
        kv = Roles(small_kvstores, [target])
        try:
            blocks = [BlockData(f"blk{i}", 16, bytes([i]) * 300) for i in range(3)]
            lease_1 = await kv.lease("lease-1")
            assert await kv.prefill.put(blocks[:1], lease_id=lease_1, lease_ttl_s=60) == 1
            assert await kv.prefill.put(blocks[:1], lease_id=lease_1, lease_ttl_s=60) == 0  # idempotent
            await kv.prefill.put(blocks[1:3], await kv.lease("lease-a"), 60)  # 900 bytes in use
            await kv.router.release("lease-a")  # blk1 and blk2 may be evicted now
            await kv.prefill.put([BlockData("blk3", 16, b"\x07" * 300)], await kv.lease("lease-b"), 60)
            await kv.router.release("lease-b")  # it evicted blk1 (LRU, unleased), never blk0
            assert await kv.prefill.lookup(["blk0"]) == 1 and await kv.prefill.lookup(["blk1"]) == 0
            [stats] = await kv.test.stats()
            assert stats.evictions == 1 and stats.leased_blocks == 1
            # a corrupted block is detected and never served
            await kv.test.corrupt("blk2")
            reader = await kv.lease("lease-c")
            assert await kv.prefill.acquire(["blk2"], reader, 60) == 1
            with pytest.raises(KVIntegrityError):
                await kv.prefill.get(["blk2"], lease_id=reader)
            [stats] = await kv.test.stats()
            assert stats.checksum_failures == 1
            assert await kv.prefill.lookup(["blk2"]) == 0
            # everything leased and full: a clear RESOURCE_EXHAUSTED
            big = [BlockData("big1", 16, b"a" * 300), BlockData("big2", 16, b"b" * 300)]
            await kv.prefill.put(big, await kv.lease("lease-2"), 60)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.prefill.put([BlockData("big3", 16, b"c" * 300)], await kv.lease("lease-3"), 60)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert await kv.router.release(lease_1) == 1
            assert await kv.router.release("lease-2") == 2
            reader = await kv.lease("lease-d")
            assert await kv.prefill.acquire(["big1", "blk0"], reader, 60) == 2
            got = await kv.prefill.get(["big1", "blk0"], lease_id=reader)
            assert [b.data[:1] for b in got] == [b"a", b"\x00"]
            await kv.router.release(reader)
        finally:
            await kv.close()

    run(scenario())


def test_service_sharded_put_get_lookup(small_kvstores):
    targets = [p.target for p in small_kvstores.kvstores]

    async def scenario():
        kv = Roles(small_kvstores, targets)
        try:
            blocks = [BlockData(f"shard-test-{i}", 1, bytes([i]) * 50) for i in range(8)]
            await kv.prefill.put(blocks, await kv.lease("sh"), 60)
            assert {kv.prefill.shard_of(b.key) for b in blocks} == {0, 1}
            assert await kv.prefill.lookup([b.key for b in blocks] + ["missing"]) == 8
            got = await kv.prefill.get([b.key for b in reversed(blocks)], lease_id="sh")
            assert [g.data for g in got] == [b.data for b in reversed(blocks)]
            assert await kv.router.release("sh") == 8
        finally:
            await kv.close()

    run(scenario())


def test_service_rejects_bad_input(small_kvstores):
    target = small_kvstores.kvstores[0].target

    async def scenario():
        kv = Roles(small_kvstores, [target])
        try:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.prefill.lookup([""])
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "keys" in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.prefill.acquire(["x"], "", 10)
            assert "lease_id" in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.prefill.renew("x", 99999)
            assert "lease_ttl_s" in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:  # reads go through a lease
                await kv.prefill.get(["x"])
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "lease_id" in err.value.details()
            assert await kv.prefill.lookup(["nothing"]) == 0  # still serving
        finally:
            await kv.close()

    run(scenario())


async def _corrupt_status(stack, target: str, role: str) -> grpc.StatusCode:
    from pdserve.testing.v1 import kvstore_faults_pb2, kvstore_faults_pb2_grpc

    async with stack.aio_channel(target, role) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await kvstore_faults_pb2_grpc.KVStoreFaultsStub(ch).Corrupt(kvstore_faults_pb2.CorruptRequest(key="nope"))
    return err.value.code()


def test_fault_injection_is_served_only_with_the_flag(small_kvstores):
    """A kvstore started without --enable-fault-injection does not even have the test-only service."""
    from pdserve.launcher.stack import Stack, StackSpec

    faulty = small_kvstores.kvstores[0].target
    assert run(_corrupt_status(small_kvstores, faulty, "test")) == grpc.StatusCode.NOT_FOUND
    assert run(_corrupt_status(small_kvstores, faulty, "admin")) == grpc.StatusCode.PERMISSION_DENIED  # test only
    plain = Stack(StackSpec(n_prefill=0, n_decode=0, n_kvstore=1)).start(60)  # (it makes no test identity)
    try:
        assert run(_corrupt_status(plain, plain.kvstores[0].target, "admin")) == grpc.StatusCode.UNIMPLEMENTED
    finally:
        plain.stop()
