"""The block store itself, free of gRPC: capacity, LRU eviction, leases, checksums.

Blocks are immutable byte strings under a key. Leased blocks are never evicted; a lease expires at its deadline unless
renewed, and releasing it frees its blocks for eviction. Every block carries the CRC32 its writer computed, checked on
the way in and again on every read: a block whose bytes no longer match is dropped and reported, never served.
"""

from __future__ import annotations

import time

try:  # the same CRC32, computed with carry-less multiply instructions: several times zlib's speed
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:  # pragma: no cover - zlib-ng is a dependency; plain zlib gives the same numbers
    from zlib import crc32 as _crc32
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from pdserve.engine.kv_blocks import leading_hits

MAX_LEASE_TTL_S = 3600.0
MAX_WAIT_S = 600.0  # the longest a Get waits for blocks still being written
RELEASED_KEPT = 100_000  # released lease ids remembered, so a Put or Acquire racing a release cannot revive one
DEFAULT_CAPACITY_MB = 2048.0  # byte budget of one kvstore shard unless told otherwise


class StoreFull(Exception):
    """No room even after evicting every unleased block."""


class ChecksumMismatch(Exception):
    """Stored or received bytes do not match their checksum."""


class UnknownBlock(KeyError):
    pass


@dataclass
class Block:
    key: str
    token_count: int
    data: bytes  # or any object of that length that checksum() reads (the kvstore keeps a kvstore.wire.WireBlock)
    crc32: int
    leases: set[str] = field(default_factory=set)
    kv_dtype: str = ""  # the writer's (BlockHeader.kv_dtype), sent back with the block


@dataclass
class Lease:
    expires_at: float
    keys: set[str] = field(default_factory=set)


def block_views(data):
    """A block's bytes as bytes-like pieces: ``data`` itself, or the pieces of one that has ``views()``
    (kvstore.wire.WireBlock)."""
    views = getattr(data, "views", None)
    return (data,) if views is None else views()


def checksum(data, previous: int = 0) -> int:
    """CRC32 (zlib's polynomial) of ``data`` (see :func:`block_views`), continuing from ``previous`` (the CRC32 of
    the bytes before it)."""
    for view in block_views(data):
        previous = _crc32(view, previous)
    return previous & 0xFFFFFFFF


