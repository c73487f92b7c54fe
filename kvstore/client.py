"""Client library for one or more kvstore shards.

Blocks are placed by rendezvous (highest random weight) hashing of their key over the shard addresses: every client
computes the same placement with no coordination, and adding a shard moves only the keys that now rank it highest.
Puts, gets and lookups are split per shard and run concurrently; results come back in the caller's key order.

A shard that answers UNAVAILABLE is skipped for a while (the retry policy, ``common/retry.py``): its keys go to the
next shard in their rendezvous ranking (the same fallback every client computes), a Get that misses a block on one
shard tries the key's next-ranked shards, and lookups, leases and releases carry on with the live shards (a dead
shard's leases died with it). A live shard that does not know a lease (it was down when the router made it, or
restarted since, empty) is, for that lease, a shard that holds nothing: Puts under it go to each key's next-ranked
shard, and an Acquire counts none of its keys.

Blocks are signed with the stack's KV key on Put and checked on Get (``kvstore/mac.py``). The module is longer than
most: it is the one client of the kvstore, with both of its transfer paths (the socket and shared memory) each way.

Over 300 lines because Put, Get and Lookup share the per-shard split, the failover order and the shared-memory
and socket paths; what could leave (placement) is about 30 lines.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from pdserve.common import tls
from pdserve.common.identity import Identity
from pdserve.common.retry import DEFAULT_RETRY, DownMark, RetryPolicy, live_first
from pdserve.common.server import channel
from pdserve.kvstore import shm as shm_files
from pdserve.kvstore.contract import lease_unknown
from pdserve.kvstore.mac import BlockMAC, MacMismatch
from pdserve.kvstore.memory import keep_freed_memory
from pdserve.kvstore.store import block_views, checksum
from pdserve.kvstore.wire import MAX_BLOCK_BYTES, BlockAssembler, InlineBlock, chunks_of, decoder, serialize
from pdserve.testing.v1 import kvstore_faults_pb2, kvstore_faults_pb2_grpc
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc

log = logging.getLogger("pdserve.kvstore.client")


class KVIntegrityError(Exception):
    """A fetched block's bytes do not match its checksum (or the store reported a corrupted block)."""


@dataclass
class BlockData:
    key: str
    token_count: int
    data: bytes | bytearray | memoryview  # fetched: a view of the message that carried it when one did
    kv_dtype: str = ""  # element type of its K and V (BlockHeader.kv_dtype; "" from writers that predate it)


def _method(name: str) -> str:
    return f"/{kvstore_pb2.DESCRIPTOR.services_by_name['KVStore'].full_name}/{name}"


def rendezvous_ranking(key: str, shards: list[str]) -> list[int]:
    """Shard indices from the one that ranks highest for this key to the lowest."""
    def weight(shard: str) -> int:
        return int.from_bytes(hashlib.sha256(f"{shard}|{key}".encode()).digest()[:8], "big")
    return sorted(range(len(shards)), key=lambda i: weight(shards[i]), reverse=True)


def rendezvous_shard(key: str, shards: list[str]) -> int:
    """Index of the shard that ranks highest for this key."""
    return rendezvous_ranking(key, shards)[0]


