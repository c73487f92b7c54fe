"""The block store: its rules (eviction, leases, checksums, the budget as memory, counters kept as they change) and
rendezvous placement."""

import gc
import random
import tracemalloc
import zlib

import pytest

from pdserve.kvstore.faults import corrupt_block
from pdserve.kvstore.mac import BlockMAC
from pdserve.kvstore.placement import rendezvous_shard
from pdserve.kvstore.store import LEASE_ENTRY_BYTES, LEASE_OVERHEAD_BYTES, BlockStore
from pdserve.kvstore.stored import ChecksumMismatch, LeaseExists, LeaseQuota, MacMismatch, StoreFull, UnknownLease, block_charge
from pdserve.kvstore.wire import BlockAssembler, InlineBlock, chunks_of, decoder
from pdserve.v1 import kvstore_pb2


def crc(data):
    return zlib.crc32(data)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


C100 = block_charge("a", bytes(100))  # what a 100-byte block under a one-letter key costs
LEASE = LEASE_OVERHEAD_BYTES + LEASE_ENTRY_BYTES  # a lease holding one block


def test_store_evicts_lru_unleased_never_leased():
    store = BlockStore(capacity_bytes=3 * C100 + LEASE)
    store.create_lease("L", 10)
    for key in "abc":
        store.put(key, 1, bytes(100), crc(bytes(100)), lease_id="L" if key == "a" else "", lease_ttl_s=10)
    store.get("b")  # b is now more recent than c
    store.put("d", 1, bytes(100), crc(bytes(100)))
    assert set(store.blocks) == {"a", "b", "d"}  # c: least recently used and unleased
    store.put("e", 1, bytes(100), crc(bytes(100)))
    assert set(store.blocks) == {"a", "d", "e"}  # a: leased, kept although oldest
    assert store.evictions == 2


def test_a_full_store_of_leased_blocks_refuses_and_stores_nothing():
    store = BlockStore(capacity_bytes=2 * C100 + 2 * LEASE)
    store.create_lease("M", 10)
    store.create_lease("N", 10)
    store.put("x", 1, bytes(100), crc(bytes(100)), lease_id="M", lease_ttl_s=10)
    store.put("y", 1, bytes(100), crc(bytes(100)), lease_id="N", lease_ttl_s=10)
    used = store.bytes_used
    with pytest.raises(StoreFull):
        store.put("z", 1, bytes(100), crc(bytes(100)))
    with pytest.raises(StoreFull):  # the block fits once y goes, but its lease's bookkeeping does not: nothing kept
        store.release("N")
        store.create_lease("Z", 10)
        store.put("z", 1, bytes(100), crc(bytes(100)), lease_id="Z", lease_ttl_s=10)
        store.put("w", 1, bytes(100), crc(bytes(100)), lease_id="Z", lease_ttl_s=10)
    assert "w" not in store.blocks and store.bytes_used <= used


def test_block_count_limit_evicts_then_refuses():
    store = BlockStore(capacity_bytes=1 << 30, max_blocks=3)
    store.create_lease("L", 10)
    for key in "abc":
        store.put(key, 1, b"x", crc(b"x"), lease_id="L" if key != "c" else "", lease_ttl_s=10)
    store.put("d", 1, b"x", crc(b"x"))
    assert set(store.blocks) == {"a", "b", "d"}
    store.acquire(["d"], "L", 10)
    with pytest.raises(StoreFull, match="3 of 3 blocks"):
        store.put("e", 1, b"x", crc(b"x"))


def test_released_lease_is_never_revived_by_a_late_put_or_acquire():
    """A cancelled request's lease is released while its Put may still be on the wire: that Put stores the block but
    must not lease it again (the lease would outlive the request until its TTL). An expired lease is not barred."""
    clock = FakeClock()
    store = BlockStore(capacity_bytes=100_000, clock=clock)
    store.create_lease("R", 10)
    store.put("a", 1, bytes(10), crc(bytes(10)), lease_id="R", lease_ttl_s=10)
    assert store.release("R") == 1
    store.put("b", 1, bytes(10), crc(bytes(10)), lease_id="R", lease_ttl_s=10)
    assert store.acquire(["a", "b"], "R", 10) == 2
    assert store.leases == {} and store.leased_blocks == 0
    with pytest.raises(LeaseExists):  # and it is never created again
        store.create_lease("R", 10)
    store.create_lease("E", 1)
    store.put("c", 1, bytes(10), crc(bytes(10)), lease_id="E", lease_ttl_s=1)
    clock.now = 5.0
    assert store.expire_leases() == 1
    with pytest.raises(UnknownLease):  # expired: gone, as one never created
        store.acquire(["c"], "E", 10)
    assert store.leased_blocks == 0


