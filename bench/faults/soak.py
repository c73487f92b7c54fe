"""``pdserve bench soak``: a long run of mixed load against ``pdserve up`` with faults at random, watching memory.

It starts ``pdserve up`` itself (the command users run, supervisor and all), attaches to it through its state file, and
for ``--duration-s``:

- sends the fault matrix's load (known answers, checked token for token; a tenth cancelled by the client at a random
  moment) over gRPC, and chat completions through the OpenAI edge;
- every ``--fault-every-s`` (on average, exponentially distributed) kills one process at random with SIGKILL, or
  sends a worker SIGTERM (it drains and exits; the supervisor starts it again either way);
- samples the resident memory of every process (by name: a restarted process continues its line) every
  ``--sample-s``.

At the end it stops the load, waits for the stack to be idle and for every process a fault hit to serve again, and
reports the answers (lost, duplicated, wrong), what is still held (leases, decode blocks, requests in flight), how
often streams were resumed and prompts recomputed (summed over restarts), each process's restarts and memory, and
plots memory over time with the faults marked (``--plot``). A fault never hits a process already hit that has not
been restarted yet (a worker still draining after SIGTERM): one fault, one restart.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from pdserve.bench.faults.chaos import HANDLED, format_table, held, rss_mb, wait_idle
from pdserve.bench.faults.chaos_load import Row, fault_free, make_workload, steady_load
from pdserve.bench.faults.chaos_up import RESTART_WAIT_S
from pdserve.common.scrape import total
from pdserve.kvstore.contract import DEFAULT_LEASE_TTL_S
from pdserve.launcher.state import AttachedStack

WORKERS = ("prefill_server", "decode_server")


@dataclass
class Soak:
    stack: AttachedStack
    started: float = field(default_factory=time.monotonic)
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # name -> [(t, RSS MiB)]
    faults: list[tuple[float, str]] = field(default_factory=list)  # (t, what)
    signalled: dict[int, str] = field(default_factory=dict)  # pid -> name of each process a fault hit
    http: dict[str, int] = field(default_factory=dict)  # HTTP status -> count
    vocab: int = 0
    handled: dict[str, float] = field(default_factory=lambda: dict.fromkeys(HANDLED, 0.0))
    seen: dict[tuple[str, int, str], float] = field(default_factory=dict)  # (process, pid, column) -> last value

    def now(self) -> float:
        return time.monotonic() - self.started

    def sample(self) -> None:
        self.stack.refresh()
        for p in self.stack.processes + [_up_process(self.stack)]:
            try:
                self.samples.setdefault(p.name, []).append((self.now(), rss_mb(p.pid)))
            except (OSError, StopIteration):  # between a kill and the restart
                pass
        self.count_handled()

    def count_handled(self) -> None:
        """Add what each counter of :data:`HANDLED` rose by since the last sample. A restarted process (a new pid)
        counts from 0 again, so the totals survive restarts; what a process counted after the last sample and before
        a kill is missed: they are lower bounds."""
        for column, (module, metric, labels) in HANDLED.items():
            for p in self.stack.processes:
                if p.module != module or p.state != "serving":
                    continue
                try:
                    value = total(self.stack.scrape(p), metric, **labels)
                except (OSError, ValueError):  # killed since the refresh
                    continue
                key = (p.name, p.pid, column)
                self.handled[column] += max(0.0, value - self.seen.get(key, 0.0))
                self.seen[key] = value


class _Up:
    name, module = "pdserve up", "supervisor"

    def __init__(self, pid: int) -> None:
        self.pid = pid


def _up_process(stack: AttachedStack) -> _Up:
    return _Up(stack.state["up_pid"])


async def _sampler(soak: Soak, stop: asyncio.Event, period_s: float) -> None:
    while not stop.is_set():
        await asyncio.to_thread(soak.sample)
        await asyncio.sleep(period_s)


async def _faults(soak: Soak, stop: asyncio.Event, mean_s: float, rng: random.Random) -> None:
    while True:
        try:
            await asyncio.wait_for(stop.wait(), rng.expovariate(1 / mean_s))
            return
        except TimeoutError:
            pass
        soak.stack.refresh()
        # not one already hit and still going (a worker draining after SIGTERM): one fault, one restart
        serving = [p for p in soak.stack.processes if p.state == "serving" and p.pid not in soak.signalled]
        if not serving:
            continue
        victim = rng.choice(serving)
        graceful = victim.module in WORKERS and rng.random() < 0.3
        try:
            os.kill(victim.pid, signal.SIGTERM if graceful else signal.SIGKILL)
        except ProcessLookupError:
            continue
        soak.signalled[victim.pid] = victim.name
        what = f"{'SIGTERM' if graceful else 'SIGKILL'} {victim.name}"
        soak.faults.append((soak.now(), what))
        print(f"  {soak.now():7.0f} s  {what}", flush=True)


async def _http_load(soak: Soak, stop: asyncio.Event, clients: int) -> None:
    url = f"{soak.stack.state['http_url']}/v1/chat/completions"
    async with httpx.AsyncClient(timeout=120) as client:
        async def user(i: int) -> None:
            while not stop.is_set():
                body = {"messages": [{"role": "user", "content": f"soak {i} {soak.now():.0f}"}], "max_tokens": 16,
                        "temperature": 0}
                try:
                    status = (await client.post(url, json=body)).status_code
                except httpx.HTTPError:
                    status = 0  # the edge was down
                soak.http[str(status)] = soak.http.get(str(status), 0) + 1
                if status != 200:
                    await asyncio.sleep(0.5)
        await asyncio.gather(*(user(i) for i in range(clients)))


async def _run_load(soak: Soak, a, row: Row) -> None:
    workload = make_workload(soak.vocab, a.prompts, a.max_tokens)
    await fault_free(soak.stack.router_target, workload)
    soak.sample()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(steady_load(soak.stack.router_target, workload, row, stop, a.concurrency,
                                             cancel_fraction=0.1, timeout_s=120)),
             asyncio.create_task(_http_load(soak, stop, a.http_clients)),
             asyncio.create_task(_sampler(soak, stop, a.sample_s)),
             asyncio.create_task(_faults(soak, stop, a.fault_every_s, random.Random(a.seed)))]
    await asyncio.sleep(a.duration_s)
    stop.set()
    await asyncio.gather(*tasks)


def plot_rss(soak: Soak, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 5.5))
    for name, points in sorted(soak.samples.items()):
        ax.plot([t / 60 for t, _ in points], [m for _, m in points], label=name, linewidth=1)
    for t, what in soak.faults:
        ax.axvline(t / 60, color="red" if "SIGKILL" in what else "orange", alpha=0.25, linewidth=0.8)
    ax.set_xlabel("minutes (red: kill -9 of a process, orange: SIGTERM of a worker; the supervisor restarts both)")
    ax.set_ylabel("resident memory (MiB)")
    ax.grid(alpha=0.3)
    ax.legend(ncol=4, fontsize=7, loc="upper left")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def memory_table(soak: Soak) -> str:
    soak.stack.refresh()
    restarts = {p.name: p.restarts for p in soak.stack.processes}
    lines = [f"{'process':<12} {'restarts':>8} {'RSS first':>9} {'RSS max':>8} {'RSS last':>8}  (MiB)"]
    for name, points in sorted(soak.samples.items()):
        rss = [m for _, m in points]
        lines.append(f"{name:<12} {restarts.get(name, 0):>8} {rss[0]:>9.0f} {max(rss):>8.0f} {rss[-1]:>8.0f}")
    return "\n".join(lines)


def _start_up(a, state: Path, log: Path) -> subprocess.Popen:
    args = [sys.executable, "-m", "pdserve.cli.main", "up", "--port", "0", "--state-file", str(state), "--metrics",
            "--metrics-base-port", "0", "--http-port", "0", "--prefill", "2", "--decode", "2", "--kvstore-shards", "2",
            "--pace", "realtime", "--time-scale", str(a.time_scale)] + (["--model", a.model] if a.model else []) + \
        (["--kv-capacity-mb", str(a.kv_capacity_mb)] if a.kv_capacity_mb else [])
    proc = subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while not (state.exists() and "try:" in log.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"pdserve up did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    return proc


def _not_back(soak: Soak) -> list[str]:
    """Wait until the supervisor has every process a fault hit serving again; what did not come back, and why."""
    missing = []
    for pid, name in soak.signalled.items():
        try:
            soak.stack.wait_restarted(name, pid, RESTART_WAIT_S)
        except TimeoutError as exc:
            missing.append(str(exc))
    soak.stack.refresh()
    return missing


def run_soak(a) -> int:
    work = Path(tempfile.mkdtemp(prefix="pdserve-soak-"))
    state, log = work / "up.json", work / "up.log"
    up = _start_up(a, state, log)
    row = Row("soak")
    try:
        soak = Soak(AttachedStack(state))
        from pdserve.client.client import PdserveClient

        with PdserveClient(soak.stack.router_target) as client:
            soak.vocab = client.list_models().models[0].vocab_size
        print(f"soak: {a.duration_s:g} s of load against pdserve up (log {log}), a fault every ~{a.fault_every_s:g} s",
              flush=True)
        asyncio.run(_run_load(soak, a, row))
        soak.stack.refresh()
        row.leaked = wait_idle(soak.stack, DEFAULT_LEASE_TTL_S + 30)
        not_back = _not_back(soak)
        row.restarted = sum(p.restarts for p in soak.stack.processes)
        soak.sample()
        row.resumed, row.kv_recomputed = (int(soak.handled[c]) for c in HANDLED)
        title = (f"pdserve up, {a.duration_s / 60:.0f} min of load ({row.sent} gRPC requests, "
                 f"{sum(soak.http.values())} HTTP), {len(soak.faults)} faults")
        plot_rss(soak, Path(a.plot), title)
        print(format_table([row]))
        print(f"HTTP answers by status: {soak.http}")
        print(memory_table(soak))
        print(f"still held at the end (leases, decode blocks + sequences, router requests): {held(soak.stack)}")
        print(f"plot: {a.plot}")
        if not_back:
            print(f"not serving again at the end: {'; '.join(not_back)}")
        if a.json:
            Path(a.json).write_text(json.dumps({"answers": dict(row.answers), "sent": row.sent, "leaked": row.leaked,
                                                "http": soak.http, "faults": soak.faults, "handled": soak.handled,
                                                "restarts": {p.name: p.restarts for p in soak.stack.processes},
                                                "not_back": not_back,
                                                "samples": soak.samples}, indent=1))
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(120)
        except subprocess.TimeoutExpired:
            up.kill()
    return 0 if row.ok and not not_back else 1


def add_args(p) -> None:
    p.add_argument("--model", default=None, help="GGUF (default: SmolLM2-135M-Instruct)")
    p.add_argument("--duration-s", type=float, default=1800.0)
    p.add_argument("--fault-every-s", type=float, default=45.0, help="mean time between faults")
    p.add_argument("--concurrency", type=int, default=8, help="gRPC clients (answers checked token for token)")
    p.add_argument("--http-clients", type=int, default=2, help="clients of the OpenAI edge")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--time-scale", type=float, default=2.0, help="the workers' pacing (modeled step x this)")
    p.add_argument("--sample-s", type=float, default=5.0, help="resident memory sampling period")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kv-capacity-mb", type=float, default=None,
                   help="each kvstore shard's budget (pdserve up's default otherwise); a small one shows the shards' "
                        "memory levelling off at it within the run")
    p.add_argument("--plot", default="docs/images/soak-rss.png")
    p.add_argument("--json", default=None)


def main(a) -> int:
    return run_soak(a)