class BlockStore:
    def __init__(self, capacity_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity_bytes = capacity_bytes
        self.clock = clock
        self.blocks: OrderedDict[str, Block] = OrderedDict()  # least recently used first
        self.leases: dict[str, Lease] = {}
        self.released: OrderedDict[str, None] = OrderedDict()  # recently released lease ids, oldest first
        self.bytes_used = 0
        self.evictions = 0
        self.checksum_failures = 0

    # --- leases ---------------------------------------------------------------------------------------------------
    def expire_leases(self) -> int:
        now = self.clock()
        expired = [lid for lid, lease in self.leases.items() if lease.expires_at <= now]
        for lid in expired:
            self._drop_lease(lid)
        return len(expired)

    def _lease(self, lease_id: str, ttl_s: float, key: str) -> None:
        if lease_id in self.released:  # the holder already gave it up (e.g. a cancelled request's Put arriving late)
            return
        lease = self.leases.get(lease_id)
        if lease is None:
            lease = self.leases[lease_id] = Lease(self.clock() + ttl_s)
        else:
            lease.expires_at = max(lease.expires_at, self.clock() + ttl_s)
        lease.keys.add(key)
        self.blocks[key].leases.add(lease_id)

    def renew(self, lease_id: str, ttl_s: float) -> int:
        self.expire_leases()
        lease = self.leases.get(lease_id)
        if lease is None:
            return 0
        lease.expires_at = self.clock() + ttl_s
        return len(lease.keys)

    def release(self, lease_id: str) -> int:
        """Give a lease up for good: its blocks may be evicted, and the id is never leased again."""
        self.released[lease_id] = None
        self.released.move_to_end(lease_id)
        while len(self.released) > RELEASED_KEPT:
            self.released.popitem(last=False)
        return self._drop_lease(lease_id)

    def _drop_lease(self, lease_id: str) -> int:
        lease = self.leases.pop(lease_id, None)
        if lease is None:
            return 0
        for key in lease.keys:
            block = self.blocks.get(key)
            if block is not None:
                block.leases.discard(lease_id)
        return len(lease.keys)

    @property
    def leased_blocks(self) -> int:
        return sum(1 for b in self.blocks.values() if b.leases)

    # --- blocks ---------------------------------------------------------------------------------------------------
    def _make_room(self, nbytes: int) -> None:
        if nbytes > self.capacity_bytes:
            raise StoreFull(f"a block of {nbytes} bytes exceeds the capacity of {self.capacity_bytes} bytes")
        if self.bytes_used + nbytes <= self.capacity_bytes:
            return
        self.expire_leases()
        for key in list(self.blocks):
            if self.bytes_used + nbytes <= self.capacity_bytes:
                break
            block = self.blocks[key]
            if not block.leases:
                self._drop(key)
                self.evictions += 1
        if self.bytes_used + nbytes > self.capacity_bytes:
            raise StoreFull(f"kvstore full: {self.bytes_used} of {self.capacity_bytes} bytes are leased")

    def _drop(self, key: str) -> None:
        block = self.blocks.pop(key)
        self.bytes_used -= len(block.data)
        for lid in block.leases:
            lease = self.leases.get(lid)
            if lease is not None:
                lease.keys.discard(key)

    def put(self, key: str, token_count: int, data: bytes, crc32: int, lease_id: str = "",
            lease_ttl_s: float = 0.0, computed_crc32: int | None = None, kv_dtype: str = "") -> bool:
        """Store a block (idempotent). Returns True if newly stored, False if it was already there.

        ``computed_crc32``: the checksum of ``data`` if the caller already computed it while receiving the bytes (it
        saves a second pass); it is compared with ``crc32``, the writer's, as a fresh one would be."""
        if (checksum(data) if computed_crc32 is None else computed_crc32 & 0xFFFFFFFF) != crc32:
            self.checksum_failures += 1
            raise ChecksumMismatch(f"block {key}: received bytes do not match crc32 {crc32:#010x}")
        existing = self.blocks.get(key)
        if existing is None:
            self._make_room(len(data))
            self.blocks[key] = Block(key, token_count, data, crc32, kv_dtype=kv_dtype)
            self.bytes_used += len(data)
        else:
            self.blocks.move_to_end(key)
        if lease_id:
            self._lease(lease_id, lease_ttl_s, key)
        return existing is None

    def get(self, key: str) -> Block:
        block = self.blocks.get(key)
        if block is None:
            raise UnknownBlock(key)
        if checksum(block.data) != block.crc32:
            self.checksum_failures += 1
            self._drop(key)
            raise ChecksumMismatch(f"block {key} failed its checksum and was dropped")
        self.blocks.move_to_end(key)
        return block

    def present_prefix(self, keys: list[str]) -> int:
        return leading_hits(keys, self.blocks)

    def acquire(self, keys: list[str], lease_id: str, ttl_s: float) -> int:
        """Lease the leading present keys; returns how many."""
        self.expire_leases()
        n = self.present_prefix(keys)
        for key in keys[:n]:
            self.blocks.move_to_end(key)
            self._lease(lease_id, ttl_s, key)
        return n

    def corrupt(self, key: str) -> None:
        """Flip one byte of a stored block (fault injection for tests)."""
        block = self.blocks.get(key)
        if block is None:
            raise UnknownBlock(key)
        data = bytearray(block.data.tobytes() if hasattr(block.data, "tobytes") else block.data)
        data[len(data) // 2] ^= 0xFF
        block.data = bytes(data)
