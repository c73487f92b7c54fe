"""The kvstore service on loopback: eviction under its budget, leases, corruption caught, bad input, fault injection
(sharding: test_kvstore_sharding.py)."""

import asyncio
import collections

import grpc
import pytest

from pdserve.kvstore.client import BlockData, KVIntegrityError
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc
from tests.kv_faults import corrupt
from tests.stack.kvstore.kv_roles import Roles, block, put_released, run, used, wait_for_async


def test_service_eviction_leases_and_corruption(small_kvstores):
    target = small_kvstores.kvstores[0].target

    async def scenario():
        kv = Roles(small_kvstores, [target])
        try:
            before = await used(kv)
            await put_released(kv, [block(0)], "lease-0")
            charge = await used(kv) - before  # what one 300-byte block costs the budget, overhead and all
            assert charge > 300
            lease_1 = await kv.lease("lease-1")
            assert await kv.prefill.put([block(1)], lease_id=lease_1, lease_ttl_s=60) == 1
            assert await kv.prefill.put([block(1)], lease_id=lease_1, lease_ttl_s=60) == 0  # idempotent
            i = 2
            while (await kv.test.stats())[0].evictions == 0:  # fill the budget until the first eviction
                await put_released(kv, [block(i)], f"fill-{i}")
                i += 1
            # the least recently used unleased block went (blk000), never the leased one (blk001, older still)
            assert await kv.prefill.lookup(["blk000"]) == 0 and await kv.prefill.lookup(["blk001"]) == 1
            assert await kv.prefill.lookup([block(i - 1).key]) == 1
            [stats] = await kv.test.stats()
            assert stats.evictions == 1 and stats.leased_blocks == 1 and stats.bytes_used <= stats.capacity_bytes
            # a corrupted block is detected and never served
            await corrupt(kv.test, "blk002")
            reader = await kv.lease("lease-c")
            assert await kv.prefill.acquire(["blk002"], reader, 60) == 1
            with pytest.raises(KVIntegrityError):
                await kv.prefill.get(["blk002"], lease_id=reader)
            await kv.router.release(reader)
            [stats] = await kv.test.stats()
            assert stats.checksum_failures == 1
            assert await kv.prefill.lookup(["blk002"]) == 0
            # everything leased and full: a clear RESOURCE_EXHAUSTED
            lease_2 = await kv.lease("lease-2")
            leased = 0
            with pytest.raises(grpc.aio.AioRpcError) as err:
                for i in range(100, 130):
                    await kv.prefill.put([block(i, b"L")], lease_2, 60)
                    leased += 1
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "kvstore full" in err.value.details()
            assert leased > 0 and (await kv.test.stats())[0].leased_blocks == 1 + leased
            assert await kv.router.release(lease_1) == 1
            assert await kv.router.release(lease_2) == leased
            reader = await kv.lease("lease-d")
            assert await kv.prefill.acquire(["blk100", "blk001"], reader, 60) == 2
            got = await kv.prefill.get(["blk100", "blk001"], lease_id=reader)
            assert [b.data[:1] for b in got] == [b"L", b"\x01"]
            await kv.router.release(reader)
        finally:
            await kv.close()

    run(scenario())


def test_a_put_past_the_budget_stores_nothing_of_itself(small_kvstores):
    """Two blocks, the second past the budget (everything else leased), the first within it: RESOURCE_EXHAUSTED,
    and the first block is not left behind."""
    target = small_kvstores.kvstores[0].target

    async def scenario():
        kv = Roles(small_kvstores, [target])
        try:
            held = []
            with pytest.raises(grpc.aio.AioRpcError):
                for i in range(200, 240):
                    await kv.prefill.put([block(i)], await kv.lease(f"hold-{i}"), 60)
                    held.append(i)
            assert await kv.router.release(f"hold-{held[-1]}") == 1  # room for about one block again
            blocks_before = (await kv.test.stats())[0].blocks
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.prefill.put([block(300), BlockData("big", 16, bytes(5000))], await kv.lease("two"), 60)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert await kv.prefill.lookup(["blk300"]) == 0  # the first block did fit, and was dropped with the Put
            [stats] = await kv.test.stats()
            assert stats.blocks <= blocks_before and stats.bytes_used <= stats.capacity_bytes
            for name in [f"hold-{i}" for i in held[:-1]] + ["two", f"hold-{held[-1] + 1}"]:
                await kv.router.release(name)
        finally:
            await kv.close()

    run(scenario())


