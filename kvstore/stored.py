"""What the block store holds and how it refuses: a stored block and a lease, a block's checksum and its charge
against the byte budget, and the store's errors (kvstore/store.py keeps the store itself)."""

from __future__ import annotations

try:  # the same CRC32, computed with carry-less multiply instructions: several times zlib's speed
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:  # pragma: no cover - zlib-ng is a dependency; plain zlib gives the same numbers
    from zlib import crc32 as _crc32
import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field

# Memory charged per block beyond its bytes: the Python objects around it (measured with tracemalloc by
# tests/unit/kvstore/test_kvstore.py, which fails if the real cost exceeds these)
BLOCK_OVERHEAD_BYTES = 656
BYTES_OBJECT_OVERHEAD = 48  # a bytes object's header and allocator rounding, per message a block is held in


class StoreFull(Exception):
    """No room even after evicting every unleased block."""


class ChecksumMismatch(Exception):
    """Stored or received bytes do not match their checksum."""


class MacMismatch(Exception):
    """A block's bytes, key or token count do not match its MAC (``kvstore/mac.py``)."""


class UnknownBlock(KeyError):
    pass


class UnknownLease(Exception):
    """The lease was never created here (leases are created by the router; a shard that was down then, or restarted
    since, never saw it), or has expired. Its text starts with the contract's :data:`UNKNOWN_LEASE`
    (``kvstore/contract.py``), for clients to tell it apart."""


class LeaseExists(Exception):
    """A lease is created once: the id is in use or was used before."""


class LeaseQuota(Exception):
    """The caller holds as many leases as it may."""


@dataclass(slots=True)
class Block:
    key: str
    token_count: int
    data: bytes  # or any object of that length that checksum() reads (the kvstore keeps a kvstore.wire.WireBlock)
    crc32: int
    charge: int = 0  # bytes of the budget it takes (block_charge)
    leases: set[str] | None = None  # made with the first lease: most blocks are never leased twice
    kv_dtype: str = ""  # the writer's (BlockHeader.kv_dtype), sent back with the block
    mac: bytes = b""


@dataclass(slots=True)
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


def held_bytes(data) -> int:
    """The memory ``data`` keeps alive: a kvstore.wire.WireBlock holds whole messages (headers and all)."""
    messages = getattr(data, "messages", None)
    if messages is None:
        return len(data) + BYTES_OBJECT_OVERHEAD
    return sum(len(m) + BYTES_OBJECT_OVERHEAD for m in messages)


def block_charge(key: str, data) -> int:
    """What a block costs the budget: its bytes as held, its key, and the objects that keep it."""
    return held_bytes(data) + len(key) + BLOCK_OVERHEAD_BYTES


class LeaseDeadlines:
    """Lease deadlines as a heap of (expires_at, lease id). A renewed or released lease leaves its old row behind
    (skipped when it comes due); the heap is rebuilt from the live leases when such rows pile up."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, str]] = []

    def push(self, lease_id: str, expires_at: float, live: dict[str, Lease]) -> None:
        heapq.heappush(self.rows, (expires_at, lease_id))
        if len(self.rows) > 4 * len(live) + 1024:
            self.rows = [(lease.expires_at, lid) for lid, lease in live.items()]
            heapq.heapify(self.rows)

    def due(self, now: float) -> Iterator[str]:
        """The lease ids whose rows are due by ``now``, taken off the heap."""
        while self.rows and self.rows[0][0] <= now:
            yield heapq.heappop(self.rows)[1]
