"""The kvstore service sharded on loopback: keys placed across shards, a shard that never saw a lease, a lease whose
maker went away before the answer."""

import asyncio

import grpc
import pytest

from pdserve.kvstore.client import BlockData
from tests.stack.kvstore.kv_roles import Roles, run


def test_service_sharded_put_get_lookup(small_kvstores):
    targets = [p.target for p in small_kvstores.kvstores]

    async def scenario():
        kv = Roles(small_kvstores, targets)
        try:
            keys = [f"shard-test-{i}" for i in range(64)]  # four on each shard (the ports, and so the placement, vary)
            keys = [k for k in keys if kv.prefill.shard_of(k) == 0][:4] + [k for k in keys if kv.prefill.shard_of(k) == 1][:4]
            blocks = [BlockData(key, 1, bytes([i]) * 50, ("", "float16", "bfloat16")[i % 3]) for i, key in enumerate(keys)]
            await kv.prefill.put(blocks, await kv.lease("sh"), 60)
            assert {kv.prefill.shard_of(b.key) for b in blocks} == {0, 1}
            assert await kv.prefill.lookup([b.key for b in blocks] + ["missing"]) == 8
            got = await kv.prefill.get([b.key for b in reversed(blocks)], lease_id="sh")
            assert [g.data for g in got] == [b.data for b in reversed(blocks)]
            assert [g.kv_dtype for g in got] == [b.kv_dtype for b in reversed(blocks)]  # kept, sent back
            assert await kv.router.release("sh") == 8
        finally:
            await kv.close()

    run(scenario())


def test_a_shard_that_does_not_know_the_lease_holds_nothing_of_it(small_kvstores):
    """The lease is made on shard 0 only, as when shard 1 was down then or has restarted since (empty): Puts under it
    go to shard 0 for every key, an Acquire counts none on shard 1, and a waiting Get there answers at once and moves
    on; a lease no shard knows fails FAILED_PRECONDITION, told apart by ``lease_unknown``."""
    from pdserve.kvstore.client import lease_unknown

    targets = [p.target for p in small_kvstores.kvstores]

    async def scenario():
        kv = Roles(small_kvstores, targets)
        only_shard_0 = small_kvstores.kv_client("router", targets=targets[:1])
        try:
            keys = [f"half-known-{i}" for i in range(64)]
            keys = [k for k in keys if kv.prefill.shard_of(k) == 1][:3] + [k for k in keys if kv.prefill.shard_of(k) == 0][:1]
            blocks = [BlockData(key, 1, bytes([i + 1]) * 40) for i, key in enumerate(keys)]
            await only_shard_0.create_lease("half", 60)
            assert await kv.prefill.acquire(keys, "half", 60) == 0  # shard 1 holds nothing of it: the first key's
            on_shard_1 = (await kv.test.stats())[1].blocks
            assert await kv.prefill.put(blocks, "half", 60) == 4
            assert (await kv.test.stats())[1].blocks == on_shard_1  # all went to shard 0
            got = await asyncio.wait_for(kv.prefill.get(keys, lease_id="half", wait_s=600), 120)
            assert [g.data for g in got] == [b.data for b in blocks]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await kv.prefill.put(blocks[:1], "nobody-made-this", 60)
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and lease_unknown(err.value)
            await kv.router.release("half")
        finally:
            await asyncio.gather(kv.close(), only_shard_0.close())

    run(scenario())


def _answer_held(acquire, answered: list, read_on: asyncio.Event):
    """``acquire`` whose answer, once in, waits for ``read_on`` before the caller reads it: the kvstore has made the
    lease and the maker has not heard (a client that goes away then cancels the maker)."""
    async def held(request, timeout=None):
        reply = await acquire(request, timeout=timeout)
        answered.append(reply)
        await read_on.wait()
        return reply
    return held


def test_a_lease_whose_maker_was_cancelled_before_the_answer_is_released(small_kvstores):
    """The router was cancelled (its client went away) after the kvstore made the request's lease and before it read
    the answer: the lease is released once the answer is in, not held, known to nobody, until its TTL (60 s here)."""
    from pdserve.kvstore.lease import KVLease

    targets = [p.target for p in small_kvstores.kvstores]

    async def scenario():
        kv = Roles(small_kvstores, targets)
        answered, read_on = [], asyncio.Event()
        for stub in kv.router.stubs:
            stub.Acquire = _answer_held(stub.Acquire, answered, read_on)
        try:
            before = sum(s.leases for s in await kv.test.stats())
            making = asyncio.create_task(KVLease.create(kv.router, 60))
            while len(answered) < len(targets):
                await asyncio.sleep(0.01)
            assert sum(s.leases for s in await kv.test.stats()) == before + len(targets)  # made on every shard
            making.cancel()
            with pytest.raises(asyncio.CancelledError):
                await making
            read_on.set()  # the answer reaches the cancelled maker

            async def released() -> None:
                while sum(s.leases for s in await kv.test.stats()) != before:
                    await asyncio.sleep(0.05)
            await asyncio.wait_for(released(), 30)
        finally:
            await kv.close()

    run(scenario())
