"""The block store itself, free of gRPC: capacity, LRU eviction, leases, checksums and MACs.

Blocks are immutable byte strings under a key. Leased blocks are never evicted; a lease is created once (by the
router, for one request), expires at its deadline unless renewed, and releasing it frees its blocks for eviction.
Each creator holds at most ``max_leases_per_owner`` leases at a time. Every block carries the CRC32 its writer
computed and, with a stack key, its MAC (``kvstore/mac.py``), both checked on the way in and again on every read: a
block that no longer matches is dropped and reported, never served.
"""

from __future__ import annotations

import time

try:  # the same CRC32, computed with carry-less multiply instructions: several times zlib's speed
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:  # pragma: no cover - zlib-ng is a dependency; plain zlib gives the same numbers
    from zlib import crc32 as _crc32
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from pdserve.engine.kv_blocks import leading_hits

MAX_LEASE_TTL_S = 300.0  # the longest a lease lasts without a renewal
DEFAULT_MAX_LEASES_PER_OWNER = 16384  # leases one caller identity may hold at once (a router: requests x samples)
MAX_WAIT_S = 600.0  # the longest a Get waits for blocks still being written
RELEASED_KEPT = 100_000  # released lease ids remembered, so a Put or Acquire racing a release cannot revive one
DEFAULT_CAPACITY_MB = 2048.0  # byte budget of one kvstore shard unless told otherwise


class StoreFull(Exception):
    """No room even after evicting every unleased block."""


class ChecksumMismatch(Exception):
    """Stored or received bytes do not match their checksum."""


class MacMismatch(Exception):
    """A block's bytes, key or token count do not match its MAC (``kvstore/mac.py``)."""


class UnknownBlock(KeyError):
    pass


class UnknownLease(Exception):
    """The lease was never created (leases are created by the router), or has expired."""


class LeaseExists(Exception):
    """A lease is created once: the id is in use or was used before."""


class LeaseQuota(Exception):
    """The caller holds as many leases as it may."""


@dataclass
class Block:
    key: str
    token_count: int
    data: bytes  # or any object of that length that checksum() reads (the kvstore keeps a kvstore.wire.WireBlock)
    crc32: int
    leases: set[str] = field(default_factory=set)
    mac: bytes = b""


