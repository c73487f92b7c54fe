"""The fault matrix: steady load on a running stack while one fault at a time hits it.

Every answer is compared token for token with a fault-free run of the same request (greedy and seeded sampling, so
the right answer is known), and once the load stops the stack is checked for what it still holds. Per fault:

- ``sent``, ``correct`` (the whole answer, token for token), ``cancelled`` (by the client on purpose),
  ``failed_clean`` (a gRPC status, and what had streamed was a correct prefix), ``lost`` (no answer within the
  request's deadline), ``duplicated`` (more tokens than the answer has), ``wrong`` (anything else);
- ``resumed`` and ``kv_recomputed``: how often the fault's handling ran (streams resumed on another decode worker,
  prompts a decode worker recomputed because their KV could not be fetched);
- ``leaked_leases`` (kvstore leases), ``leaked_blocks`` (KV blocks decode workers hold) and ``leaked_inflight``
  (router requests in flight) once the stack is idle again, waited for up to the lease TTL.

``pdserve bench chaos`` starts a stack and prints the table; tests/stack/faults/test_fault_matrix.py runs it small;
bench/faults/chaos_load.py sends the load.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from pathlib import Path

from pdserve.bench.faults.chaos_load import COLUMNS, Row, Workload, fault_free, make_workload, steady_load, storm
from pdserve.bench.faults.chaos_up import attach, kill_under_up, restarts, supervising
from pdserve.common.readiness import wait_for
from pdserve.common.scrape import total
from pdserve.kvstore.contract import DEFAULT_LEASE_TTL_S
from pdserve.launcher.stack import Stack, StackSpec
from pdserve.launcher.state import AttachedStack
from pdserve.v1 import common_pb2, decode_pb2_grpc

LEASE_TTL_S = 5.0  # the stack's lease TTL: an orphaned lease is gone after this


def rss_mb(pid: int) -> float:
    """Resident memory of a process (Linux /proc), in MiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


# --- what the stack still holds -------------------------------------------------------------------------------------
def _gauge(stack: Stack, p, name: str, **labels: str) -> float:
    """The sum of a metric's samples with these labels on one process's /metrics page; 0 if the process is down."""
    try:
        return total(stack.scrape(p), name, **labels)
    except OSError:
        return 0.0


# how often a fault's handling ran, by the table's column: the module whose processes count it, in which counter
HANDLED = {"resumed": ("router", "pdserve_router_retries_total", {"phase": "resume"}),
           "kv_recomputed": ("decode_server", "pdserve_decode_kv_load_failures_total", {"policy": "recompute"})}


def _handled(stack: Stack) -> tuple[float, ...]:
    """The counts of :data:`HANDLED` so far (streams resumed by the router, prompts recomputed by decode workers)."""
    return tuple(sum(_gauge(stack, p, metric, **labels) for p in stack.processes if p.module == module)
                 for module, metric, labels in HANDLED.values())


def _decode_held(stack: Stack, p) -> int:
    with stack.channel(p, "admin") as ch:
        load = decode_pb2_grpc.DecodeStub(ch).GetLoad(common_pb2.LoadRequest(), timeout=5)
    return load.kv_blocks_used + load.running + load.waiting


async def _leases(stack: Stack) -> int:
    kv = stack.kv_client("admin")
    try:
        return sum(s.leases for s in await kv.stats())
    finally:
        await kv.close()


def held(stack: Stack) -> tuple[int, int, int]:
    """(kvstore leases, decode blocks + sequences, router requests in flight) right now."""
    return (asyncio.run(_leases(stack)), sum(_decode_held(stack, p) for p in stack.decodes),
            int(_gauge(stack, stack.router, "pdserve_num_requests_inflight")))


def idle_bound_s(stack) -> float:
    """How long leftovers may take to go: an orphaned lease lives its TTL (the matrix stack's, or pdserve up's
    default)."""
    return (DEFAULT_LEASE_TTL_S if isinstance(stack, AttachedStack) else LEASE_TTL_S) + 10


def wait_idle(stack: Stack, bound_s: float) -> tuple[int, int, int]:
    """What the stack holds once nothing is left, or after ``bound_s``."""
    deadline = time.monotonic() + bound_s
    while True:
        now = held(stack)
        if not any(now) or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


# --- the faults -----------------------------------------------------------------------------------------------------
def _busy_decode(stack: Stack):
    return _busy_decode_of(stack, stack.decodes)


def _busy_decode_of(stack, decodes: list):
    return max(decodes, key=lambda p: _decode_held(stack, p))


def kill_and_restart(pick: Callable[[Stack], object], down_s: float = 1.0) -> Fault:
    def fault(stack: Stack, supervised=None) -> None:
        p = pick(stack)
        stack.kill(p)
        time.sleep(down_s)
        stack.restart(p)
    return fault


