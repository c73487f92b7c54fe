"""``pdserve plan``: which deployment serves a workload within its SLOs at the lowest cost, by simulation.

For each candidate (hardware, GPUs and TP/EP per instance, DP attention on or off, colocated or x prefill + y decode
instances, up to a node limit) the planner finds, by bisection over the request rate, the highest rate at which the
simulated cluster still holds both SLOs (DistServe's question: at least 90% of the requests within both), and reports
the goodput measured there (workload/goodput.py: requests per second completed within the SLOs, the definition
``bench serve`` and ``simulate`` use) per GPU it takes. The search starts from a roofline estimate of the candidate's
capacity (prefill seconds per prompt, decode batch within the TPOT SLO), so a few simulations suffice. The candidates
themselves come from sim/candidates.py.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from pdserve.common.scheduling import modeled_scheduling
from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.perfmodel.deployment import Deployment
from pdserve.sim.cluster import Cluster, ClusterSpec, Pool, SimRequest
from pdserve.sim.report import instance_rows, summary
from pdserve.workload.arrivals import arrival_stream
from pdserve.workload.goodput import HOLD_ATTAINMENT

ATTAINMENT = HOLD_ATTAINMENT  # the share of requests that must meet both SLOs (the SLOs are 90th percentiles)


@dataclass(frozen=True)
class SLO:
    ttft_p90_s: float
    tpot_p90_s: float

    def check(self, s: dict) -> tuple[bool, float, float, float]:
        """(met, attainment, p90 TTFT / limit, p90 TPOT / limit) of a summary: met when at least 90% of the
        requests meet both SLOs."""
        ttft = s["p90_ttft_ms"] / 1000 / self.ttft_p90_s
        tpot = s["p90_tpot_ms"] / 1000 / self.tpot_p90_s
        attained = s["slo_attainment"] or 0.0
        return attained >= ATTAINMENT - 1e-9, attained, ttft, tpot


@dataclass(frozen=True)
class Candidate:
    deployment: Deployment
    n_prefill: int  # 0: colocated
    n_decode: int  # colocated instances when n_prefill is 0

    @property
    def colocated(self) -> bool:
        return self.n_prefill == 0

    @property
    def gpus(self) -> int:
        return self.deployment.gpus * (self.n_prefill + self.n_decode)

    def label(self) -> str:
        shape = self.deployment.shape_label()
        mode = f"{self.n_decode} colocated" if self.colocated else f"{self.n_prefill}P{self.n_decode}D"
        return f"{mode} of {shape}"

    def spec(self, overrides: SchedulerOverrides) -> ClusterSpec:
        if self.colocated:
            pools = [Pool(SchedulerRole.BOTH, self.deployment, self.n_decode, overrides)]
        else:
            pools = [Pool(SchedulerRole.PREFILL, self.deployment, self.n_prefill, overrides),
                     Pool(SchedulerRole.DECODE, self.deployment, self.n_decode, overrides)]
        return ClusterSpec(pools)


@dataclass
class Probe:
    rate: float
    met: bool
    attainment: float
    ttft_ratio: float
    tpot_ratio: float
    summary: dict

    @property
    def goodput(self) -> float:
        return self.summary.get("request_goodput") or 0.0


@dataclass
class Outcome:
    candidate: Candidate
    probes: list[Probe] = field(default_factory=list)

    @property
    def best(self) -> Probe | None:
        passing = [p for p in self.probes if p.met]
        return max(passing, key=lambda p: p.rate) if passing else None

    @property
    def goodput(self) -> float:
        """The goodput (workload/goodput.py) at the highest rate held: requests per second within both SLOs."""
        b = self.best
        return b.goodput if b else 0.0

    @property
    def goodput_per_gpu(self) -> float:
        return self.goodput / self.candidate.gpus

    @property
    def binding(self) -> str:
        """The SLO that fails first above the highest passing rate (or is closest to its limit)."""
        above = [p for p in self.probes if not p.met and (self.best is None or p.rate > self.best.rate)]
        p = min(above, key=lambda q: q.rate) if above else self.best
        if p is None:
            return "-"
        return "TTFT" if p.ttft_ratio >= p.tpot_ratio else "TPOT"


def capacity_estimate(c: Candidate, mean_in: float, mean_out: float, slo: SLO,
                      overrides: SchedulerOverrides) -> float:
    """Roofline requests per second of a candidate: prefill instances x attention ranks / (prefill of a mean prompt
    on one rank), decode
    instances x the largest batch within the TPOT SLO / (its step x mean output); colocated shares the time."""
    t = c.deployment.timing()
    scheduling = modeled_scheduling(c.deployment, SchedulerRole.BOTH if c.colocated else SchedulerRole.DECODE,
                                    overrides)
    max_num_seqs = scheduling.config.max_num_seqs * scheduling.ranks
    prefill_rate = scheduling.ranks / t.prefill_time([max(1, int(mean_in))]).seconds  # DP ranks prefill their own
    ctx = int(mean_in + mean_out / 2)
    batch = 1
    while batch * 2 <= max_num_seqs and t.decode_step_time([ctx] * (batch * 2)).seconds <= slo.tpot_p90_s:
        batch *= 2
    decode_rate = batch / (t.decode_step_time([ctx] * batch).seconds * max(1.0, mean_out))
    if c.colocated:
        return c.n_decode / (1.0 / prefill_rate + 1.0 / decode_rate)
    return min(c.n_prefill * prefill_rate, c.n_decode * decode_rate)


STEADY_E2E = 4.0  # a probe sends for at least this many mean request lifetimes, so queues reach their steady state
MAX_PROBE_REQUESTS = 20_000
MORE_HALVINGS = 6  # after the probes, down to 1/64 of the last failing rate before a layout is said to hold none
REFINE = 2  # bisections after a pass found by halving, which is otherwise up to 2x below what the layout holds


class Planner:
    def __init__(self, requests: list[SimRequest], slo: SLO, overrides: SchedulerOverrides | None = None,
                 probes: int = 6, burstiness: float = 1.0, seed: int = 0) -> None:
        """A probe at rate r sends the workload's requests (cycled when more are needed) at Poisson (gamma) times:
        at least the workload, and at least STEADY_E2E mean request lifetimes' worth of arrivals, because a short
        burst fits in one decode batch and would pass SLOs no steady stream at that rate could."""
        self.requests = requests
        self.slo = slo
        self.overrides = overrides or SchedulerOverrides()
        self.probes = probes
        self.burstiness = burstiness
        self.seed = seed
        self.mean_in = sum(len(r.prompt_ids) for r in requests) / len(requests)
        self.mean_out = sum(r.output_len for r in requests) / len(requests)
        self.lifetime_s = self.mean_out * slo.tpot_p90_s + slo.ttft_p90_s / 4
        self.simulations = 0

    def probe(self, c: Candidate, rate: float) -> Probe:
        n = min(MAX_PROBE_REQUESTS, max(len(self.requests), int(rate * STEADY_E2E * self.lifetime_s)))
        requests = [self.requests[i % len(self.requests)] for i in range(n)]
        offsets = [t / rate for t in unit_rate_offsets(n, self.burstiness, self.seed)]
        result = Cluster(c.spec(self.overrides)).run(requests, offsets)
        self.simulations += 1
        s = summary(result, None, slo={"ttft": self.slo.ttft_p90_s, "tpot": self.slo.tpot_p90_s}, rate=rate)
        s["instances"] = instance_rows(result)
        return Probe(rate, *self.slo.check(s), s)

    def evaluate(self, c: Candidate) -> Outcome:
        """Bracket the highest passing rate (from 1.5 x the roofline estimate, doubling while it still passes, at
        most twice), then bisect it with the probes left. If none of those passed, keep halving (at most
        MORE_HALVINGS times): an estimate far above what the layout holds (prompts stalling a colocated instance's
        decodes, which the roofline does not see) would otherwise report a layout that holds a lower rate as
        holding none."""
        out = Outcome(c)
        lo, hi = 0.0, 1.5 * capacity_estimate(c, self.mean_in, self.mean_out, self.slo, self.overrides)
        for _ in range(3):
            out.probes.append(self.probe(c, hi))
            if not out.probes[-1].met:
                break
            lo, hi = hi, 2 * hi
        else:
            return out  # still meets the SLOs at 6x the estimate: reported there
        while len(out.probes) < self.probes:
            mid = (lo + hi) / 2
            p = self.probe(c, mid)
            out.probes.append(p)
            lo, hi = (mid, hi) if p.met else (lo, mid)
        halved = False
        for _ in range(MORE_HALVINGS):
            if lo > 0:
                break
            hi, halved = hi / 2, True
            out.probes.append(self.probe(c, hi))
            if out.probes[-1].met:
                lo, hi = hi, 2 * hi
        for _ in range(REFINE if halved and lo > 0 else 0):  # between the pass the halving found and the fail above
            mid = (lo + hi) / 2
            p = self.probe(c, mid)
            out.probes.append(p)
            lo, hi = (mid, hi) if p.met else (lo, mid)
        return out


def pareto(outcomes: list[Outcome]) -> list[tuple[Outcome, Probe]]:
    """Passing operating points not beaten on both goodput per GPU (higher) and mean e2e latency (lower)."""
    points = [(o, p, p.goodput / o.candidate.gpus, p.summary["mean_e2el_ms"])
              for o in outcomes for p in o.probes if p.met]
    front = [(o, p) for o, p, g, lat in points
             if not any(g2 >= g and l2 <= lat and (g2 > g or l2 < lat) for _, _, g2, l2 in points)]
    return sorted(front, key=lambda op: -op[1].goodput / op[0].candidate.gpus)


def unit_rate_offsets(n: int, burstiness: float, seed: int) -> list[float]:
    return list(itertools.islice(arrival_stream(1.0, burstiness, seed), n))


def step_breakdown(d: Deployment, mean_in: float, batch: int, context: int) -> dict[str, dict[str, float]]:
    """Where a prefill of the mean prompt and a decode step at the operating batch spend their time (seconds)."""
    t = d.timing()
    return {"prefill": t.prefill_time([max(1, int(mean_in))]).as_dict(),
            "decode": t.decode_step_time([max(1, context)] * max(1, batch)).as_dict()}

