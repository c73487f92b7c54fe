"""Client library for one or more kvstore shards.

Blocks are placed by rendezvous (highest random weight) hashing of their key over the shard addresses: every client
computes the same placement with no coordination, and adding a shard moves only the keys that now rank it highest.
Puts, gets and lookups are split per shard and run concurrently; results come back in the caller's key order.

A shard that answers UNAVAILABLE is skipped for a while: its keys go to the next shard in their rendezvous ranking (the
same fallback every client computes), a Get that misses a block on one shard tries the key's next-ranked shards, and
lookups, leases and releases carry on with the live shards (a dead shard's leases died with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc

from pdserve.common.server import channel
from pdserve.kvstore.wire import chunks_of
from pdserve.kvstore.store import checksum
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc

log = logging.getLogger("pdserve.kvstore.client")

DEFAULT_LEASE_TTL_S = 30.0  # how long prefilled KV waits, leased, for a decode worker
SHARD_DOWN_FOR_S = 2.0  # a shard that answered UNAVAILABLE is skipped this long


class KVIntegrityError(Exception):
    """A fetched block's bytes do not match its checksum (or the store reported a corrupted block)."""


@dataclass
class BlockData:
    key: str
    token_count: int
    data: bytes


def rendezvous_ranking(key: str, shards: list[str]) -> list[int]:
    """Shard indices from the one that ranks highest for this key to the lowest."""
    def weight(shard: str) -> int:
        return int.from_bytes(hashlib.sha256(f"{shard}|{key}".encode()).digest()[:8], "big")
    return sorted(range(len(shards)), key=lambda i: weight(shards[i]), reverse=True)


def rendezvous_shard(key: str, shards: list[str]) -> int:
    """Index of the shard that ranks highest for this key."""
    return rendezvous_ranking(key, shards)[0]


def _unavailable(result: object) -> bool:
    return isinstance(result, grpc.aio.AioRpcError) and result.code() == grpc.StatusCode.UNAVAILABLE


