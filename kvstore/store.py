"""The block store itself, free of gRPC: capacity, LRU eviction, leases, checksums and MACs.

Blocks are immutable byte strings under a key. Leased blocks are never evicted; a lease is created once (by the
router, for one request), expires at its deadline unless renewed, and releasing it frees its blocks for eviction.
Each creator holds at most ``max_leases_per_owner`` leases at a time. Every block carries the CRC32 its writer
computed and, with a stack key, its MAC (``kvstore/mac.py``), both checked on the way in and again on every read: a
block that no longer matches is dropped and reported, never served.

The byte budget is the store's memory, not only its payload: each block is charged its bytes as held (the messages
that carried them), its key and a fixed overhead for the Python objects around it; each lease and each block a lease
holds are charged too, and so are the bytes of Puts still arriving (:meth:`reserve`). A block count limit bounds the
bookkeeping of tiny blocks. Every count is kept as it changes: no operation walks the whole store (eviction takes
unleased blocks from the front of their own LRU order, expiry takes leases from a heap by deadline). Over 300 lines
because those counters change together in one class, easier to check in one place; what it stores and refuses is
kvstore/stored.py.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable

from pdserve.engine.kv.blocks import leading_hits
from pdserve.kvstore.contract import UNKNOWN_LEASE
from pdserve.kvstore.stored import (
    Block,
    ChecksumMismatch,
    Lease,
    LeaseDeadlines,
    LeaseExists,
    LeaseQuota,
    MacMismatch,
    StoreFull,
    UnknownBlock,
    UnknownLease,
    block_charge,
    checksum,
)

DEFAULT_MAX_LEASES_PER_OWNER = 16384  # leases one caller identity may hold at once (a router: requests x samples)
RELEASED_KEPT = 100_000  # released lease ids remembered, so a Put or Acquire racing a release cannot revive one
DEFAULT_CAPACITY_MB = 2048.0  # byte budget of one kvstore shard unless told otherwise
DEFAULT_MAX_BLOCKS = 1 << 20  # blocks one shard holds at most, whatever their size
MAX_LEASES = 100_000  # live leases at once (one per request waiting for decode, and one per extra sample)
# Memory charged per lease and per block a lease holds: the Python objects around them (measured with tracemalloc by
# tests/unit/kvstore/test_kvstore.py, which fails if the real cost exceeds these; a block's own: kvstore/stored.py)
LEASE_OVERHEAD_BYTES = 512
LEASE_ENTRY_BYTES = 288


class BlockStore:
    def __init__(self, capacity_bytes: int, clock: Callable[[], float] = time.monotonic, mac=None,
                 max_blocks: int = DEFAULT_MAX_BLOCKS, max_leases_per_owner: int = DEFAULT_MAX_LEASES_PER_OWNER) -> None:
        """``mac``: a ``kvstore.mac.BlockMAC`` (every block must carry a valid MAC), or None (no MACs: a stack run
        with --insecure-internal)."""
        self.capacity_bytes = capacity_bytes
        self.max_blocks = max_blocks
        self.clock = clock
        self.mac = mac
        self.max_leases_per_owner = max_leases_per_owner
        self.blocks: dict[str, Block] = {}
        self.evictable: OrderedDict[str, None] = OrderedDict()  # unleased blocks, least recently used first
        self.leases: dict[str, Lease] = {}
        self.leases_by_owner: Counter[str] = Counter()
        self._deadlines = LeaseDeadlines()
        self.released: OrderedDict[str, None] = OrderedDict()  # recently released lease ids, oldest first
        self.bytes_used = 0  # everything charged: blocks, leases, Puts still arriving
        self.reserved = 0  # the part of it that Puts still arriving hold
        self.leased_blocks = 0  # blocks held by at least one lease
        self.evictions = 0
        self.checksum_failures = 0
        self.mac_failures = 0

    # --- the budget -------------------------------------------------------------------------------------------------
    def _make_room(self, nbytes: int, new_blocks: int = 0) -> None:
        """Evict unleased blocks, least recently used first, until ``nbytes`` more (and ``new_blocks`` more blocks)
        fit; StoreFull when they cannot."""
        if nbytes > self.capacity_bytes:
            raise StoreFull(f"{nbytes} bytes exceed the capacity of {self.capacity_bytes} bytes")

        def fits() -> bool:
            return (self.bytes_used + nbytes <= self.capacity_bytes
                    and len(self.blocks) + new_blocks <= self.max_blocks)

        if fits():
            return
        self.expire_leases()
        while not fits() and self.evictable:
            self._drop(next(iter(self.evictable)))
            self.evictions += 1
        if not fits():
            raise StoreFull(f"kvstore full: {self.bytes_used} of {self.capacity_bytes} bytes and {len(self.blocks)} "
                            f"of {self.max_blocks} blocks are leased or being written")

    def reserve(self, nbytes: int) -> None:
        """Charge the bytes of a Put still arriving (evicting to make room); StoreFull when they cannot fit."""
        self._make_room(nbytes)
        self.bytes_used += nbytes
        self.reserved += nbytes

    def unreserve(self, nbytes: int) -> None:
        self.bytes_used -= nbytes
        self.reserved -= nbytes

    # --- leases ---------------------------------------------------------------------------------------------------
    def expire_leases(self) -> int:
        now, expired = self.clock(), 0
        for lease_id in self._deadlines.due(now):
            lease = self.leases.get(lease_id)
            if lease is not None and lease.expires_at <= now:  # (a renewed lease has a later row)
                self._drop_lease(lease_id)
                expired += 1
        return expired

    def _set_deadline(self, lease_id: str, lease: Lease, expires_at: float) -> None:
        lease.expires_at = expires_at
        self._deadlines.push(lease_id, expires_at, self.leases)

    def create_lease(self, lease_id: str, ttl_s: float, owner: str = "") -> None:
        """A new lease holding nothing yet; LeaseExists if the id was ever used, LeaseQuota past the owner's bound,
        StoreFull past the store's lease count or byte budget."""
        self.expire_leases()
        if lease_id in self.leases or lease_id in self.released:
            raise LeaseExists(f"lease_id: {lease_id} exists or was used before")
        if self.leases_by_owner[owner] >= self.max_leases_per_owner:
            raise LeaseQuota(f"lease_id: {owner or 'this caller'} already holds {self.max_leases_per_owner} leases")
        if len(self.leases) >= MAX_LEASES:
            raise StoreFull(f"kvstore holds {MAX_LEASES} leases, its limit")
        self._make_room(LEASE_OVERHEAD_BYTES)
        self.bytes_used += LEASE_OVERHEAD_BYTES
        lease = self.leases[lease_id] = Lease(self.clock() + ttl_s, owner=owner)
        self._set_deadline(lease_id, lease, lease.expires_at)
        self.leases_by_owner[owner] += 1

    def knows_lease(self, lease_id: str) -> bool:
        """The lease exists or was released here (a late Put of a released lease stores unleased)."""
        return lease_id in self.leases or lease_id in self.released

    def check_lease(self, lease_id: str) -> None:
        if not self.knows_lease(lease_id):
            raise UnknownLease(f"{UNKNOWN_LEASE} {lease_id} (leases are created by the router; it may have expired, "
                               "or this kvstore restarted since)")

    def _lease(self, lease_id: str, ttl_s: float, keys: list[str]) -> None:
        """Add ``keys`` (stored blocks) to a lease (:meth:`create_lease` made it); its deadline moves to at least
        now + ``ttl_s``. A lease no longer there (released: e.g. a cancelled request's Put arriving late) adds none."""
        lease = self.leases.get(lease_id)
        if lease is None:
            return
        new_keys = [k for k in keys if k not in lease.keys]
        charge = LEASE_ENTRY_BYTES * len(new_keys)
        pinned = [k for k in new_keys if k in self.evictable]  # not evicted to make room for their own lease
        for key in pinned:
            del self.evictable[key]
        try:
            self._make_room(charge)
        except StoreFull:
            self.evictable.update(dict.fromkeys(pinned))
            raise
        self.bytes_used += charge
        deadline = self.clock() + ttl_s
        if deadline > lease.expires_at:
            self._set_deadline(lease_id, lease, deadline)
        for key in new_keys:
            lease.keys.add(key)
            block = self.blocks[key]
            if not block.leases:
                block.leases = block.leases if block.leases is not None else set()
                self.leased_blocks += 1
            block.leases.add(lease_id)

    def held(self, key: str, lease_id: str) -> bool:
        """Whether the block is stored and held by the lease (what a Get may read)."""
        block = self.blocks.get(key)
        return block is not None and lease_id in block.leases

    def renew(self, lease_id: str, ttl_s: float) -> int:
        self.expire_leases()
        lease = self.leases.get(lease_id)
        if lease is None:
            return 0
        self._set_deadline(lease_id, lease, self.clock() + ttl_s)
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
            self._unlease_block(key, lease_id)
        self.bytes_used -= LEASE_OVERHEAD_BYTES + LEASE_ENTRY_BYTES * len(lease.keys)
        return len(lease.keys)

    def _unlease_block(self, key: str, lease_id: str) -> None:
        block = self.blocks.get(key)
        if block is None or not block.leases or lease_id not in block.leases:
            return
        block.leases.discard(lease_id)
        if not block.leases:
            self.leased_blocks -= 1
            self.evictable[key] = None  # evictable again, as the most recently used

    # --- blocks ---------------------------------------------------------------------------------------------------
    def _drop(self, key: str) -> None:
        block = self.blocks.pop(key)
        self.bytes_used -= block.charge
        self.evictable.pop(key, None)
        if block.leases:
            self.leased_blocks -= 1
            for lid in block.leases:
                lease = self.leases.get(lid)
                if lease is not None:
                    lease.keys.discard(key)
                    self.bytes_used -= LEASE_ENTRY_BYTES

    def put(self, key: str, token_count: int, data: bytes, crc32: int, lease_id: str = "",
            lease_ttl_s: float = 0.0, computed_crc32: int | None = None, mac: bytes = b"",
            kv_dtype: str = "") -> bool:
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
            charge = block_charge(key, data)
            self._make_room(charge, new_blocks=1)
            self.blocks[key] = Block(key, token_count, data, crc32, charge, kv_dtype=kv_dtype, mac=mac)
            self.evictable[key] = None
            self.bytes_used += charge
        elif key in self.evictable:
            self.evictable.move_to_end(key)
        if lease_id:
            try:
                self._lease(lease_id, lease_ttl_s, [key])
            except StoreFull:
                if existing is None:
                    self._drop(key)
                raise
        return existing is None

    def discard_new(self, keys: list[str], lease_id: str) -> int:
        """Undo a failed Put: drop the blocks it stored (``keys``) that no other lease holds; returns how many."""
        dropped = 0
        for key in keys:
            block = self.blocks.get(key)
            if block is not None and (not block.leases or block.leases <= {lease_id}):
                self._drop(key)
                dropped += 1
        return dropped

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
        if key in self.evictable:
            self.evictable.move_to_end(key)
        return block

    def present_prefix(self, keys: list[str]) -> int:
        return leading_hits(keys, self.blocks)

    def acquire(self, keys: list[str], lease_id: str, ttl_s: float) -> int:
        """Lease the leading present keys under an existing lease; returns how many."""
        self.expire_leases()
        self.check_lease(lease_id)
        n = self.present_prefix(keys)
        for key in keys[:n]:
            if key in self.evictable:
                self.evictable.move_to_end(key)
        if n:
            self._lease(lease_id, ttl_s, keys[:n])
        return n
