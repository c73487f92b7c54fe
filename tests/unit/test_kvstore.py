"""The block store: unit tests of its rules, then the real service over gRPC (eviction, leases, checksums, shards)."""

import zlib

import pytest

from pdserve.kvstore.client import rendezvous_shard
from pdserve.kvstore.mac import BlockMAC
from pdserve.kvstore.store import (
    BlockStore,
    ChecksumMismatch,
    LeaseExists,
    LeaseQuota,
    MacMismatch,
    StoreFull,
    UnknownLease,
)


def crc(data):
    return zlib.crc32(data)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_store_evicts_lru_unleased_never_leased():
    store = BlockStore(capacity_bytes=300)
    store.create_lease("L", 10)
    store.create_lease("M", 10)
    for key in "abc":
        store.put(key, 1, bytes(100), crc(bytes(100)), lease_id="L" if key == "a" else "", lease_ttl_s=10)
    store.get("b")  # b is now more recent than c
    store.put("d", 1, bytes(100), crc(bytes(100)))
    assert set(store.blocks) == {"a", "b", "d"}  # c: least recently used and unleased
    store.put("e", 1, bytes(100), crc(bytes(100)))
    assert "a" in store.blocks  # leased: kept although oldest
    store.put("x", 1, bytes(100), crc(bytes(100)), lease_id="M", lease_ttl_s=10)
    store.put("y", 1, bytes(100), crc(bytes(100)), lease_id="M", lease_ttl_s=10)
    with pytest.raises(StoreFull):
        store.put("z", 1, bytes(100), crc(bytes(100)))


def test_released_lease_is_never_revived_by_a_late_put_or_acquire():
    """A cancelled request's lease is released while its Put may still be on the wire: that Put stores the block but
    must not lease it again (the lease would outlive the request until its TTL). An expired lease is not barred."""
    clock = FakeClock()
    store = BlockStore(capacity_bytes=1000, clock=clock)
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
    store = BlockStore(1000)
    assert store.put("k", 2, b"abc", crc(b"abc")) is True
    assert store.put("k", 2, b"abc", crc(b"abc")) is False
    assert store.bytes_used == 3
    with pytest.raises(ChecksumMismatch):
        store.put("j", 1, b"abc", 123)


def test_leases_expire_and_renew():
    clock = FakeClock()
    store = BlockStore(1000, clock)
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
    store = BlockStore(1000, max_leases_per_owner=2)
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
    store = BlockStore(1000, mac=mac)
    store.create_lease("L", 5)
    data = b"kv bytes"
    with pytest.raises(MacMismatch):  # a forged block: right CRC, wrong key
        store.put("k", 2, data, crc(data), "L", 5, mac=forger.sign("k", 2, data))
    with pytest.raises(MacMismatch):  # a genuine block replayed under another key
        store.put("j", 2, data, crc(data), "L", 5, mac=mac.sign("k", 2, data))
    assert store.mac_failures == 2 and not store.blocks
    store.put("k", 2, data, crc(data), "L", 5, mac=mac.sign("k", 2, data))
    assert store.get("k").data == data
    store.corrupt("k", keep_checksum_valid=True)  # bytes and CRC rewritten: only the MAC tells
    with pytest.raises(MacMismatch):
        store.get("k")
    assert "k" not in store.blocks and store.mac_failures == 3  # dropped and counted, never served