REFUSED_PUTS = 50  # of each kind; grpcio's asyncio client misreported about one in twenty without the drain


def test_a_refused_put_reports_its_own_status_every_time(small_kvstores):
    """A Put refused while its client is still writing (eight blocks, the first message already refused) reaches the
    client with its own status every time, never ``INTERNAL: Internal error from Core`` (grpc/grpc#36066, see
    common/client_stream.py): by the authorizer (a role that may not Put), at the first message (a lease the shard
    does not know: what the client's failover acts on) and mid-stream (past the budget); nothing is left stored."""
    target = small_kvstores.kvstores[0].target
    blocks = [BlockData(f"refused-{i}", 16, bytes([i]) * 92160) for i in range(8)]

    async def scenario():
        kv = Roles(small_kvstores, [target])
        decode = small_kvstores.kv_client("decode", targets=[target])
        try:
            lease = await kv.lease("refused")
            blocks_before = (await kv.test.stats())[0].blocks
            cases = {grpc.StatusCode.PERMISSION_DENIED: (decode, lease),
                     grpc.StatusCode.FAILED_PRECONDITION: (kv.prefill, "nobody-made-this"),
                     grpc.StatusCode.RESOURCE_EXHAUSTED: (kv.prefill, lease)}
            for want, (client, lease_id) in cases.items():
                seen = collections.Counter()
                for _ in range(REFUSED_PUTS):
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await client.put(blocks, lease_id, 60)
                    seen[err.value.code()] += 1
                assert seen == {want: REFUSED_PUTS}
            assert (await kv.test.stats())[0].blocks == blocks_before
            await kv.router.release(lease)
        finally:
            await asyncio.gather(kv.close(), decode.close())

    run(scenario())


def test_bytes_of_puts_still_arriving_are_charged(small_kvstores):
    """An unfinished Put holds its bytes: they count against the budget while it lasts (a second one that would
    overflow it is refused, naming the block), and come back when it ends."""
    target = small_kvstores.kvstores[1].target

    async def scenario():
        kv = Roles(small_kvstores, [target])
        ch = small_kvstores.aio_channel(target, "prefill")
        first: asyncio.Queue = asyncio.Queue()

        async def requests():
            while (message := await first.get()) is not None:
                yield message
        try:
            slow, other = await kv.lease("slow"), await kv.lease("other")
            before = await used(kv)
            put = kvstore_pb2_grpc.KVStoreStub(ch).Put(requests())
            await first.put(kvstore_pb2.PutChunk(lease_id=slow, lease_ttl_s=60, header=kvstore_pb2.BlockHeader(
                key="slow", token_count=1, nbytes=9000, crc32=0)))
            await first.put(kvstore_pb2.PutChunk(data=bytes(6000)))
            await wait_for_async(lambda: used(kv), lambda used: used >= before + 6000)
            second = [kvstore_pb2.PutChunk(lease_id=other, lease_ttl_s=60, header=kvstore_pb2.BlockHeader(
                          key="other", token_count=1, nbytes=6000, crc32=0)),
                      kvstore_pb2.PutChunk(data=bytes(6000))]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kvstore_pb2_grpc.KVStoreStub(ch).Put(iter(second))
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "block other" in err.value.details()
            put.cancel()
            await wait_for_async(lambda: used(kv), lambda used: used == before)
            await kv.router.release(slow)
            await kv.router.release(other)
        finally:
            await ch.close()
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
            lease = await kv.lease("dtype")
            for dtype in ("x" * 17, "float 16"):  # a bounded name of letters and digits, stored with the block
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await kv.prefill.put([BlockData("dtype", 1, b"1", dtype)], lease, 60)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert err.value.details().startswith("header.kv_dtype")
            await kv.router.release(lease)
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
