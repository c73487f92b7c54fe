"""A decode worker holds one KVLease per request: the prefetch's, which the Decode call that takes the copy goes on
with (renewing while blocks arrive, releasing once it has them), and one of its own without a prefetch."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from pdserve.decode_server import kv_imports
from pdserve.decode_server.kv_imports import KVImports
from pdserve.kvstore.client import BlockData
from pdserve.kvstore.lease import KVLease
from pdserve.v1 import common_pb2

BT = 16


class Client:
    """A kvstore client holding two blocks; it records releases."""

    def __init__(self) -> None:
        self.released: list[str] = []

    async def get(self, keys, timeout=None, wait_s=0.0, lease_id="", on_block=None):
        blocks = [BlockData(k, BT if k != "tail" else 4, b"", "float32") for k in keys]
        for b in blocks:
            on_block(b)
        return blocks

    async def renew(self, lease_id, ttl_s, timeout=None):
        return 0

    async def release(self, lease_id, timeout=None):
        self.released.append(lease_id)
        return 0


class Cache:
    def __init__(self) -> None:
        self.length, self.block_tokens = 0, BT

    def append_block(self, data, tokens, dtype) -> None:
        self.length += tokens


class Clock:
    async def pace_transfer(self, tokens, link, elapsed) -> float:
        return 0.0


def handle() -> common_pb2.KVHandle:
    return common_pb2.KVHandle(block_keys=["full", "tail"], token_count=20, block_tokens=BT, lease_id="L",
                               lease_ttl_s=30.0, model_fingerprint="fp")


def leases_made(monkeypatch, scenario) -> tuple[int, list[str]]:
    made = []

    class Counted(KVLease):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(kv_imports, "KVLease", Counted)
    client = Client()

    async def main():
        imports = KVImports(client, Clock(), lambda tokens: Cache())
        await scenario(imports)

    asyncio.run(main())
    return len(made), client.released


def test_a_prefetched_request_has_one_lease_object_released_once(monkeypatch):
    async def scenario(imports: KVImports):
        imp = imports.start("r1", handle())
        await imp.task
        seq = SimpleNamespace(request_id="r1", kv=None)
        await imports.take(seq, handle())
        assert seq.kv is imp.cache and seq.kv.length == 20

    assert leases_made(monkeypatch, scenario) == (1, ["L"])


def test_a_decode_call_without_a_prefetch_has_one_lease_object(monkeypatch):
    async def scenario(imports: KVImports):
        seq = SimpleNamespace(request_id="r2", kv=Cache())
        await imports.take(seq, handle())
        assert seq.kv.length == 20

    assert leases_made(monkeypatch, scenario) == (1, ["L"])
