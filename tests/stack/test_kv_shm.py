"""The same-host fast path: block bytes through /dev/shm instead of the socket, same API, checksums still verified."""

import asyncio
import os
import zlib

import grpc
import pytest

from pdserve.client.client import AsyncPdserveClient
from pdserve.engine.params import SamplingParams
from pdserve.kvstore import shm
from pdserve.kvstore.client import BlockData, KVIntegrityError, KVStoreClient
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc
from tests.helpers import reference, start_stack

pytestmark = pytest.mark.skipif(not shm.available(), reason="no writable /dev/shm")


@pytest.fixture(scope="module")
def shm_stack(tiny_model_path):
    stack = start_stack(model=str(tiny_model_path), fault_injection=True, kv_shm=True)  # pdserve up --kv-shm
    yield stack
    stack.stop()


def _shm_files() -> set[str]:
    return {n for n in os.listdir(shm.SHM_DIR) if n.startswith("pdserve-kv-")}


async def _shm_bytes(kv: KVStoreClient) -> int:
    [stats] = await kv.stats()
    return stats.shm_bytes


def test_blocks_move_through_shared_memory_and_are_checked(shm_stack):
    target = shm_stack.kvstores[0].target
    data = bytes(range(256)) * 5000  # larger than one socket chunk

    files_before = _shm_files()

    async def scenario():
        kv = KVStoreClient([target], shm=True)
        try:
            before = await _shm_bytes(kv)
            assert await kv.put([BlockData("shm-a", 16, data), BlockData("shm-b", 3, b"tail")], "shm-lease", 30) == 2
            got = await kv.get(["shm-a", "shm-b"])
            assert [bytes(b.data) for b in got] == [data, b"tail"] and [b.token_count for b in got] == [16, 3]
            assert await _shm_bytes(kv) - before == 2 * (len(data) + 4)  # both ways, nothing through the socket
            assert kv.shm == [True]
            # a block corrupted in the store is still caught, and never served
            await kv.corrupt("shm-a")
            with pytest.raises(KVIntegrityError):
                await kv.get(["shm-a"])
        finally:
            await kv.close()

    asyncio.run(scenario())
    assert _shm_files() <= files_before  # the client's files are removed when it closes


def test_a_wrong_checksum_through_shared_memory_is_refused(shm_stack):
    async def scenario():
        file = shm.ShmFile()
        try:
            shm.write_block(file.fd, 0, [b"abcd"])
            header = kvstore_pb2.BlockHeader(key="shm-bad", token_count=1, nbytes=4, crc32=zlib.crc32(b"abce"))
            async with grpc.aio.insecure_channel(shm_stack.kvstores[0].target) as ch:
                stub = kvstore_pb2_grpc.KVStoreStub(ch)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Put(iter([kvstore_pb2.PutChunk(header=header, shm_name=file.name)]))
                assert err.value.code() == grpc.StatusCode.DATA_LOSS
                for name in ("../../etc/passwd", "pdserve-kv-" + "0" * 32):  # not ours / not there
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await stub.Get(kvstore_pb2.GetRequest(keys=["shm-b"], shm_name=name)).read()
                    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                    assert "shm_name" in err.value.details()
        finally:
            file.close()

    asyncio.run(scenario())


def test_a_kvstore_without_shm_gets_the_socket(tiny_model_path):
    from pdserve.launcher.stack import Stack, StackSpec

    stack = Stack(StackSpec(n_prefill=0, n_decode=0, n_kvstore=1, kv_capacity_mb=16)).start(60)
    try:
        async def scenario():
            kv = KVStoreClient([stack.kvstores[0].target], shm=True)
            try:
                await kv.put([BlockData("sock", 1, b"bytes")])
                assert kv.shm == [False]  # refused once, the socket from then on
                assert [bytes(b.data) for b in await kv.get(["sock"])] == [b"bytes"]
                assert await _shm_bytes(kv) == 0
            finally:
                await kv.close()
        asyncio.run(scenario())
    finally:
        stack.stop()


def test_the_stack_over_shared_memory_gives_the_same_tokens(shm_stack, tiny_runtime):
    prompts = [list(range(4, 4 + n)) for n in (20, 47, 90)]
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    want = [s.output_ids for s in reference(tiny_runtime, prompts, [params] * len(prompts))]

    async def scenario():
        kv = KVStoreClient([shm_stack.kvstores[0].target])
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
    assert moved > 0  # prefill's Puts and decode's Gets went through /dev/shm
