"""``pdserve bench kv --scale``: the kvstore as it fills up, and what floods do to its memory.

Three measurements, each against a kvstore process of its own (``--kvstore-python`` picks the interpreter, so that
two checkouts can be compared side by side):

- **latency by stored blocks**: the store is filled with tiny blocks (Puts of 1,000) to each level of ``--levels``;
  at each level one request's operations are timed, median of ``--repeat``: a Put of a SmolLM2-sized block under a
  lease, its Get, and an Acquire and Release of that lease. The kvstore's resident memory is read at each level.
- **flood**: ``--flood-blocks`` one-byte blocks into a store of ``--flood-capacity-mb``: the blocks it holds, the bytes
  it reports using, and its resident memory.
- **unfinished Puts**: two Put streams that each send ``--partial-mb`` of a 512 MiB block and then wait, into a store
  of ``--flood-capacity-mb``: whether they are refused, and the kvstore's resident memory while they wait.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
import uuid
import zlib
from dataclasses import dataclass
from functools import partial

import grpc

from pdserve.bench.faults.chaos import rss_mb
from pdserve.common.processes import stop_processes
from pdserve.common.readiness import grpc_serving, wait_for
from pdserve.common.server import channel
from pdserve.kvstore.client import BlockData, KVStoreClient
from pdserve.kvstore.wire import CHUNK_BYTES, MAX_BLOCK_BYTES
from pdserve.launcher.ports import free_port
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc

FILL_BATCH = 1000  # tiny blocks per Put while filling
TINY_BYTES = 16


@dataclass
class LevelRow:
    blocks: int
    put_ms: float
    get_ms: float
    lease_ms: float  # Acquire + Release
    rss_mb: float


class KVStoreProcess:
    """A kvstore started as its own process for one measurement."""

    def __init__(self, python: str, capacity_mb: float) -> None:
        self.target = f"127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen([python, "-m", "pdserve.kvstore", "--port", self.target.split(":")[1],
                                      "--capacity-mb", f"{capacity_mb:g}", "--log-level", "WARNING",
                                      "--insecure-internal"],  # the store's own costs (bench kv prices security)
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for(partial(grpc_serving, self.target), 120, f"bench kv --scale: {self.target} SERVING", self.proc,
                 lambda: self.proc.stderr.read().decode()[-2000:])

    @property
    def rss_mb(self) -> float:
        return rss_mb(self.proc.pid)

    def stop(self) -> None:
        stop_processes([self.proc], grace_s=30)


async def _fill(kv: KVStoreClient, start: int, stop: int, nbytes: int = TINY_BYTES) -> None:
    for first in range(start, stop, FILL_BATCH):  # each batch stored under a lease of its own, released at once
        lease = f"fill-{first}"
        await kv.create_lease(lease, 60.0)
        await kv.put([BlockData(f"tiny-{i:012d}", 1, i.to_bytes(8, "little") * (nbytes // 8) or b"\x01")
                      for i in range(first, min(stop, first + FILL_BATCH))], lease, 60.0)
        await kv.release(lease)


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


async def _one_request(kv: KVStoreClient, block_bytes: int, repeat: int) -> tuple[float, float, float]:
    """(Put, Get, Acquire + Release) of one request's block, median seconds."""
    puts, gets, leases = [], [], []
    for _ in range(repeat):
        block = BlockData(f"req-{uuid.uuid4().hex}", 16, bytes(block_bytes))
        lease = uuid.uuid4().hex
        await kv.create_lease(lease, 30.0)
        t0 = time.perf_counter()
        await kv.put([block], lease, 30.0)
        t1 = time.perf_counter()
        await kv.get([block.key])
        t2 = time.perf_counter()
        await kv.acquire([block.key], lease + "-2", 30.0, create=True)
        await kv.release(lease + "-2")
        t3 = time.perf_counter()
        await kv.release(lease)
        puts.append(t1 - t0)
        gets.append(t2 - t1)
        leases.append(t3 - t2)
    return _median_ms(puts), _median_ms(gets), _median_ms(leases)


def measure_levels(python: str, levels: list[int], block_bytes: int, repeat: int, capacity_mb: float) -> list[LevelRow]:
    store = KVStoreProcess(python, capacity_mb)
    rows = []

    async def run() -> None:
        kv = KVStoreClient([store.target])
        try:
            filled = 0
            for level in levels:
                await _fill(kv, filled, level)
                filled = level
                put_ms, get_ms, lease_ms = await _one_request(kv, block_bytes, repeat)
                rows.append(LevelRow(level, put_ms, get_ms, lease_ms, store.rss_mb))
                print(f"  {level} blocks: put {put_ms:.2f} ms, get {get_ms:.2f} ms, acquire+release {lease_ms:.2f} ms, "
                      f"RSS {rows[-1].rss_mb:.0f} MiB", flush=True)
        finally:
            await kv.close()

    try:
        asyncio.run(run())
    finally:
        store.stop()
    return rows


