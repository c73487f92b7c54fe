"""The same-host fast path: block bytes through shared memory instead of the socket, same API, checksums and MACs
still verified. (What keeps it safe from other local users: test_security_shm.py.)"""

import asyncio
import os
import zlib

import grpc
import pytest

from pdserve.client.client import AsyncPdserveClient
from pdserve.engine.params import SamplingParams
from pdserve.kvstore import shm
from pdserve.kvstore.client import BlockData, KVIntegrityError, KVStoreClient
from pdserve.kvstore.mac import BlockMAC
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc
from tests.helpers import reference, router_lease, start_stack
from tests.kv_faults import corrupt

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs Linux memfd_create and SCM_RIGHTS")


@pytest.fixture(scope="module")
def shm_stack(tiny_model_path):
    stack = start_stack(model=str(tiny_model_path), fault_injection=True, kv_shm=True)  # pdserve up --kv-shm
    yield stack
    stack.stop()


def shm_names() -> set[str]:
    """Files in /dev/shm a pdserve client could have left (the named files of the past)."""
    return {n for n in os.listdir("/dev/shm") if n.startswith("pdserve-kv")} if os.path.isdir("/dev/shm") else set()


async def _shm_bytes(kv: KVStoreClient) -> int:
    [stats] = await kv.stats()
    return stats.shm_bytes


def test_blocks_move_through_shared_memory_and_are_checked(shm_stack):
    data = bytes(range(256)) * 5000  # larger than one socket chunk
    lease = router_lease(shm_stack)
    names_before = shm_names()

    async def scenario():
        kv, admin = shm_stack.kv_client("prefill", shm=True), shm_stack.kv_client("test")
        try:
            before = await _shm_bytes(admin)
            assert await kv.put([BlockData("shm-a", 16, data), BlockData("shm-b", 3, b"tail")], lease, 30) == 2
            got = await kv.get(["shm-a", "shm-b"], lease_id=lease)
            assert [bytes(b.data) for b in got] == [data, b"tail"] and [b.token_count for b in got] == [16, 3]
            assert await _shm_bytes(admin) - before == 2 * (len(data) + 4)  # both ways, nothing through the socket
            assert kv.shm == [True] and shm_names() == names_before  # anonymous memory: no file anyone can open
            # a block corrupted in the store is still caught, and never served
            await corrupt(admin, "shm-a")
            with pytest.raises(KVIntegrityError):
                await kv.get(["shm-a"], lease_id=lease)
        finally:
            await kv.close()
            await admin.close()

    asyncio.run(scenario())


def test_a_wrong_checksum_or_an_unregistered_file_is_refused(shm_stack):
    target = shm_stack.kvstores[0]
    lease = router_lease(shm_stack)
    mac = BlockMAC(shm_stack.identities.identity("prefill").kv_key)

    async def scenario():
        file, registrar = shm.ShmFile(), shm.Registrar(target.port)
        try:
            shm.write_block(file.fd, 0, [b"abcd"])
            header = kvstore_pb2.BlockHeader(key="shm-bad", token_count=1, nbytes=4, crc32=zlib.crc32(b"abce"),
                                             mac=mac.sign("shm-bad", 1, b"abcd"))
            async with shm_stack.aio_channel(target, "prefill") as ch:
                stub = kvstore_pb2_grpc.KVStoreStub(ch)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Put(iter([kvstore_pb2.PutChunk(header=header, shm_name=file.handle(registrar),
                                                              lease_id=lease, lease_ttl_s=30)]))
                assert err.value.code() == grpc.StatusCode.DATA_LOSS
                for name in ("../../etc/passwd", "pdserve-kv-" + "0" * 32):  # a path; a handle nobody registered
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await stub.Get(kvstore_pb2.GetRequest(keys=["shm-b"], shm_name=name, lease_id=lease)).read()
                    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                    assert "shm_name" in err.value.details()
        finally:
            file.close()
            registrar.close()

    asyncio.run(scenario())


def test_a_kvstore_without_shm_gets_the_socket():
    from pdserve.launcher.stack import Stack, StackSpec

    stack = Stack(StackSpec(n_prefill=0, n_decode=0, n_kvstore=1, kv_capacity_mb=16, kv_shm=False)).start(60)
    try:
        lease = router_lease(stack)

        async def scenario():
            kv, admin = stack.kv_client("prefill", shm=True), stack.kv_client("admin")
            try:
                await kv.put([BlockData("sock", 1, b"bytes")], lease, 30)
                assert kv.shm == [False]  # refused once, the socket from then on
                assert [bytes(b.data) for b in await kv.get(["sock"], lease_id=lease)] == [b"bytes"]
                assert await _shm_bytes(admin) == 0
            finally:
                await kv.close()
                await admin.close()
        asyncio.run(scenario())
    finally:
        stack.stop()


def test_the_stack_over_shared_memory_gives_the_same_tokens(shm_stack, tiny_runtime):
    prompts = [list(range(4, 4 + n)) for n in (20, 47, 90)]
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    want = [s.output_ids for s in reference(tiny_runtime, prompts, [params] * len(prompts))]

    async def scenario():
        kv = shm_stack.kv_client("admin")
        try:
            before = await _shm_bytes(kv)
            async with AsyncPdserveClient(shm_stack.router_target) as client:
                got = [[t async for c in client.generate(token_ids=p, **vars(params)) for t in c.token_ids]
                       for p in prompts]
            return got, await _shm_bytes(kv) - before
        finally:
            await kv.close()

    got, moved = asyncio.run(scenario())
    assert got == want
    assert moved > 0  # prefill's Puts and decode's Gets went through shared memory