def test_store_put_is_idempotent_and_checks_crc():
    store = BlockStore(100_000)
    assert store.put("k", 2, b"abc", crc(b"abc")) is True
    assert store.put("k", 2, b"abc", crc(b"abc")) is False
    assert store.bytes_used == block_charge("k", b"abc")
    with pytest.raises(ChecksumMismatch):
        store.put("j", 1, b"abc", 123)


def test_leases_expire_and_renew():
    clock = FakeClock()
    store = BlockStore(100_000, clock)
    store.create_lease("L", 5)
    store.put("k", 1, b"x", crc(b"x"), lease_id="L", lease_ttl_s=5)
    clock.now = 4
    assert store.renew("L", 5) == 1
    clock.now = 8
    store.expire_leases()
    assert store.leased_blocks == 1
    clock.now = 9.5
    store.expire_leases()
    assert store.leased_blocks == 0 and not store.leases
    assert store.bytes_used == block_charge("k", b"x")  # the lease's bookkeeping went with it


def test_puts_still_arriving_are_charged_and_evict_like_blocks():
    store = BlockStore(capacity_bytes=2 * C100)
    store.put("a", 1, bytes(100), crc(bytes(100)))
    store.reserve(C100)
    assert store.bytes_used == 2 * C100 and store.reserved == C100
    store.reserve(C100)  # evicts a
    assert "a" not in store.blocks
    with pytest.raises(StoreFull):
        store.reserve(1)
    store.unreserve(2 * C100)
    assert store.bytes_used == 0 and store.reserved == 0


def test_discard_new_undoes_a_failed_put_but_keeps_what_others_lease():
    store = BlockStore(100_000)
    store.create_lease("P", 10)
    store.create_lease("Q", 10)
    store.put("mine", 1, b"x", crc(b"x"), lease_id="P", lease_ttl_s=10)
    store.put("shared", 1, b"y", crc(b"y"), lease_id="P", lease_ttl_s=10)
    store.acquire(["shared"], "Q", 10)
    assert store.discard_new(["mine", "shared"], "P") == 1
    assert set(store.blocks) == {"shared"} and store.leased_blocks == 1
    assert store.leases["P"].keys == {"shared"}


def _recount(store: BlockStore) -> tuple[int, int, int]:
    """(bytes used, leased blocks, evictable blocks) counted from scratch."""
    used = store.reserved + sum(b.charge for b in store.blocks.values())
    used += sum(LEASE_OVERHEAD_BYTES + LEASE_ENTRY_BYTES * len(lease.keys) for lease in store.leases.values())
    leased = sum(1 for b in store.blocks.values() if b.leases)
    return used, leased, len(store.blocks) - leased


def test_counters_kept_as_they_change_match_a_recount():
    clock = FakeClock()
    store = BlockStore(capacity_bytes=30 * C100, clock=clock, max_blocks=25)
    rng = random.Random(7)
    names: list[str] = []  # leases made so far; the ops pick among the newest six (a released id is never reused)
    for step in range(3000):
        op = rng.randrange(8)
        key, lease = f"k{rng.randrange(40)}", rng.choice(names[-6:] or ["none"])
        try:
            if op == 7 or not names:
                names.append(f"L{step}")
                store.create_lease(names[-1], rng.uniform(1, 5))
            elif op == 0:
                data = bytes(rng.randrange(1, 200))
                store.put(key, 1, data, crc(data), lease_id=rng.choice(["", lease]), lease_ttl_s=rng.uniform(1, 5))
            elif op == 1:
                store.acquire([f"k{i}" for i in range(rng.randrange(5))], lease, rng.uniform(1, 5))
            elif op == 2:
                store.release(lease)
            elif op == 3:
                store.renew(lease, rng.uniform(1, 5))
            elif op == 4:
                clock.now += rng.uniform(0, 1)
                store.expire_leases()
            elif op == 5:
                store.discard_new([key], lease)
            elif key in store.blocks:
                store.get(key)
        except (StoreFull, UnknownLease):
            pass
        assert (store.bytes_used, store.leased_blocks, len(store.evictable)) == _recount(store)
        assert store.bytes_used <= store.capacity_bytes and len(store.blocks) <= store.max_blocks


class NoScan(dict):
    """A dict that fails the test when something walks it."""

    def __iter__(self):
        raise AssertionError("the whole store was scanned")

    values = items = keys = __iter__


