"""The simulator against the paced emulator (``pdserve up --model synthetic --pace realtime``) on one seeded
workload: both run 1 prefill + 1 decode instance of the default modeled deployment with its software's scheduling
profile, the same requests and the same concurrency cap; the emulator's figures are its modeled clock (what each
request's final chunk reports).

Compared in the modeled clock, the two agree whatever the machine's load when the emulator's schedule cannot depend
on when things happen in wall time: with one request in flight, each request's steps are its own. (With several in
flight, which requests share a step depends on wall-clock arrival: tests/unit/sim/test_sim_worker_agreement.py checks
that the scheduler and pricing the workers run give the simulator's steps, step by step, without wall time.) How far
the emulator's wall clock fell behind its pacing is measured separately: the workers' pacing lag counters."""

from __future__ import annotations

import itertools

from pdserve.bench.serve.command import run_grpc
from pdserve.common.scrape import total
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.launcher.stack import Stack, StackSpec
from pdserve.perfmodel.deployment import parse_deployment
from pdserve.sim.cluster import Cluster, ClusterSpec, Pool, SimRequest
from pdserve.sim.report import summary
from pdserve.workload.arrivals import arrival_stream
from pdserve.workload.datasets import random_requests
from pdserve.workload.record import LoadSpec, Sampling
from pdserve.workload.stats import summarize

COMPARED = (("mean TTFT", "mean_ttft_ms"), ("mean TPOT", "mean_tpot_ms"), ("request throughput", "request_throughput"),
            ("output throughput", "output_throughput"), ("mean KV hand-off", "mean_kv_transfer_ms"))


def workload(n: int, input_len: tuple[int, int], output_len: tuple[int, int], seed: int):
    return random_requests(n, 49152, input_len, output_len, seed=seed)


def simulated(requests, rate: float, max_concurrency: int | None, seed: int, deployment: str = "") -> dict:
    """Both sides model the software's per-request front end before the prefill worker's scheduler (the emulator's
    prefill workers pace it: worker/clock.py)."""
    offsets = list(itertools.islice(arrival_stream(rate, 1.0, seed), len(requests)))
    d = parse_deployment(deployment)
    spec = ClusterSpec([Pool(SchedulerRole.PREFILL, d, 1), Pool(SchedulerRole.DECODE, d, 1)])
    result = Cluster(spec).run([SimRequest(r.token_ids, r.output_len) for r in requests], offsets, max_concurrency)
    s = summary(result, max_concurrency, rate=rate, seed=seed)
    return s | {"mean_kv_transfer_ms": s["modeled_mean_kv_transfer_ms"]}


def pacing_lag(stack: Stack) -> dict[str, float]:
    """Per worker: steps paced, steps whose real work overran their budget, and the wall seconds they overran by."""
    out = {}
    for kind, workers in (("prefill", stack.prefills), ("decode", stack.decodes)):
        for i, w in enumerate(workers):
            page = stack.scrape(w)
            out[f"{kind}{i}_steps"] = total(page, "pdserve_step_modeled_seconds_count")
            out[f"{kind}{i}_lagged_steps"] = total(page, "pdserve_pacing_lagged_steps_total")
            out[f"{kind}{i}_lag_s"] = total(page, "pdserve_pacing_lag_seconds_total")
    return out


def emulated(requests, rate: float, max_concurrency: int | None, seed: int, time_scale: float,
             deployment: str = "") -> dict:
    """Modeled figures of the paced synthetic stack (the KV link where the simulator places the two instances: the
    workers' ``--kv-link auto``; the decode KV budget is the modeled capacity, as in the simulator), and its pacing
    lag."""
    spec = StackSpec(model="synthetic", pace="realtime", time_scale=time_scale, metrics=True, deployment=deployment,
                     extra={"decode": ["--kv-budget", "modeled"]})
    load = LoadSpec(request_rate=rate, max_concurrency=max_concurrency, seed=seed, progress=False,
                    sampling=Sampling(temperature=0.0, ignore_eos=True))
    with Stack(spec) as stack:
        result = run_grpc(stack.router_target, requests, load)
        lag = pacing_lag(stack)
    s = summarize(result)
    return {key: s[f"modeled_{key}"] for _, key in COMPARED} | {"failed": s["failed"], "completed": s["completed"],
                                                                "lag": lag}


def compare(sim: dict, emu: dict) -> list[tuple[str, float, float, float]]:
    """(figure, simulated, emulated, relative difference) for each compared figure."""
    return [(label, sim[key], emu[key], sim[key] / emu[key] - 1.0) for label, key in COMPARED]


def modeled_clock_run(deployment: str = "", n: int = 10) -> tuple[dict, dict]:
    """The load-independent comparison (tests/stack/sim/test_sim_agreement.py): ``n`` seeded requests of 200-800
    prompt and 16-32 output tokens, one in flight, through the simulator and the paced stack at time scale 1, both
    modeling ``deployment`` (``--deployment`` keys) for the prefill and the decode instance."""
    import math

    requests = workload(n, (200, 800), (16, 32), seed=7)
    return (simulated(requests, math.inf, 1, seed=7, deployment=deployment),
            emulated(requests, math.inf, 1, seed=7, time_scale=1.0, deployment=deployment))


def main() -> int:
    """``python -m pdserve.bench.runtime.agreement``: each figure side by side, and the emulator's pacing lag."""
    sim, emu = modeled_clock_run()
    for label, s, e, diff in compare(sim, emu):
        print(f"{label:<20} simulated {s:>10.4f}  emulated {e:>10.4f}  {100 * diff:+.3f}%")
    print("pacing lag: " + ", ".join(f"{k} {v:g}" for k, v in emu["lag"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
