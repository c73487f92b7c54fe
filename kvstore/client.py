"""Client library for one or more kvstore shards.

Blocks are placed by rendezvous hashing of their key over the shard addresses (``kvstore/placement.py``). Puts, gets
and lookups are split per shard and run concurrently; results come back in the caller's key order.

A shard that answers UNAVAILABLE is skipped for a while (``kvstore/shard_health.py``, with the retry policy of
``common/retry.py``): its keys go to the next shard in their rendezvous ranking (the same fallback every client
computes), a Get that misses a block on one shard tries the key's next-ranked shards, and lookups, leases and releases
carry on with the live shards (a dead shard's leases died with it). A live shard that does not know a lease (it was
down when the router made it, or restarted since, empty) is, for that lease, a shard that holds nothing: Puts under it
go to each key's next-ranked shard, and an Acquire counts none of its keys.

Blocks are signed with the stack's KV key on Put and checked on Get (``kvstore/mac.py``). A Put is a
:class:`~pdserve.kvstore.block_put.BlockPut` and a Get a :class:`~pdserve.kvstore.block_fetch.BlockFetch`; each moves
its bytes through shared memory (``kvstore/shm_transfer.py``) or the socket (``kvstore/socket_transfer.py``).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable

import grpc

from pdserve.common import tls
from pdserve.common.identity import Identity
from pdserve.common.retry import DEFAULT_RETRY, RetryPolicy
from pdserve.common.server import channel
from pdserve.kvstore.block_data import BlockData, KVIntegrityError
from pdserve.kvstore.block_fetch import BlockFetch
from pdserve.kvstore.block_put import BlockPut
from pdserve.kvstore.contract import lease_unknown
from pdserve.kvstore.mac import BlockMAC
from pdserve.kvstore.memory import keep_freed_memory
from pdserve.kvstore.placement import Placement
from pdserve.kvstore.shard_health import ShardHealth
from pdserve.kvstore.shm_transfer import ShmTransfer
from pdserve.kvstore.wire import decoder, serialize
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc

__all__ = ["BlockData", "KVIntegrityError", "KVStoreClient"]


def _method(name: str) -> str:
    return f"/{kvstore_pb2.DESCRIPTOR.services_by_name['KVStore'].full_name}/{name}"


class KVStoreClient:
    def __init__(self, targets: list[str], shm: bool = False, identity: Identity | None = None,
                 retry: RetryPolicy = DEFAULT_RETRY) -> None:
        """``shm``: move block bytes through shared memory where a shard allows it (this host, kvstore run with
        --kv-shm); a shard that refuses gets the socket. ``identity``: who to call as (default: the process's, see
        common/tls.py); its KV key signs the blocks put and checks the blocks got. ``retry``: what fails over to
        the next shard, and how long a shard that answered UNAVAILABLE is skipped."""
        if not targets:
            raise ValueError("kvstore: at least one address is needed")
        self.targets = list(targets)
        self.shm_transfer = ShmTransfer(self.targets, shm)
        keep_freed_memory()  # received and sent KV buffers are reused, not faulted in again
        identity = identity or tls.identity()
        self.mac = BlockMAC(identity.kv_key) if identity is not None and identity.kv_key else None
        self.channels = [channel(t, "kvstore", identity) for t in self.targets]
        self.stubs = [kvstore_pb2_grpc.KVStoreStub(c) for c in self.channels]
        # Put and Get move data messages without the protobuf runtime (kvstore.wire)
        self.puts = [c.stream_unary(_method("Put"), request_serializer=serialize,
                                    response_deserializer=kvstore_pb2.PutReply.FromString) for c in self.channels]
        self.gets = [c.unary_stream(_method("Get"), request_serializer=kvstore_pb2.GetRequest.SerializeToString,
                                    response_deserializer=decoder(kvstore_pb2.GetChunk)) for c in self.channels]
        self.health = ShardHealth(self.targets, retry)
        self.placement = Placement(self.targets, self.health)

    @property
    def shm(self) -> list[bool]:
        """Per shard: whether blocks go through shared memory (until a shard refuses it)."""
        return self.shm_transfer.on

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.channels))
        self.shm_transfer.close()

    def shard_of(self, key: str) -> int:
        return self.placement.choose(key)

    async def _each_shard(self, call, need_one: bool = False) -> list:
        """``call(stub)`` on every shard; results of shards that are down are left out, other failures raise, and so
        does a shard's UNAVAILABLE when every shard is down and ``need_one``."""
        results = await asyncio.gather(*(call(stub) for stub in self.stubs), return_exceptions=True)
        out = []
        for shard, result in enumerate(results):
            if self.health.unavailable(result):
                self.health.mark_down(shard)
            elif isinstance(result, BaseException):
                raise result
            else:
                out.append(result)
        if need_one and not out:
            raise results[0]
        return out

    async def _with_failover(self, keys: list[str], run, retry_on: Callable[[grpc.aio.AioRpcError], bool]) -> None:
        """``run(shard, positions)`` for each shard's group of keys, concurrently; a group that fails with an error
        the retry policy retries (UNAVAILABLE: the shard is marked down) or ``retry_on`` accepts moves on to each of
        its keys' next-ranked shards until none is left."""
        tried = [frozenset()] * len(keys)
        pending = list(range(len(keys)))
        last_error: BaseException | None = None
        while pending:
            groups: dict[int, list[int]] = defaultdict(list)
            for i in pending:
                shard = self.placement.choose(keys[i], tried[i])
                if shard is None:
                    raise last_error
                groups[shard].append(i)
            results = await asyncio.gather(*(run(s, p) for s, p in groups.items()), return_exceptions=True)
            pending = []
            for (shard, positions), result in zip(groups.items(), results):
                down = self.health.unavailable(result)
                if down or (isinstance(result, grpc.aio.AioRpcError) and retry_on(result)):
                    if down:
                        self.health.mark_down(shard)
                    last_error = result
                    for i in positions:
                        tried[i] = tried[i] | {shard}
                    pending += positions
                elif isinstance(result, BaseException):
                    raise result

    # --- blocks ---------------------------------------------------------------------------------------------------
    async def put(self, blocks: list[BlockData], lease_id: str = "", lease_ttl_s: float = 0.0,
                  timeout: float | None = None) -> int:
        """Store blocks (leased when lease_id is set). Returns how many were new.

        Blocks whose shard is unavailable, or does not know the lease, go to each key's next-ranked shard."""
        put = BlockPut(self, blocks, lease_id, lease_ttl_s, timeout)
        await self._with_failover([b.key for b in blocks], put.group, lease_unknown)
        return put.stored

    async def get(self, keys: list[str], timeout: float | None = None, wait_s: float = 0.0,
                  lease_id: str = "", on_block: Callable[[BlockData], object] | None = None) -> list[BlockData]:
        """Fetch blocks in the given order, each checked against its checksum on arrival. A block missing from its
        shard (or a shard down) is looked for on the key's next-ranked shards.

        ``wait_s``: blocks not stored yet are waited for, at most this long each shard, and streamed as they come;
        ``lease_id``: the writer's lease, whose release ends the wait (ABORTED) instead of the deadline;
        ``on_block``: called with each block, in key order, as soon as it and every block before it have arrived
        (e.g. to import it while the rest is still on the wire)."""
        fetch = BlockFetch(self, keys, timeout, wait_s, lease_id, on_block)
        await self._with_failover(keys, fetch.group, lambda e: e.code() == grpc.StatusCode.NOT_FOUND)
        return fetch.blocks()

    async def _prefix(self, keys: list[str], call) -> int:
        """Leading keys present across shards: each shard answers for its own (ordered) subsequence."""
        if not keys:
            return 0
        groups = self.placement.split(keys)
        answers = await asyncio.gather(*(call(s, [keys[i] for i in p]) for s, p in groups.items()),
                                       return_exceptions=True)
        prefix = len(keys)
        for shard, positions, present in zip(groups, groups.values(), answers):
            if self.health.unavailable(present):  # a shard that is down holds nothing
                self.health.mark_down(shard)
                present = 0
            elif lease_unknown(present):  # nor, for a lease, one that does not know it
                present = 0
            elif isinstance(present, BaseException):
                raise present
            if present < len(positions):
                prefix = min(prefix, positions[present])
        return prefix

    async def lookup(self, keys: list[str], timeout: float | None = None) -> int:
        async def one(shard: int, ks: list[str]) -> int:
            reply = await self.stubs[shard].Lookup(kvstore_pb2.LookupRequest(keys=ks), timeout=timeout)
            return reply.present_prefix
        return await self._prefix(keys, one)

    async def acquire(self, keys: list[str], lease_id: str, lease_ttl_s: float, timeout: float | None = None,
                      create: bool = False) -> int:
        """Lease the leading present keys; ``create``: make the lease too, on the shards those keys live on."""
        async def one(shard: int, ks: list[str]) -> int:
            reply = await self.stubs[shard].Acquire(
                kvstore_pb2.AcquireRequest(keys=ks, lease_id=lease_id, lease_ttl_s=lease_ttl_s, create=create),
                timeout=timeout)
            return reply.present_prefix
        return await self._prefix(keys, one)

    async def create_lease(self, lease_id: str, lease_ttl_s: float, timeout: float | None = None) -> None:
        """Make a lease, holding nothing yet, on every live shard (blocks stored under it may go to any of them);
        UNAVAILABLE if none is."""
        request = kvstore_pb2.AcquireRequest(lease_id=lease_id, lease_ttl_s=lease_ttl_s, create=True)
        await self._each_shard(lambda s: s.Acquire(request, timeout=timeout), need_one=True)

    # --- leases and admin (every shard) -----------------------------------------------------------------------------
    async def release(self, lease_id: str, timeout: float | None = None) -> int:
        replies = await self._each_shard(lambda s: s.Release(kvstore_pb2.LeaseRequest(lease_id=lease_id),
                                                             timeout=timeout))
        return sum(r.blocks for r in replies)

    async def renew(self, lease_id: str, lease_ttl_s: float, timeout: float | None = None) -> int:
        request = kvstore_pb2.LeaseRequest(lease_id=lease_id, lease_ttl_s=lease_ttl_s)
        replies = await self._each_shard(lambda s: s.Renew(request, timeout=timeout))
        return sum(r.blocks for r in replies)

    async def stats(self) -> list[kvstore_pb2.StatsReply]:
        return list(await asyncio.gather(*(s.Stats(kvstore_pb2.StatsRequest()) for s in self.stubs)))
