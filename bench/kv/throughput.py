"""``pdserve bench kv``: kvstore Put and Get throughput, secured and not, against a bare gRPC stream of the same bytes
and memcpy.

Four servers' worth of work in one run, side by side, so that the ratios hold on a busy machine:

- the kvstore as ``pdserve up`` runs it (``python -m kvstore``, its own process, with an identity): mutual TLS, every
  call authorized by role, every block's MAC made by the writer and checked by the store on Put and Get and by the
  reader, through :class:`kvstore.client.KVStoreClient` calling as prefill;
- the same kvstore run with ``--insecure-internal``: plaintext, no MACs (what the security costs is the ratio);
- a bare gRPC sink in its own process, on the same server scaffolding (options, message limits, interceptor), in
  plaintext: its Put stream and Get stream carry the same data messages (one per chunk of each block, at most
  ``CHUNK_BYTES``) as raw bytes, with no protobuf, no checksum, nothing kept. It is the floor a Python gRPC hand-off
  cannot beat;
- memcpy: numpy copying the same bytes once, in this process.

Every measurement is repeated and the best run is kept (the least disturbed by other work on the machine); the rounds
alternate the servers so all see the same conditions, after a first round that warms them up (connections, the
stores filled to their budget, the sink's buffers made). Each round's blocks are stored under a lease the router
identity makes, released after the round's Gets, so the next round's Puts may evict them.

The command's flags and its other modes (``--scale``, ``--handoff``) are bench/kv/command.py's.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from functools import partial

import numpy as np

from pdserve.bench.kv.sink import SinkClient, message_sizes
from pdserve.common.certs import make_identities
from pdserve.common.identity import Identity
from pdserve.common.processes import stop_processes
from pdserve.common.readiness import grpc_serving, wait_for
from pdserve.kvstore.client import BlockData, KVStoreClient
from pdserve.kvstore.wire import CHUNK_BYTES
from pdserve.launcher.ports import free_port

# the real model's block: SmolLM2-135M (30 layers, 3 KV heads, head_dim 64), 16 tokens, K and V, float32
DEFAULT_BLOCK_BYTES = 30 * 2 * 16 * 3 * 64 * 4
STORES = ("secured", "insecure")


@dataclass
class KVBenchRow:
    op: str  # put or get
    streams: int
    mbytes: float  # moved by all streams together
    kvstore_mb_s: float  # the secured kvstore (as pdserve up runs it)
    insecure_mb_s: float  # the same with --insecure-internal
    bare_mb_s: float
    memcpy_mb_s: float
    kvstore_cpu_ms_per_mb: float  # client and server together, every round: robust where wall time is not
    insecure_cpu_ms_per_mb: float
    bare_cpu_ms_per_mb: float

    @property
    def vs_insecure(self) -> float:
        """Secured throughput over insecure: what mutual TLS, authorization and MACs cost."""
        return self.kvstore_mb_s / self.insecure_mb_s

    @property
    def vs_bare(self) -> float:
        return self.kvstore_mb_s / self.bare_mb_s

    @property
    def cpu_vs_bare(self) -> float:
        """Bare gRPC's CPU per byte over the kvstore's: the throughput ratio a CPU-bound, idle machine would show."""
        return self.bare_cpu_ms_per_mb / self.kvstore_cpu_ms_per_mb

    @property
    def cpu_vs_insecure(self) -> float:
        """The insecure kvstore's CPU per byte over the secured one's."""
        return self.insecure_cpu_ms_per_mb / self.kvstore_cpu_ms_per_mb

    @property
    def vs_memcpy(self) -> float:
        return self.kvstore_mb_s / self.memcpy_mb_s


class _Store:
    """A kvstore as the stack uses it: blocks put and got as prefill, leases made and released as the router (one
    plaintext client for both on an insecure kvstore)."""

    def __init__(self, target: str, identities: str | None) -> None:
        ident = (lambda role: Identity.load(os.path.join(identities, role))) if identities else (lambda role: None)
        self.kv = KVStoreClient([target], identity=ident("prefill"))
        self.router = KVStoreClient([target], identity=ident("router")) if identities else self.kv

    async def lease(self) -> str:
        lease_id = uuid.uuid4().hex
        await self.router.create_lease(lease_id, 300)
        return lease_id

    async def close(self) -> None:
        await self.kv.close()
        if self.router is not self.kv:
            await self.router.close()


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far, all its threads (Linux /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _timed(work, server_pid: int) -> tuple[float, float]:
    """Wall seconds of ``work``, and the CPU seconds this process and the server spent on it."""
    start, cpu = time.perf_counter(), time.process_time() + process_cpu_s(server_pid)
    await work
    return time.perf_counter() - start, time.process_time() + process_cpu_s(server_pid) - cpu


def memcpy_mb_s(nbytes: int, repeat: int) -> float:
    src = np.frombuffer(os.urandom(nbytes), dtype=np.uint8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(max(repeat, 3)):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e6


async def _measure_streams(stores: dict[str, _Store], bare: SinkClient, pids: dict[str, int], n: int,
                           per_stream_blocks: int, block_bytes: int, repeat: int) -> list[KVBenchRow]:
    """Put and Get rows for ``n`` concurrent streams, each moving ``per_stream_blocks`` blocks."""
    payload = os.urandom(block_bytes)
    bare_messages = [payload[:size] for size in message_sizes(block_bytes)] * per_stream_blocks
    keys: dict[str, list[list[str]]] = {}  # store -> stream -> keys (fresh each round: a repeated Put is a duplicate)
    leases: dict[str, str] = {}  # store -> this round's lease

    def kv_put(name: str):
        async def put() -> None:
            tag = uuid.uuid4().hex[:8]
            keys[name] = [[f"bench-{tag}-{s}-{i}" for i in range(per_stream_blocks)] for s in range(n)]
            await asyncio.gather(*(stores[name].kv.put([BlockData(k, 16, payload) for k in ks], leases[name], 300)
                                   for ks in keys[name]))
        return put

    def kv_get(name: str):
        async def get() -> None:
            await asyncio.gather(*(stores[name].kv.get(ks, lease_id=leases[name]) for ks in keys[name]))
        return get

    async def bare_put() -> None:
        await asyncio.gather(*(bare.put(bare_messages) for _ in range(n)))

    async def bare_get() -> None:
        await asyncio.gather(*(bare.get(block_bytes, per_stream_blocks) for _ in range(n)))

    runs = {**{f"{name}_put": (kv_put(name), pids[name]) for name in STORES}, "bare_put": (bare_put, pids["bare"]),
            **{f"{name}_get": (kv_get(name), pids[name]) for name in STORES}, "bare_get": (bare_get, pids["bare"])}
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu = dict.fromkeys(runs, 0.0)
    for r in range(repeat + 1):  # alternate, so that all see the same machine; round 0 warms up
        for name in STORES:
            leases[name] = await stores[name].lease()
        for name, (work, pid) in runs.items():
            w, c = await _timed(work(), pid)
            wall[name].append(w)
            cpu[name] += c if r else 0.0
        for name in STORES:  # this round's blocks may be evicted by the next
            await stores[name].router.release(leases[name])
    mb = n * per_stream_blocks * block_bytes / 1e6
    memcpy = memcpy_mb_s(n * per_stream_blocks * block_bytes, repeat)
    best = {name: mb / min(w[1:]) for name, w in wall.items()}
    ms_per_mb = {name: c / (mb * repeat) * 1e3 for name, c in cpu.items()}
    return [KVBenchRow(op, n, mb, best[f"secured_{op}"], best[f"insecure_{op}"], best[f"bare_{op}"], memcpy,
                       ms_per_mb[f"secured_{op}"], ms_per_mb[f"insecure_{op}"], ms_per_mb[f"bare_{op}"])
            for op in ("put", "get")]


async def _measure(targets: dict[str, str], identities: str, pids: dict[str, int], total_bytes: int,
                   block_bytes: int, streams: tuple[int, ...], repeat: int) -> list[KVBenchRow]:
    per_stream_blocks = max(1, total_bytes // block_bytes)
    stores = {"secured": _Store(targets["secured"], identities), "insecure": _Store(targets["insecure"], None)}
    bare = SinkClient(targets["bare"])
    rows = []
    try:
        for store in stores.values():
            await store.router.release("warm-up")  # connected before the clock starts
        for n in streams:
            rows += await _measure_streams(stores, bare, pids, n, per_stream_blocks, block_bytes, repeat)
    finally:
        for store in stores.values():
            await store.close()
        await bare.channel.close()
    return sorted(rows, key=lambda row: (row.op != "put", row.streams))


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def run_kv_bench(total_mb: float, block_bytes: int, streams: tuple[int, ...], repeat: int) -> list[KVBenchRow]:
    """Start the two kvstores and a bare sink as processes, measure, stop them."""
    total_bytes = int(total_mb * (1 << 20))
    # Stores at their budget, as in service: each round's Puts evict the round before (never the blocks of their own
    # round, which its Gets read), and the freed memory is reused.
    capacity_mb = 1.5 * max(streams) * max(total_bytes, block_bytes) / (1 << 20) + 16
    ports = {name: free_port() for name in (*STORES, "bare")}
    with tempfile.TemporaryDirectory(prefix="pdserve-bench-kv-") as identities:
        dirs = make_identities(identities, ("kvstore", "prefill", "router", "admin"))
        kvstore = ["-m", "pdserve.kvstore", "--capacity-mb", f"{capacity_mb:.0f}", "--log-level", "WARNING"]
        procs = {"secured": _start(kvstore + ["--port", str(ports["secured"]), "--identity", str(dirs["kvstore"])]),
                 "insecure": _start(kvstore + ["--port", str(ports["insecure"]), "--insecure-internal"]),
                 "bare": _start(["-m", "pdserve.bench.kv.sink", "--sink-port", str(ports["bare"])])}
        targets = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
        admin = Identity.load(dirs["admin"]).channel_credentials
        try:
            for name, proc in procs.items():
                wait_for(partial(grpc_serving, targets[name], admin if name == "secured" else None), 60,
                         f"bench kv: {name} SERVING", proc, lambda p=proc: p.stderr.read().decode()[-2000:])
            pids = {name: proc.pid for name, proc in procs.items()}
            return asyncio.run(_measure(targets, identities, pids, total_bytes, block_bytes, streams, repeat))
        finally:
            stop_processes(procs.values())


def format_kv_table(rows: list[KVBenchRow], block_bytes: int) -> str:
    lines = [f"kvstore hand-off: blocks of {block_bytes / 1024:.0f} KiB, data messages of at most "
             f"{CHUNK_BYTES >> 10} KiB; kv: secured (mutual TLS, authorization, MACs), insecure: --insecure-internal; "
             "MB/s: best round; CPU: client + server, ms per MB, all rounds",
             f"{'op':<4} {'streams':>7} {'MB':>7} {'kv MB/s':>8} {'insecure MB/s':>13} {'bare MB/s':>9} "
             f"{'memcpy MB/s':>11} {'kv/insecure':>11} {'kv/bare':>7} {'kv/memcpy':>9} {'kv CPU':>6} "
             f"{'insecure CPU':>12} {'bare CPU':>8} {'CPU insecure/kv':>15}"]
    for r in rows:
        lines.append(f"{r.op:<4} {r.streams:>7} {r.mbytes:>7.1f} {r.kvstore_mb_s:>8.0f} {r.insecure_mb_s:>13.0f} "
                     f"{r.bare_mb_s:>9.0f} {r.memcpy_mb_s:>11.0f} {r.vs_insecure:>11.2f} {r.vs_bare:>7.2f} "
                     f"{r.vs_memcpy:>9.3f} {r.kvstore_cpu_ms_per_mb:>6.2f} {r.insecure_cpu_ms_per_mb:>12.2f} "
                     f"{r.bare_cpu_ms_per_mb:>8.2f} {r.cpu_vs_insecure:>15.2f}")
    return "\n".join(lines)


def rows_as_dicts(rows: list[KVBenchRow]) -> list[dict]:
    return [asdict(r) | {"vs_insecure": r.vs_insecure, "vs_bare": r.vs_bare, "vs_memcpy": r.vs_memcpy,
                         "cpu_vs_bare": r.cpu_vs_bare, "cpu_vs_insecure": r.cpu_vs_insecure} for r in rows]