# a fresh worker's first work shows in these (its counters start at zero)
TOOK_WORK = {"prefill_server": "pdserve_prefill_prompt_tokens_total", "decode_server": "pdserve_decode_generation_tokens_total"}


def rolling_restart(stack: Stack, supervised=None) -> None:
    """SIGTERM (drain) and restart every worker, one at a time, as a rolling update does: the next one goes only once
    the router sends work to the one before (SERVING to a health probe is not yet the router's view of it)."""
    for p in stack.prefills + stack.decodes:
        stack.restart(p, signal.SIGTERM)
        wait_for(lambda p=p: _gauge(stack, p, TOOK_WORK[p.module]) > 0, 120, f"{p.name} taking work again")


Fault = Callable[..., None]  # fault(stack, supervised): supervised is the state-file view of a supervised stack
FAULTS: dict[str, Fault | None] = {
    "none": None,
    "decode_kill": kill_and_restart(_busy_decode),
    "prefill_kill": kill_and_restart(lambda s: s.prefills[0]),
    "kvstore_kill": kill_and_restart(lambda s: s.kvstores[-1]),
    "router_kill": kill_and_restart(lambda s: s.router),
    "rolling_restart": rolling_restart,
    "cancel_storm": None,  # no process fault: a third of the requests cancelled at random moments
    # kill -9 under pdserve up: the supervisor brings the process back (bench/faults/chaos_up.py)
    "up_kill_kvstore": kill_under_up("kvstore"),
    "up_kill_prefill": kill_under_up("prefill_server"),
    "up_kill_decode": kill_under_up("decode_server", _busy_decode_of),
    "up_kill_router": kill_under_up("router"),
    "up_kill_openai": kill_under_up("openai_server"),
}
SUPERVISED = {name for name in FAULTS if name.startswith("up_")}
HARNESS = {"decode_kill", "prefill_kill", "kvstore_kill", "router_kill", "rolling_restart"}  # need a stack of ours


def matrix_spec(model: str | None, time_scale: float = 2.0) -> StackSpec:
    """Two of each worker and two kvstore shards, so every fault leaves a survivor; decode paced so that streams are
    still running when a fault hits."""
    return StackSpec(model=model, n_prefill=2, n_decode=2, n_kvstore=2, metrics=True, http_port=0,
                     extra={"decode": ["--pace", "realtime", "--time-scale", str(time_scale)],
                            "router": ["--lease-ttl-s", str(LEASE_TTL_S)]})


async def _run_one(stack: Stack, name: str, workload: Workload, concurrency: int, before_s: float,
                   after_s: float, supervised: AttachedStack | None) -> Row:
    row = Row(name)
    handled_before = _handled(stack)
    restarts_before = restarts(supervised)
    stop = asyncio.Event()
    load = asyncio.create_task(steady_load(stack.router_target, workload, row, stop, concurrency,
                                           cancel_fraction=1 / 3 if name == "cancel_storm" else 0.0))
    await asyncio.sleep(before_s)
    fault = FAULTS[name]
    if fault is not None:
        await asyncio.to_thread(fault, stack, supervised)
    await asyncio.sleep(after_s)
    stop.set()
    await load
    resumed, recomputed = (max(0, int(after - before)) for after, before in zip(_handled(stack), handled_before))
    row.resumed, row.kv_recomputed = resumed, recomputed
    row.restarted = restarts(supervised) - restarts_before
    return row


def run_matrix(stack: Stack, workload: Workload, faults: list[str], concurrency: int, before_s: float,
               after_s: float, progress: Callable[[Row], None] = lambda row: None) -> list[Row]:
    """Each fault in turn under steady load on ``stack`` (fault-free answers already in ``workload.expected``)."""
    check_faults(stack, faults)
    rows = []
    for name in faults:
        with supervising(stack) if name in SUPERVISED else contextlib.nullcontext() as supervised:
            row = asyncio.run(_run_one(stack, name, workload, concurrency, before_s, after_s, supervised))
        row.leaked = wait_idle(stack, idle_bound_s(stack))
        rows.append(row)
        progress(row)
    return rows


def check_faults(stack, faults: list[str]) -> None:
    for name in faults:
        if name not in FAULTS:
            raise ValueError(f"fault: {name!r} is not one of {', '.join(FAULTS)}")
        if name in HARNESS and isinstance(stack, AttachedStack):
            raise ValueError(f"fault: {name} kills and restarts processes itself; an attached pdserve up takes "
                             f"{', '.join(sorted(SUPERVISED))}, none and cancel_storm")
        if name == "up_kill_openai" and stack.edge is None:
            raise ValueError("fault: up_kill_openai needs the stack's HTTP edge (pdserve up --http-port)")


