"""Client library for one or more kvstore shards.

Blocks are placed by rendezvous (highest random weight) hashing of their key over the shard addresses: every client
computes the same placement with no coordination, and adding a shard moves only the keys that now rank it highest.
Puts, gets and lookups are split per shard and run concurrently; results come back in the caller's key order.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import defaultdict
from dataclasses import dataclass

import grpc

from common.server import channel
from kvstore.wire import chunks_of
from kvstore.store import checksum
from protos import kvstore_pb2, kvstore_pb2_grpc

log = logging.getLogger("pdserve.kvstore.client")

DEFAULT_LEASE_TTL_S = 30.0  # how long prefilled KV waits, leased, for a decode worker


class KVIntegrityError(Exception):
    """A fetched block's bytes do not match its checksum (or the store reported a corrupted block)."""


@dataclass
class BlockData:
    key: str
    token_count: int
    data: bytes


def rendezvous_shard(key: str, shards: list[str]) -> int:
    """Index of the shard that ranks highest for this key."""
    def weight(shard: str) -> int:
        return int.from_bytes(hashlib.sha256(f"{shard}|{key}".encode()).digest()[:8], "big")
    return max(range(len(shards)), key=lambda i: weight(shards[i]))


class KVStoreClient:
    def __init__(self, targets: list[str]) -> None:
        if not targets:
            raise ValueError("kvstore: at least one address is needed")
        self.targets = list(targets)
        self.channels = [channel(t) for t in self.targets]
        self.stubs = [kvstore_pb2_grpc.KVStoreStub(c) for c in self.channels]

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.channels))

    def shard_of(self, key: str) -> int:
        return 0 if len(self.targets) == 1 else rendezvous_shard(key, self.targets)

    def _split(self, keys: list[str]) -> dict[int, list[int]]:
        """Shard -> positions (in order) of the keys it holds."""
        groups: dict[int, list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            groups[self.shard_of(key)].append(i)
        return groups

    # --- blocks ---------------------------------------------------------------------------------------------------
    async def put(self, blocks: list[BlockData], lease_id: str = "", lease_ttl_s: float = 0.0,
                  timeout: float | None = None) -> int:
        """Store blocks (leased when lease_id is set). Returns how many were new."""
        groups = self._split([b.key for b in blocks])

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

        return sum(await asyncio.gather(*(put_shard(s, p) for s, p in groups.items())))

    async def get(self, keys: list[str], timeout: float | None = None) -> list[BlockData]:
        """Fetch blocks in the given order, each checked against its checksum on arrival."""
        groups = self._split(keys)
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

        await asyncio.gather(*(get_shard(s, p) for s, p in groups.items()))
        if any(b is None for b in out):
            raise KVIntegrityError("kvstore returned fewer blocks than asked for")
        return out  # type: ignore[return-value]

    async def _prefix(self, keys: list[str], call) -> int:
        """Leading keys present across shards: each shard answers for its own (ordered) subsequence."""
        if not keys:
            return 0
        groups = self._split(keys)
        answers = await asyncio.gather(*(call(s, [keys[i] for i in p]) for s, p in groups.items()))
        prefix = len(keys)
        for positions, present in zip(groups.values(), answers):
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
        replies = await asyncio.gather(*(s.Release(kvstore_pb2.LeaseRequest(lease_id=lease_id), timeout=timeout)
                                         for s in self.stubs))
        return sum(r.blocks for r in replies)

    async def release_quietly(self, lease_id: str, timeout: float = 5.0) -> None:
        """Release a lease where failing is no reason to fail the request: a lease left behind simply expires."""
        try:
            await self.release(lease_id, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            log.warning("lease %s not released: %s (it will expire)", lease_id, exc.details())

    async def renew(self, lease_id: str, lease_ttl_s: float, timeout: float | None = None) -> int:
        request = kvstore_pb2.LeaseRequest(lease_id=lease_id, lease_ttl_s=lease_ttl_s)
        replies = await asyncio.gather(*(s.Renew(request, timeout=timeout) for s in self.stubs))
        return sum(r.blocks for r in replies)

    async def stats(self) -> list[kvstore_pb2.StatsReply]:
        return list(await asyncio.gather(*(s.Stats(kvstore_pb2.StatsRequest()) for s in self.stubs)))

    async def corrupt(self, key: str) -> None:
        await self.stubs[self.shard_of(key)].Corrupt(kvstore_pb2.CorruptRequest(key=key))