@dataclass
class Lease:
    expires_at: float
    owner: str = ""  # the identity that created it (its quota counts it)
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
    def __init__(self, capacity_bytes: int, clock: Callable[[], float] = time.monotonic, mac=None,
                 max_leases_per_owner: int = DEFAULT_MAX_LEASES_PER_OWNER) -> None:
        """``mac``: a ``kvstore.mac.BlockMAC`` (every block must carry a valid MAC), or None (no MACs: a stack run
        with --insecure-internal)."""
        self.capacity_bytes = capacity_bytes
        self.clock = clock
        self.mac = mac
        self.max_leases_per_owner = max_leases_per_owner
        self.blocks: OrderedDict[str, Block] = OrderedDict()  # least recently used first
        self.leases: dict[str, Lease] = {}
        self.leases_by_owner: Counter[str] = Counter()
        self.released: OrderedDict[str, None] = OrderedDict()  # recently released lease ids, oldest first
        self.bytes_used = 0
        self.evictions = 0
        self.checksum_failures = 0
        self.mac_failures = 0

    # --- leases ---------------------------------------------------------------------------------------------------
    def expire_leases(self) -> int:
        now = self.clock()
        expired = [lid for lid, lease in self.leases.items() if lease.expires_at <= now]
        for lid in expired:
            self._drop_lease(lid)
        return len(expired)

    def create_lease(self, lease_id: str, ttl_s: float, owner: str = "") -> None:
        """A new lease holding nothing yet; LeaseExists if the id was ever used, LeaseQuota past the owner's bound."""
        self.expire_leases()
        if lease_id in self.leases or lease_id in self.released:
            raise LeaseExists(f"lease_id: {lease_id} exists or was used before")
        if self.leases_by_owner[owner] >= self.max_leases_per_owner:
            raise LeaseQuota(f"lease_id: {owner or 'this caller'} already holds {self.max_leases_per_owner} leases")
        self.leases[lease_id] = Lease(self.clock() + ttl_s, owner)
        self.leases_by_owner[owner] += 1

    def check_lease(self, lease_id: str) -> None:
        """UnknownLease unless the lease exists or was released (a late Put of a released lease stores unleased)."""
        if lease_id not in self.leases and lease_id not in self.released:
            raise UnknownLease(f"lease_id: no lease {lease_id} (leases are created by the router; it may have "
                               "expired)")

    def _lease(self, lease_id: str, ttl_s: float, key: str) -> None:
        lease = self.leases.get(lease_id)
        if lease is None:  # released: the holder already gave it up (e.g. a cancelled request's Put arriving late)
            return
        lease.expires_at = max(lease.expires_at, self.clock() + ttl_s)
        lease.keys.add(key)
        self.blocks[key].leases.add(lease_id)

    def held(self, key: str, lease_id: str) -> bool:
        """Whether the block is stored and held by the lease (what a Get may read)."""
        block = self.blocks.get(key)
        return block is not None and lease_id in block.leases

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
        self.leases_by_owner[lease.owner] -= 1
        if not self.leases_by_owner[lease.owner]:
            del self.leases_by_owner[lease.owner]
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
            lease_ttl_s: float = 0.0, computed_crc32: int | None = None, mac: bytes = b"") -> bool:
        """Store a block (idempotent) under an existing lease. Returns True if newly stored, False if it was there.

        ``computed_crc32``: the checksum of ``data`` if the caller already computed it while receiving the bytes (it
        saves a second pass); it is compared with ``crc32``, the writer's, as a fresh one would be."""
        if lease_id:
            self.check_lease(lease_id)
        if (checksum(data) if computed_crc32 is None else computed_crc32 & 0xFFFFFFFF) != crc32:
            self.checksum_failures += 1
            raise ChecksumMismatch(f"block {key}: received bytes do not match crc32 {crc32:#010x}")
        if self.mac is not None:
            try:
                self.mac.verify(key, token_count, data, mac)
            except MacMismatch:
                self.mac_failures += 1
                raise
        existing = self.blocks.get(key)
        if existing is None:
            self._make_room(len(data))
            self.blocks[key] = Block(key, token_count, data, crc32, mac=mac)
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
        if self.mac is not None:
            try:
                self.mac.verify(key, block.token_count, block.data, block.mac)
            except MacMismatch:
                self.mac_failures += 1
                self._drop(key)
                raise MacMismatch(f"block {key} failed its MAC and was dropped") from None
        self.blocks.move_to_end(key)
        return block

    def present_prefix(self, keys: list[str]) -> int:
        return leading_hits(keys, self.blocks)

    def acquire(self, keys: list[str], lease_id: str, ttl_s: float) -> int:
        """Lease the leading present keys under an existing lease; returns how many."""
        self.expire_leases()
        self.check_lease(lease_id)
        n = self.present_prefix(keys)
        for key in keys[:n]:
            self.blocks.move_to_end(key)
            self._lease(lease_id, ttl_s, key)
        return n

    def corrupt(self, key: str, keep_checksum_valid: bool = False) -> None:
        """Flip one byte of a stored block (fault injection for tests); ``keep_checksum_valid``: and rewrite its
        CRC32 to match, as an attacker who can write the bytes would (only the MAC tells then)."""
        block = self.blocks.get(key)
        if block is None:
            raise UnknownBlock(key)
        data = bytearray(block.data.tobytes() if hasattr(block.data, "tobytes") else block.data)
        data[len(data) // 2] ^= 0xFF
        block.data = bytes(data)
        if keep_checksum_valid:
            block.crc32 = checksum(block.data)