def format_table(rows: list[Row]) -> str:
    lines = ["| fault | " + " | ".join(COLUMNS) + " | clean failures |",
             "|---|" + "---|" * (len(COLUMNS) + 1)]
    for r in rows:
        codes = ", ".join(f"{c} {n}" for c, n in sorted(r.codes.items())) or "-"
        lines.append(f"| {r.fault} | " + " | ".join(str(r.column(c)) for c in COLUMNS) + f" | {codes} |")
    return "\n".join(lines)


def storm_report(stack: Stack, workload: Workload, n: int, concurrency: int) -> tuple[Row, float]:
    """A cancellation storm of ``n`` requests (a third cancelled at random moments) after a warm-up of n/10; returns
    its row, leaks filled in, and the largest growth of any process's resident memory across it, in MiB."""
    asyncio.run(storm(stack.router_target, workload, max(1, n // 10), concurrency, 1 / 3, seed=1))
    wait_idle(stack, idle_bound_s(stack))
    before = {p.name: rss_mb(p.pid) for p in stack.processes}
    row = asyncio.run(storm(stack.router_target, workload, n, concurrency, 1 / 3, seed=2))
    row.leaked = wait_idle(stack, idle_bound_s(stack))
    return row, max(rss_mb(p.pid) - before[p.name] for p in stack.processes)


def _vocab_size(target: str) -> int:
    from pdserve.client.client import PdserveClient

    with PdserveClient(target) as client:
        return client.list_models().models[0].vocab_size


def run_chaos(model: str | None, faults: list[str] | None, concurrency: int, prompts: int, max_tokens: int,
              before_s: float, after_s: float, time_scale: float, storm_requests: int = 0,
              attach_to: Path | None = None) -> int:
    """``pdserve bench chaos``: start the matrix stack (or attach to a running ``pdserve up``), take the fault-free
    answers, run each fault, print the table (and, with ``storm_requests``, a cancellation storm of that many
    requests). Exit status 1 when anything was lost, duplicated, wrong or leaked."""
    started = time.monotonic()
    # a slow, busy machine loads models slowly
    stack = attach(attach_to) if attach_to else Stack(matrix_spec(model, time_scale)).start(timeout_s=600)
    try:
        if faults is None:
            faults = default_faults(stack)
        check_faults(stack, faults)
        workload = make_workload(_vocab_size(stack.router_target), prompts, max_tokens)
        asyncio.run(fault_free(stack.router_target, workload))
        print(f"fault-free answers for {prompts} prompts taken; {concurrency} clients, fault after {before_s:g}s, "
              f"load for {after_s:g}s more", flush=True)
        rows = run_matrix(stack, workload, faults, concurrency, before_s, after_s,
                          progress=lambda r: print(f"  {r.fault}: {r.sent} sent, {r.answers['correct']} correct", flush=True))
        if storm_requests:
            row, growth = storm_report(stack, workload, storm_requests, concurrency)
            row.fault = f"cancel_storm ({storm_requests} requests)"
            rows.append(row)
            print(f"  {row.fault}: largest resident memory growth of any process {growth:.1f} MiB", flush=True)
    finally:
        if isinstance(stack, Stack):
            stack.stop()
    print(format_table(rows))
    print(f"{time.monotonic() - started:.0f} s in all")
    return 0 if all(r.ok for r in rows) else 1


def default_faults(stack) -> list[str]:
    """Every fault the stack can take: an attached one only those a supervisor repairs."""
    names = [n for n in FAULTS if not (isinstance(stack, AttachedStack) and n in HARNESS)]
    return [n for n in names if n != "up_kill_openai" or stack.edge is not None]


def add_args(p) -> None:
    p.add_argument("--model", default=None)
    p.add_argument("--faults", default=None,
                   help=f"comma separated, of {', '.join(FAULTS)} (default: all the stack can take)")
    p.add_argument("--attach", nargs="?", const="", default=None, metavar="STATE_FILE",
                   help="drive the running pdserve up (started with --metrics) instead of starting a stack: the one "
                        "on --port, or the one whose state file is given")
    p.add_argument("--port", type=int, default=50050, help="with --attach: the router port of that pdserve up")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--prompts", type=int, default=32, help="distinct requests (each answered once fault-free)")
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--before-s", type=float, default=3.0, help="load before the fault")
    p.add_argument("--after-s", type=float, default=8.0, help="load after the fault")
    p.add_argument("--time-scale", type=float, default=2.0, help="decode pacing (modeled step x this)")
    p.add_argument("--storm", type=int, default=0,
                   help="then a cancellation storm of this many requests, a third cancelled at random moments")


def main(a) -> int:
    from pdserve.launcher.state import default_state_path

    faults = None if a.faults is None else [f for f in a.faults.split(",") if f]
    attach_to = None if a.attach is None else Path(a.attach) if a.attach else default_state_path(a.port)
    return run_chaos(a.model, faults, a.concurrency, a.prompts, a.max_tokens, a.before_s, a.after_s,
                     a.time_scale, a.storm, attach_to)