def measure_flood(python: str, blocks: int, capacity_mb: float) -> dict:
    store = KVStoreProcess(python, capacity_mb)

    async def run() -> dict:
        kv = KVStoreClient([store.target])
        try:
            start = time.perf_counter()
            await _fill(kv, 0, blocks, nbytes=1)
            seconds = time.perf_counter() - start
            [stats] = await kv.stats()
            return {"sent": blocks, "held": stats.blocks, "used_mb": stats.bytes_used / (1 << 20),
                    "capacity_mb": capacity_mb, "rss_mb": store.rss_mb, "seconds": seconds}
        finally:
            await kv.close()

    try:
        return asyncio.run(run())
    finally:
        store.stop()


async def _partial_put(target: str, mbytes: float, key: str, sent: list[int]) -> str:
    """A Put that sends ``mbytes`` of a 512 MiB block and then waits; returns how it ended ("" while it waits)."""
    stop = asyncio.Event()

    async def messages():
        yield kvstore_pb2.PutChunk(lease_id=key, lease_ttl_s=60.0,
                                   header=kvstore_pb2.BlockHeader(key=key, token_count=1, nbytes=MAX_BLOCK_BYTES,
                                                                  crc32=zlib.crc32(b"")))
        chunk = bytes(CHUNK_BYTES)
        for _ in range(int(mbytes * (1 << 20)) // CHUNK_BYTES):
            yield kvstore_pb2.PutChunk(data=chunk)
            sent[0] += CHUNK_BYTES
        await stop.wait()

    async with channel(target) as ch:
        stub = kvstore_pb2_grpc.KVStoreStub(ch)
        await stub.Acquire(kvstore_pb2.AcquireRequest(lease_id=key, lease_ttl_s=60.0, create=True))
        try:
            await stub.Put(messages())
        except grpc.aio.AioRpcError as err:
            return err.code().name
    return "stored"


def measure_partial_puts(python: str, mbytes: float, capacity_mb: float) -> dict:
    store = KVStoreProcess(python, capacity_mb)
    before = store.rss_mb

    async def run() -> dict:
        sent = [[0], [0]]
        tasks = [asyncio.ensure_future(_partial_put(store.target, mbytes, f"partial-{i}", sent[i])) for i in range(2)]
        deadline = time.monotonic() + 120
        while not all(t.done() or s[0] >= mbytes * (1 << 20) for t, s in zip(tasks, sent)):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # what is on the wire lands
        outcome = [t.result() if t.done() else "waiting" for t in tasks]
        rss = store.rss_mb
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return {"outcome": outcome, "sent_mb": [s[0] / (1 << 20) for s in sent], "rss_growth_mb": rss - before,
                "capacity_mb": capacity_mb}

    try:
        return asyncio.run(run())
    finally:
        store.stop()


def format_scale(rows: list[LevelRow], flood: dict, partial_puts: dict, block_bytes: int) -> str:
    lines = [f"one request's kvstore operations (a {block_bytes >> 10} KiB block), median, by blocks stored:",
             f"{'blocks stored':>13} {'Put ms':>8} {'Get ms':>8} {'Acquire+Release ms':>18} {'kvstore RSS MiB':>15}"]
    lines += [f"{r.blocks:>13,} {r.put_ms:>8.2f} {r.get_ms:>8.2f} {r.lease_ms:>18.2f} {r.rss_mb:>15.0f}" for r in rows]
    lines.append(f"flood: {flood['sent']:,} one-byte blocks into {flood['capacity_mb']:g} MiB: {flood['held']:,} held, "
                 f"{flood['used_mb']:.1f} MiB reported used, RSS {flood['rss_mb']:.0f} MiB ({flood['seconds']:.0f} s)")
    lines.append(f"unfinished Puts: two streams of {max(partial_puts['sent_mb']):.0f} MiB each into "
                 f"{partial_puts['capacity_mb']:g} MiB: {', '.join(partial_puts['outcome'])}; RSS grew "
                 f"{partial_puts['rss_growth_mb']:.0f} MiB")
    return "\n".join(lines)


def run_scale(a) -> int:
    python = a.kvstore_python or sys.executable
    levels = sorted(a.levels)
    block_bytes = int(a.block_kb * 1024)
    rows = measure_levels(python, levels, block_bytes, a.repeat_ops, a.scale_capacity_mb)
    flood = measure_flood(python, a.flood_blocks, a.flood_capacity_mb)
    partial_puts = measure_partial_puts(python, a.partial_mb, a.flood_capacity_mb)
    print(format_scale(rows, flood, partial_puts, block_bytes))
    return 0


def add_scale_args(p) -> None:
    g = p.add_argument_group("--scale: latency by stored blocks, floods of tiny blocks and of unfinished Puts")
    g.add_argument("--scale", action="store_true", help="instead: the kvstore as it fills (bench/kv/scale.py)")
    g.add_argument("--levels", type=lambda t: [int(x) for x in t.split(",")], default=[1000, 10_000, 100_000, 1_000_000])
    g.add_argument("--repeat-ops", type=int, default=20, help="timed requests per level")
    g.add_argument("--scale-capacity-mb", type=float, default=2048.0)
    g.add_argument("--flood-blocks", type=int, default=1_000_000)
    g.add_argument("--flood-capacity-mb", type=float, default=8.0)
    g.add_argument("--partial-mb", type=float, default=100.0, help="what each unfinished Put sends")
    g.add_argument("--kvstore-python", default=None,
                   help="the interpreter that runs the kvstore (another checkout's .venv/bin/python to compare)")
