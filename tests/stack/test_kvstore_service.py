"""The kvstore service on loopback: eviction under its budget, leases, corruption caught, sharding, bad input."""

import asyncio

import grpc
import pytest

from pdserve.common.server import channel
from pdserve.kvstore.client import BlockData, KVIntegrityError, KVStoreClient
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc

CAPACITY_MB = 0.01  # 10,485 bytes a shard: about ten 300-byte blocks with their overhead


@pytest.fixture(scope="module")
def small_kvstores():
    from pdserve.launcher.stack import Stack, StackSpec

    stack = Stack(StackSpec(n_prefill=0, n_decode=0, n_kvstore=2, kv_capacity_mb=CAPACITY_MB, fault_injection=True))
    stack.start(60)
    assert stack.router is None and len(stack.processes) == 2
    yield stack
    stack.stop()


def run(coro):
    return asyncio.run(coro)


def block(i: int, fill: bytes = b"") -> BlockData:
    return BlockData(f"blk{i:03d}", 16, (fill or bytes([i % 256])) * 300)


async def _used(kv: KVStoreClient) -> int:
    return (await kv.stats())[0].bytes_used


def test_service_eviction_leases_and_corruption(small_kvstores):
    target = small_kvstores.kvstores[0].target

    async def scenario():
        kv = KVStoreClient([target])
        try:
            await kv.put([block(0)])
            charge = await _used(kv)  # what one 300-byte block costs the budget, overhead and all
            assert charge > 300
            assert await kv.put([block(1)], lease_id="lease-1", lease_ttl_s=60) == 1
            assert await kv.put([block(1)], lease_id="lease-1", lease_ttl_s=60) == 0  # idempotent
            [stats] = await kv.stats()
            room = (stats.capacity_bytes - stats.bytes_used) // charge
            await kv.put([block(i) for i in range(2, 2 + room)])  # fills the budget: nothing evicted yet
            assert (await kv.stats())[0].evictions == 0
            await kv.put([block(99)])  # evicts blk000 (LRU, unleased), never blk001 (leased, older)
            assert await kv.lookup(["blk000"]) == 0 and await kv.lookup(["blk001"]) == 1
            [stats] = await kv.stats()
            assert stats.evictions == 1 and stats.leased_blocks == 1 and stats.bytes_used <= stats.capacity_bytes
            # a corrupted block is detected and never served
            await kv.corrupt("blk002")
            with pytest.raises(KVIntegrityError):
                await kv.get(["blk002"])
            [stats] = await kv.stats()
            assert stats.checksum_failures == 1
            assert await kv.lookup(["blk002"]) == 0
            # everything leased and full: a clear RESOURCE_EXHAUSTED
            leased = 0
            with pytest.raises(grpc.aio.AioRpcError) as err:
                for i in range(100, 130):
                    await kv.put([block(i, b"L")], "lease-2", 60)
                    leased += 1
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "kvstore full" in err.value.details()
            assert leased > 0 and (await kv.stats())[0].leased_blocks == 1 + leased
            assert await kv.release("lease-1") == 1
            assert await kv.release("lease-2") == leased
            got = await kv.get(["blk100", "blk001"])
            assert [b.data[:1] for b in got] == [b"L", b"\x01"]
        finally:
            await kv.close()

    run(scenario())


def test_a_put_past_the_budget_stores_nothing_of_itself(small_kvstores):
    """Two blocks, the second past the budget (everything else leased), the first within it: RESOURCE_EXHAUSTED,
    and the first block is not left behind."""
    target = small_kvstores.kvstores[0].target

    async def scenario():
        kv = KVStoreClient([target])
        try:
            held = []
            with pytest.raises(grpc.aio.AioRpcError):
                for i in range(200, 240):
                    await kv.put([block(i)], f"hold-{i}", 60)
                    held.append(i)
            assert await kv.release(f"hold-{held[-1]}") == 1  # room for about one block again
            blocks_before = (await kv.stats())[0].blocks
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.put([block(300), BlockData("big", 16, bytes(5000))], "two", 60)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert await kv.lookup(["blk300"]) == 0  # the first block did fit, and was dropped with the Put
            [stats] = await kv.stats()
            assert stats.blocks <= blocks_before and stats.bytes_used <= stats.capacity_bytes
            for i in held[:-1]:
                await kv.release(f"hold-{i}")
        finally:
            await kv.close()

    run(scenario())


def test_bytes_of_puts_still_arriving_are_charged(small_kvstores):
    """An unfinished Put holds its bytes: they count against the budget while it lasts (a second one that would
    overflow it is refused, naming the block), and come back when it ends."""
    target = small_kvstores.kvstores[1].target

    async def scenario():
        kv = KVStoreClient([target])
        ch = channel(target)
        first: asyncio.Queue = asyncio.Queue()

        async def requests():
            while (message := await first.get()) is not None:
                yield message
        try:
            before = await _used(kv)
            put = kvstore_pb2_grpc.KVStoreStub(ch).Put(requests())
            await first.put(kvstore_pb2.PutChunk(header=kvstore_pb2.BlockHeader(key="slow", token_count=1,
                                                                                  nbytes=9000, crc32=0)))
            await first.put(kvstore_pb2.PutChunk(data=bytes(6000)))
            await wait_for_async(lambda: _used(kv), lambda used: used >= before + 6000)
            second = [kvstore_pb2.PutChunk(header=kvstore_pb2.BlockHeader(key="other", token_count=1, nbytes=6000,
                                                                            crc32=0)),
                      kvstore_pb2.PutChunk(data=bytes(6000))]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kvstore_pb2_grpc.KVStoreStub(ch).Put(iter(second))
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "block other" in err.value.details()
            put.cancel()
            await wait_for_async(lambda: _used(kv), lambda used: used == before)
        finally:
            await ch.close()
            await kv.close()

    run(scenario())


async def wait_for_async(read, holds, timeout_s: float = 30.0):
    """Poll the coroutine ``read()`` until ``holds(value)``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not holds(value := await read()):
        assert asyncio.get_running_loop().time() < deadline, f"last value {value}"
        await asyncio.sleep(0.05)
    return value


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