class KVStoreClient:
    def __init__(self, targets: list[str]) -> None:
        if not targets:
            raise ValueError("kvstore: at least one address is needed")
        self.targets = list(targets)
        self.channels = [channel(t) for t in self.targets]
        self.stubs = [kvstore_pb2_grpc.KVStoreStub(c) for c in self.channels]
        self.down_until = [0.0] * len(self.targets)

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.channels))

    def _mark_down(self, shard: int) -> None:
        if time.monotonic() >= self.down_until[shard]:
            log.warning("kvstore shard %s unavailable; using the others", self.targets[shard])
        self.down_until[shard] = time.monotonic() + SHARD_DOWN_FOR_S

    def _choose(self, key: str, tried: frozenset[int] = frozenset()) -> int | None:
        """The key's highest-ranked shard not tried yet, live shards before those recently down."""
        ranking = [0] if len(self.targets) == 1 else rendezvous_ranking(key, self.targets)
        now = time.monotonic()
        candidates = [i for i in ranking if i not in tried]
        live = [i for i in candidates if now >= self.down_until[i]]
        return (live or candidates or [None])[0]

    def shard_of(self, key: str) -> int:
        return self._choose(key)

    def _split(self, keys: list[str]) -> dict[int, list[int]]:
        """Shard -> positions (in order) of the keys it holds."""
        groups: dict[int, list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            groups[self.shard_of(key)].append(i)
        return groups

    async def _each_shard(self, call) -> list:
        """``call(stub)`` on every shard; results of shards that are down are left out, other failures raise."""
        results = await asyncio.gather(*(call(stub) for stub in self.stubs), return_exceptions=True)
        out = []
        for shard, result in enumerate(results):
            if _unavailable(result):
                self._mark_down(shard)
            elif isinstance(result, BaseException):
                raise result
            else:
                out.append(result)
        return out

    async def _with_failover(self, keys: list[str], run, retry_on: tuple[grpc.StatusCode, ...]) -> None:
        """``run(shard, positions)`` for each shard's group of keys, concurrently; a group that fails with a code in
        ``retry_on`` moves on to each of its keys' next-ranked shards until none is left."""
        tried = [frozenset()] * len(keys)
        pending = list(range(len(keys)))
        last_error: BaseException | None = None
        while pending:
            groups: dict[int, list[int]] = defaultdict(list)
            for i in pending:
                shard = self._choose(keys[i], tried[i])
                if shard is None:
                    raise last_error
                groups[shard].append(i)
            results = await asyncio.gather(*(run(s, p) for s, p in groups.items()), return_exceptions=True)
            pending = []
            for (shard, positions), result in zip(groups.items(), results):
                if isinstance(result, grpc.aio.AioRpcError) and result.code() in retry_on:
                    if result.code() == grpc.StatusCode.UNAVAILABLE:
                        self._mark_down(shard)
                    last_error = result
                    for i in positions:
                        tried[i] = tried[i] | {shard}
                    pending += positions
                elif isinstance(result, BaseException):
                    raise result

    @contextlib.asynccontextmanager
    async def keep_lease(self, lease_id: str, lease_ttl_s: float) -> AsyncIterator[None]:
        """Renew a lease every third of its TTL while the body runs (e.g. a slow fetch, a long wait)."""
        if not lease_id or lease_ttl_s <= 0:
            yield
            return

        async def renew_forever() -> None:
            while True:
                await asyncio.sleep(lease_ttl_s / 3)
                try:
                    await self.renew(lease_id, lease_ttl_s, timeout=lease_ttl_s / 3)
                except grpc.aio.AioRpcError as exc:
                    log.warning("lease %s not renewed: %s", lease_id, exc.details())

        task = asyncio.create_task(renew_forever())
        try:
            yield
        finally:
            task.cancel()

    # --- blocks ---------------------------------------------------------------------------------------------------
    async def put(self, blocks: list[BlockData], lease_id: str = "", lease_ttl_s: float = 0.0,
                  timeout: float | None = None) -> int:
        """Store blocks (leased when lease_id is set). Returns how many were new.

        Blocks whose shard is unavailable go to each key's next-ranked shard."""
        async def put_shard(shard: int, positions: list[int]) -> int:
            def messages():
                first = True
                for i in positions:
                    b = blocks[i]
                    header = kvstore_pb2.BlockHeader(key=b.key, token_count=b.token_count, nbytes=len(b.data),
                                                     crc32=checksum(b.data))
                    for msg in chunks_of(header, b.data, kvstore_pb2.PutChunk):
                        if first:
                            msg.lease_id, msg.lease_ttl_s, first = lease_id, lease_ttl_s, False
                        yield msg
            reply = await self.stubs[shard].Put(messages(), timeout=timeout)
            return reply.stored

        stored = 0

        async def put_group(shard: int, positions: list[int]) -> None:
            nonlocal stored
            stored += await put_shard(shard, positions)

        await self._with_failover([b.key for b in blocks], put_group, (grpc.StatusCode.UNAVAILABLE,))
        return stored

    async def get(self, keys: list[str], timeout: float | None = None) -> list[BlockData]:
        """Fetch blocks in the given order, each checked against its checksum on arrival. A block missing from its
        shard (or a shard down) is looked for on the key's next-ranked shards."""
        out: list[BlockData | None] = [None] * len(keys)

        async def get_shard(shard: int, positions: list[int]) -> None:
            call = self.stubs[shard].Get(kvstore_pb2.GetRequest(keys=[keys[i] for i in positions]), timeout=timeout)
            it = iter(positions)
            header, parts = None, []

            def finish() -> None:
                data = b"".join(parts)
                if len(data) != header.nbytes or checksum(data) != header.crc32:
                    raise KVIntegrityError(f"block {header.key} arrived corrupted")
                out[next(it)] = BlockData(header.key, header.token_count, data)

            try:
                async for chunk in call:
                    if chunk.HasField("header"):
                        if header is not None:
                            finish()
                        header, parts = chunk.header, []
                    else:
                        parts.append(chunk.data)
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.DATA_LOSS:
                    raise KVIntegrityError(err.details()) from err
                raise
            if header is not None:
                finish()

        await self._with_failover(keys, get_shard, (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND))
        if any(b is None for b in out):
            raise KVIntegrityError("kvstore returned fewer blocks than asked for")
        return out  # type: ignore[return-value]

    async def _prefix(self, keys: list[str], call) -> int:
        """Leading keys present across shards: each shard answers for its own (ordered) subsequence."""
        if not keys:
            return 0
        groups = self._split(keys)
        answers = await asyncio.gather(*(call(s, [keys[i] for i in p]) for s, p in groups.items()),
                                       return_exceptions=True)
        prefix = len(keys)
        for shard, positions, present in zip(groups, groups.values(), answers):
            if _unavailable(present):  # a shard that is down holds nothing
                self._mark_down(shard)
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

    async def acquire(self, keys: list[str], lease_id: str, lease_ttl_s: float, timeout: float | None = None) -> int:
        async def one(shard: int, ks: list[str]) -> int:
            reply = await self.stubs[shard].Acquire(
                kvstore_pb2.AcquireRequest(keys=ks, lease_id=lease_id, lease_ttl_s=lease_ttl_s), timeout=timeout)
            return reply.present_prefix
        return await self._prefix(keys, one)

    # --- leases and admin (every shard) -----------------------------------------------------------------------------
    async def release(self, lease_id: str, timeout: float | None = None) -> int:
        replies = await self._each_shard(lambda s: s.Release(kvstore_pb2.LeaseRequest(lease_id=lease_id),
                                                             timeout=timeout))
        return sum(r.blocks for r in replies)

    async def release_quietly(self, lease_id: str, timeout: float = 5.0) -> None:
        """Release a lease where failing is no reason to fail the request: a lease left behind simply expires."""
        try:
            await self.release(lease_id, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            log.warning("lease %s not released: %s (it will expire)", lease_id, exc.details())

    async def renew(self, lease_id: str, lease_ttl_s: float, timeout: float | None = None) -> int:
        request = kvstore_pb2.LeaseRequest(lease_id=lease_id, lease_ttl_s=lease_ttl_s)
        replies = await self._each_shard(lambda s: s.Renew(request, timeout=timeout))
        return sum(r.blocks for r in replies)

    async def stats(self) -> list[kvstore_pb2.StatsReply]:
        return list(await asyncio.gather(*(s.Stats(kvstore_pb2.StatsRequest()) for s in self.stubs)))

    async def corrupt(self, key: str) -> None:
        await self.stubs[self.shard_of(key)].Corrupt(kvstore_pb2.CorruptRequest(key=key))