def _loopback_port(target: str) -> int | None:
    """The port of a target on this host (loopback), else None: shared memory is only tried there."""
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    local = host == "localhost" or host.startswith("127.") or host == "::1"
    return int(port) if local and port.isdigit() else None


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
        ports = [_loopback_port(t) for t in self.targets]
        self._registrars = [shm_files.Registrar(port) if shm and port and shm_files.available() else None
                            for port in ports]
        self.shm = [r is not None for r in self._registrars]
        self._shm_pool = shm_files.ShmPool()
        keep_freed_memory()  # received and sent KV buffers are reused, not faulted in again
        identity = identity or tls.identity()
        self.mac = BlockMAC(identity.kv_key) if identity is not None and identity.kv_key else None
        self.channels = [channel(t, "kvstore", identity) for t in self.targets]
        self.stubs = [kvstore_pb2_grpc.KVStoreStub(c) for c in self.channels]
        # Put and Get move data messages without the protobuf runtime (kvstore.wire)
        self._puts = [c.stream_unary(_method("Put"), request_serializer=serialize,
                                     response_deserializer=kvstore_pb2.PutReply.FromString) for c in self.channels]
        self._gets = [c.unary_stream(_method("Get"), request_serializer=kvstore_pb2.GetRequest.SerializeToString,
                                     response_deserializer=decoder(kvstore_pb2.GetChunk)) for c in self.channels]
        self.retry = retry
        self.down = [DownMark() for _ in self.targets]

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.channels))
        self._shm_pool.close()
        for registrar in self._registrars:
            if registrar is not None:
                registrar.close()

    def _header(self, b: BlockData, offset: int = 0) -> kvstore_pb2.BlockHeader:
        return kvstore_pb2.BlockHeader(key=b.key, token_count=b.token_count, nbytes=len(b.data), crc32=checksum(b.data),
                                       shm_offset=offset, kv_dtype=b.kv_dtype,
                                       mac=self.mac.sign(b.key, b.token_count, b.data) if self.mac else b"")

    def _mark_down(self, shard: int) -> None:
        if self.retry.mark_down(self.down[shard]):
            log.warning("kvstore shard %s unavailable; using the others", self.targets[shard])

    def _choose(self, key: str, tried: frozenset[int] = frozenset()) -> int | None:
        """The key's highest-ranked shard not tried yet, live shards before those recently down."""
        ranking = [0] if len(self.targets) == 1 else rendezvous_ranking(key, self.targets)
        candidates = live_first((i for i in ranking if i not in tried), lambda i: not self.down[i].down)
        return candidates[0] if candidates else None

    def shard_of(self, key: str) -> int:
        return self._choose(key)

    def _split(self, keys: list[str]) -> dict[int, list[int]]:
        """Shard -> positions (in order) of the keys it holds."""
        groups: dict[int, list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            groups[self.shard_of(key)].append(i)
        return groups

    async def _each_shard(self, call, need_one: bool = False) -> list:
        """``call(stub)`` on every shard; results of shards that are down are left out, other failures raise, and so
        does a shard's UNAVAILABLE when every shard is down and ``need_one``."""
        results = await asyncio.gather(*(call(stub) for stub in self.stubs), return_exceptions=True)
        out = []
        for shard, result in enumerate(results):
            if self.retry.unavailable(result):
                self._mark_down(shard)
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
                shard = self._choose(keys[i], tried[i])
                if shard is None:
                    raise last_error
                groups[shard].append(i)
            results = await asyncio.gather(*(run(s, p) for s, p in groups.items()), return_exceptions=True)
            pending = []
            for (shard, positions), result in zip(groups.items(), results):
                if self.retry.unavailable(result) or (isinstance(result, grpc.aio.AioRpcError) and retry_on(result)):
                    if self.retry.unavailable(result):
                        self._mark_down(shard)
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

        Blocks whose shard is unavailable go to each key's next-ranked shard."""
        def first_message(header: kvstore_pb2.BlockHeader, shm_name: str = "") -> kvstore_pb2.PutChunk:
            return kvstore_pb2.PutChunk(header=header, lease_id=lease_id, lease_ttl_s=lease_ttl_s, shm_name=shm_name)

        def messages(positions: list[int]):
            if lease_id:  # on a message of its own, so that each block's message is its header and bytes alone
                yield kvstore_pb2.PutChunk(lease_id=lease_id, lease_ttl_s=lease_ttl_s)
            for i in positions:
                b = blocks[i]
                yield from chunks_of(self._header(b), b.data, kvstore_pb2.PutChunk)  # the one copy

        async def put_shm(shard: int, positions: list[int]) -> int:
            with self._shm_pool.lend() as file:
                headers, offset = [], 0
                for i in positions:
                    b = blocks[i]
                    shm_files.write_block(file.fd, offset, block_views(b.data))  # the one copy
                    headers.append(self._header(b, offset))
                    offset += len(b.data)
                handle = file.handle(self._registrars[shard])
                chunks = [first_message(headers[0], handle)] + [kvstore_pb2.PutChunk(header=h) for h in headers[1:]]
                return (await self._puts[shard](iter(chunks), timeout=timeout)).stored

        stored = 0

        async def put_group(shard: int, positions: list[int]) -> None:
            nonlocal stored
            if self.shm[shard]:
                try:
                    stored += await put_shm(shard, positions)
                    return
                except (grpc.aio.AioRpcError, shm_files.ShmUnavailable) as err:
                    if not self._shm_refused(shard, err):
                        raise
            stored += (await self._puts[shard](messages(positions), timeout=timeout)).stored

        await self._with_failover([b.key for b in blocks], put_group, lease_unknown)
        return stored

    def _shm_refused(self, shard: int, err: Exception) -> bool:
        """A shard that cannot use shared memory (another host, run without --kv-shm, its socket gone) gets the socket
        from now on; True if that was the error."""
        if isinstance(err, shm_files.ShmUnavailable):
            detail = str(err)
        elif err.code() == grpc.StatusCode.FAILED_PRECONDITION and "shm" in (err.details() or ""):
            detail = err.details()
        else:
            return False
        log.warning("kvstore %s: no shared memory (%s); using the socket", self.targets[shard], detail)
        self.shm[shard] = False
        return True

    async def get(self, keys: list[str], timeout: float | None = None, wait_s: float = 0.0,
                  lease_id: str = "", on_block: Callable[[BlockData], object] | None = None) -> list[BlockData]:
        """Fetch blocks in the given order, each checked against its checksum on arrival. A block missing from its
        shard (or a shard down) is looked for on the key's next-ranked shards.

        ``wait_s``: blocks not stored yet are waited for, at most this long each shard, and streamed as they come;
        ``lease_id``: the writer's lease, whose release ends the wait (ABORTED) instead of the deadline;
        ``on_block``: called with each block, in key order, as soon as it and every block before it have arrived
        (e.g. to import it while the rest is still on the wire)."""
        out: list[BlockData | None] = [None] * len(keys)
        delivered = 0

        def arrived(i: int, block: BlockData) -> None:
            nonlocal delivered
            out[i] = block
            while on_block is not None and delivered < len(out) and out[delivered] is not None:
                on_block(out[delivered])
                delivered += 1

        def request(positions: list[int], shm_name: str = "") -> kvstore_pb2.GetRequest:
            return kvstore_pb2.GetRequest(keys=[keys[i] for i in positions], wait_s=wait_s, lease_id=lease_id,
                                          shm_name=shm_name)

        def checked(header: kvstore_pb2.BlockHeader, crc32: int, complete: bool, data) -> BlockData:
            if not complete or crc32 != header.crc32:
                raise KVIntegrityError(f"block {header.key} arrived corrupted")
            if self.mac is not None:
                try:
                    self.mac.verify(header.key, header.token_count, data, header.mac)
                except MacMismatch as exc:
                    raise KVIntegrityError(str(exc)) from None
            return BlockData(header.key, header.token_count, data, header.kv_dtype)

        async def get_socket(shard: int, positions: list[int]) -> None:
            it = iter(positions)
            header, block = None, None
            async for chunk in self._gets[shard](request(positions), timeout=timeout):
                if chunk.HasField("header"):
                    if header is not None:
                        arrived(next(it), checked(header, block.crc32, block.complete, block.block().contiguous()))
                    if chunk.header.nbytes > MAX_BLOCK_BYTES:
                        raise KVIntegrityError(f"block {chunk.header.key}: {chunk.header.nbytes} bytes is too big")
                    header, block = chunk.header, BlockAssembler(chunk.header.nbytes)
                    if (isinstance(chunk, InlineBlock) or header.data) and not block.add(
                            chunk if isinstance(chunk, InlineBlock) else header):
                        raise KVIntegrityError(f"block {header.key}: more bytes than its declared size")
                elif header is None or not block.add(chunk):
                    raise KVIntegrityError("kvstore sent data outside a block's declared size")
            if header is not None:
                arrived(next(it), checked(header, block.crc32, block.complete, block.block().contiguous()))

        async def get_shm(shard: int, positions: list[int]) -> None:
            with self._shm_pool.lend() as file:
                headers = []
                handle = file.handle(self._registrars[shard])
                async for chunk in self._gets[shard](request(positions, handle), timeout=timeout):
                    if not chunk.HasField("header"):
                        raise KVIntegrityError("kvstore sent data on a shared-memory Get")
                    headers.append(chunk.header)
                for i, h in zip(positions, headers):
                    data = shm_files.read_block(file.fd, h.shm_offset, h.nbytes)  # a copy: the file is reused
                    arrived(i, checked(h, checksum(data), len(data) == h.nbytes, data))

        async def get_shard(shard: int, positions: list[int]) -> None:
            try:
                if self.shm[shard]:
                    try:
                        return await get_shm(shard, positions)
                    except (grpc.aio.AioRpcError, shm_files.ShmUnavailable) as err:
                        if not self._shm_refused(shard, err):
                            raise
                await get_socket(shard, positions)
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.DATA_LOSS:
                    raise KVIntegrityError(err.details()) from err
                raise

        await self._with_failover(keys, get_shard, lambda e: e.code() == grpc.StatusCode.NOT_FOUND)
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
            if self.retry.unavailable(present):  # a shard that is down holds nothing
                self._mark_down(shard)
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

    async def corrupt(self, key: str, keep_checksum_valid: bool = False) -> None:
        """Flip a byte of a stored block (tests: the kvstore must run with --enable-fault-injection, the caller be the
        test identity); ``keep_checksum_valid``: rewrite its CRC32 to match (only the MAC tells then)."""
        faults = kvstore_faults_pb2_grpc.KVStoreFaultsStub(self.channels[self.shard_of(key)])
        await faults.Corrupt(kvstore_faults_pb2.CorruptRequest(key=key, keep_checksum_valid=keep_checksum_valid))