def test_no_operation_walks_the_whole_store():
    store = BlockStore(capacity_bytes=60 * C100)
    store.blocks = NoScan()
    for i in range(100):  # evicting from the 60th on
        store.create_lease(f"L{i}", 10)
        store.put(f"k{i}", 1, bytes(100), crc(bytes(100)), lease_id=f"L{i}", lease_ttl_s=10)
        store.release(f"L{i - 2}")
    store.create_lease("A", 10)
    store.acquire(["k99", "k98"], "A", 10)
    store.get("k99")
    store.expire_leases()
    assert store.leased_blocks >= 1 and store.evictions > 0


def _wire_block(key: str, payload: bytes):
    """A block as the service keeps it: assembled from the messages a Put brought."""
    decode = decoder(kvstore_pb2.PutChunk)
    header = kvstore_pb2.BlockHeader(key=key, token_count=16, nbytes=len(payload), crc32=crc(payload))
    assembler = None
    for message in chunks_of(header, payload, kvstore_pb2.PutChunk):
        chunk = decode(message if isinstance(message, bytes) else message.SerializeToString())
        if chunk.HasField("header"):
            assembler = BlockAssembler(len(payload))
            if isinstance(chunk, InlineBlock):
                assembler.add(chunk)
        else:
            assembler.add(chunk)
    return assembler.block(), assembler.crc32


@pytest.mark.parametrize(("size", "n"), [(1, 5000), (4096, 2000), (300_000, 40)])
def test_the_budget_charges_at_least_the_memory_blocks_and_leases_take(size, n):
    """tracemalloc counts every Python allocation the stored blocks, their keys and their leases made: the charge
    covers it (a million one-byte blocks cannot outgrow the budget) without overstating it by half."""
    payloads = [bytes([i % 256]) * size for i in range(n)]
    gc.collect()
    tracemalloc.start()
    try:
        store = BlockStore(1 << 40)
        for i in range(min(n, 50)):
            store.create_lease(f"lease-{i}", 60)
        for i, payload in enumerate(payloads):
            data, computed = _wire_block(f"{i:064x}", payload)
            store.put(f"{i:064x}", 16, data, computed, lease_id=f"lease-{i % 50}", lease_ttl_s=60,
                      computed_crc32=computed)
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert traced <= store.bytes_used <= 1.5 * traced


def test_rendezvous_is_stable_and_spreads():
    shards = ["a:1", "b:2", "c:3"]
    keys = [f"key{i}" for i in range(3000)]
    placement = [rendezvous_shard(k, shards) for k in keys]
    counts = [placement.count(i) for i in range(3)]
    assert min(counts) > 800
    # adding a shard moves only keys to the new shard
    moved = [(p, rendezvous_shard(k, shards + ["d:4"])) for k, p in zip(keys, placement)]
    assert all(new in (old, 3) for old, new in moved)




def test_leases_are_created_once_within_each_owners_quota_and_blocks_need_one():
    store = BlockStore(100_000, max_leases_per_owner=2)
    with pytest.raises(UnknownLease):  # never created: no Put, no Acquire under it
        store.put("k", 1, b"x", crc(b"x"), lease_id="nobody-made-this", lease_ttl_s=5)
    with pytest.raises(UnknownLease):
        store.acquire(["k"], "nobody-made-this", 5)
    assert "k" not in store.blocks
    store.create_lease("a", 5, owner="router")
    store.create_lease("b", 5, owner="router")
    with pytest.raises(LeaseQuota):
        store.create_lease("c", 5, owner="router")
    store.create_lease("c", 5, owner="other")  # the quota is per owner
    store.release("a")
    store.create_lease("d", 5, owner="router")  # released: room again
    store.put("k", 1, b"x", crc(b"x"), lease_id="b", lease_ttl_s=5)
    assert store.held("k", "b") and not store.held("k", "d") and not store.held("absent", "b")


def test_blocks_must_carry_the_stacks_mac_on_put_and_keep_it_on_every_get():
    mac, forger = BlockMAC(b"k" * 32), BlockMAC(b"f" * 32)
    store = BlockStore(100_000, mac=mac)
    store.create_lease("L", 5)
    data = b"kv bytes"
    with pytest.raises(MacMismatch):  # a forged block: right CRC, wrong key
        store.put("k", 2, data, crc(data), "L", 5, mac=forger.sign("k", 2, data))
    with pytest.raises(MacMismatch):  # a genuine block replayed under another key
        store.put("j", 2, data, crc(data), "L", 5, mac=mac.sign("k", 2, data))
    assert store.mac_failures == 2 and not store.blocks
    store.put("k", 2, data, crc(data), "L", 5, mac=mac.sign("k", 2, data))
    assert store.get("k").data == data
    corrupt_block(store, "k", keep_checksum_valid=True)  # bytes and CRC rewritten: only the MAC tells
    with pytest.raises(MacMismatch):
        store.get("k")
    assert "k" not in store.blocks and store.mac_failures == 3  # dropped and counted, never served
