"""``pdserve plan --request-rate R``: the cheapest deployment that holds R within the SLOs.

Cheapest is fewest GPUs, then fewest nodes. Candidates are tried in that order at the rate itself (one simulation
each); the first cost tier with a candidate that holds the rate (at least 90% of requests within both SLOs,
workload/goodput.py) ends the search, the best of that tier winning. Within ``--max-nodes`` every candidate is
simulated. When none there holds the rate, the search goes on in larger clusters (up to :data:`BEYOND_FACTOR` times
the node limit, at most :data:`MAX_BEYOND_SIMULATIONS` simulations) to name the smallest that would; there a
candidate whose roofline capacity (planner.capacity_estimate) is under half the rate is reported as skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from pdserve.sim.candidates import candidates
from pdserve.sim.planner import Candidate, Planner, Probe, capacity_estimate

ROOFLINE_SLACK = 2.0  # a candidate whose roofline estimate is below rate / this is not simulated
BEYOND_FACTOR = 8
MAX_BEYOND_NODES = 64
MAX_BEYOND_SIMULATIONS = 24


def nodes(c: Candidate) -> int:
    return math.ceil(c.gpus / c.deployment.gpus_per_node)


def cost(c: Candidate) -> tuple[int, int]:
    return c.gpus, nodes(c)


@dataclass
class Trial:
    candidate: Candidate
    estimate: float  # roofline req/s
    probe: Probe | None = None  # None: skipped by its roofline estimate

    @property
    def holds(self) -> bool:
        return self.probe is not None and self.probe.met

    def row(self) -> dict:
        c, p = self.candidate, self.probe
        s = p.summary if p else {}
        return {"candidate": c.label(), "hardware": c.deployment.hardware, "gpus": c.gpus, "nodes": nodes(c),
                "colocated": c.colocated, "roofline_rate": self.estimate, "simulated": p is not None,
                "holds": self.holds, "slo_attainment": p.attainment if p else None,
                "goodput": p.goodput if p else None, "p90_ttft_ms": s.get("p90_ttft_ms"),
                "p90_tpot_ms": s.get("p90_tpot_ms"), "mean_ttft_ms": s.get("mean_ttft_ms"),
                "mean_tpot_ms": s.get("mean_tpot_ms"), "request_throughput": s.get("request_throughput")}


@dataclass
class TargetSearch:
    rate: float
    max_nodes: int
    trials: list[Trial] = field(default_factory=list)
    winner: Trial | None = None
    beyond: list[Trial] = field(default_factory=list)
    smallest_beyond: Trial | None = None
    beyond_nodes: int = 0


def _best_of_tier(tier: list[Trial]) -> Trial:
    """Among the candidates of one cost that hold the rate: the most requests within the SLOs, then the most headroom
    on the binding SLO."""
    return max(tier, key=lambda t: (t.probe.attainment, -max(t.probe.ttft_ratio, t.probe.tpot_ratio)))


def _search(planner: Planner, pool: list[Candidate], rate: float, budget: int | None,
            tick: Callable[[], None]) -> tuple[list[Trial], Trial | None]:
    trials: list[Trial] = []
    estimates = {id(c): capacity_estimate(c, planner.mean_in, planner.mean_out, planner.slo, planner.overrides)
                 for c in pool}
    ordered = sorted(pool, key=lambda c: (cost(c), -estimates[id(c)]))
    tier_cost, passing, simulated = None, [], 0
    for c in ordered:
        if passing and cost(c) != tier_cost:
            break
        t = Trial(c, estimates[id(c)])
        trials.append(t)
        if budget is None or (t.estimate * ROOFLINE_SLACK >= rate and simulated < budget):
            t.probe = planner.probe(c, rate)
            simulated += 1
            if t.holds:
                tier_cost = cost(c)
                passing.append(t)
        tick()
        if budget is not None and simulated >= budget and not passing:
            break
    return trials, _best_of_tier(passing) if passing else None


def cheapest(planner: Planner, hardware: list[str], max_nodes: int, rate: float, pool_args: dict,
             progress: Callable[[int, str], Callable[[], None]]) -> TargetSearch:
    """``progress(total, what)`` returns the callable a finished candidate calls (a progress bar's update)."""
    out = TargetSearch(rate, max_nodes)
    pool = candidates(hardware, max_nodes, **pool_args)
    out.trials, out.winner = _search(planner, pool, rate, None, progress(len(pool), "candidates"))
    if out.winner is not None:
        return out
    out.beyond_nodes = min(MAX_BEYOND_NODES, max_nodes * BEYOND_FACTOR)
    if out.beyond_nodes <= max_nodes:
        return out
    bigger = [c for c in candidates(hardware, out.beyond_nodes, **pool_args) if nodes(c) > max_nodes]
    out.beyond, out.smallest_beyond = _search(planner, bigger, rate, MAX_BEYOND_SIMULATIONS,
                                              progress(min(len(bigger), MAX_BEYOND_SIMULATIONS), "larger clusters"))
    return out


def report(search: TargetSearch) -> list[str]:
    lines = [f"{'deployment':<40} {'GPUs':>4} {'nodes':>5} {'roofline':>8} {'within':>7} {'goodput':>8} "
             f"{'p90 TTFT':>9} {'p90 TPOT':>9}  holds",
             f"{'':<40} {'':>4} {'':>5} {'req/s':>8} {'SLOs %':>7} {'req/s':>8} {'ms':>9} {'ms':>9}"]
    for t in search.trials + search.beyond:
        r = t.row()
        if not r["simulated"]:
            lines.append(f"{r['candidate']:<40} {r['gpus']:>4} {r['nodes']:>5} {r['roofline_rate']:>8.2f} "
                         f"{'':>7} {'':>8} {'':>9} {'':>9}  skipped: roofline under rate / {ROOFLINE_SLACK:g}")
            continue
        lines.append(f"{r['candidate']:<40} {r['gpus']:>4} {r['nodes']:>5} {r['roofline_rate']:>8.2f} "
                     f"{100 * r['slo_attainment']:>7.1f} {r['goodput']:>8.2f} {r['p90_ttft_ms']:>9.0f} "
                     f"{r['p90_tpot_ms']:>9.1f}  {'yes' if r['holds'] else 'no'}")
    lines.append("")
    if search.winner is not None:
        lines.append(f"cheapest that holds {search.rate:g} req/s: {describe(search.winner)}")
    elif search.smallest_beyond is not None:
        lines.append(f"none within --max-nodes {search.max_nodes}; the smallest that would is "
                     f"{describe(search.smallest_beyond)}")
    else:
        lines.append(f"none within --max-nodes {search.max_nodes}, nor within {search.beyond_nodes} nodes in "
                     f"{MAX_BEYOND_SIMULATIONS} more simulations of the cheapest larger candidates")
    return lines


def describe(t: Trial) -> str:
    r = t.row()
    return (f"{r['candidate']} ({r['gpus']} GPUs, {r['nodes']} nodes): {100 * r['slo_attainment']:.1f}% of requests "
            f"within both SLOs, goodput {r['goodput']:.2f} req/s, p90 TTFT {r['p90_ttft_ms']:.0f} ms, p90 TPOT "
            f"{r['p90_tpot_ms']:.1f} ms")
