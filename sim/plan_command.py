"""``pdserve plan``: the flags, the search, and the report (Pareto front, best per hardware, the baseline, and why
the winner wins)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.perfmodel.deployment import Deployment, deployment_from_args
from pdserve.sim.candidates import candidates
from pdserve.sim.error_band import band
from pdserve.sim.plan_checks import emit_check, load_calibration_arg, parse_duration, plan_hardware, refuse_unhonoured
from pdserve.sim.plan_file import plan_block
from pdserve.sim.planner import SLO, Candidate, Outcome, Planner, pareto, step_breakdown
from pdserve.sim.progress import Progress
from pdserve.sim.workload import build_workload
from pdserve.workload.goodput import HOLD_ATTAINMENT
from pdserve.workload.goodput import NAME as GOODPUT_NAME
from pdserve.workload.report import save_json

BASELINE = Deployment()  # the source article's: DeepSeek-R1 on 8 x H20-141G, TP8 EP8, colocated
DEFAULT_PROBES = 6


def _row(o: Outcome) -> dict:
    b = o.best
    s = b.summary if b else {}
    return {"candidate": o.candidate.label(), "hardware": o.candidate.deployment.hardware, "gpus": o.candidate.gpus,
            "colocated": o.candidate.colocated, "max_rate": b.rate if b else 0.0, "goodput": o.goodput,
            "goodput_per_gpu": o.goodput_per_gpu, "p90_ttft_ms": s.get("p90_ttft_ms"),
            "p90_tpot_ms": s.get("p90_tpot_ms"), "mean_e2el_ms": s.get("mean_e2el_ms"), "binding_slo": o.binding}


def _table(rows: list[dict]) -> str:
    lines = [f"{'deployment':<40} {'GPUs':>4} {'rate':>7} {'goodput':>8} {'/GPU':>7} {'p90 TTFT':>9} "
             f"{'p90 TPOT':>9} {'binds':>5}", f"{'':<40} {'':>4} {'req/s':>7} {'req/s':>8} {'req/s':>7} "
             f"{'ms':>9} {'ms':>9}"]
    for r in rows:
        ttft = f"{r['p90_ttft_ms']:.0f}" if r["p90_ttft_ms"] is not None else "-"
        tpot = f"{r['p90_tpot_ms']:.1f}" if r["p90_tpot_ms"] is not None else "-"
        lines.append(f"{r['candidate']:<40} {r['gpus']:>4} {r['max_rate']:>7.2f} {r['goodput']:>8.2f} "
                     f"{r['goodput_per_gpu']:>7.3f} {ttft:>9} {tpot:>9} {r['binding_slo']:>5}")
    return "\n".join(lines)


def _grown(c: Candidate) -> list[tuple[str, Candidate]]:
    if c.colocated:
        return [("one more colocated instance", Candidate(c.deployment, 0, c.n_decode + 1))]
    return [("one more prefill instance", Candidate(c.deployment, c.n_prefill + 1, c.n_decode)),
            ("one more decode instance", Candidate(c.deployment, c.n_prefill, c.n_decode + 1))]


def explain(planner: Planner, winner: Outcome) -> tuple[list[str], dict]:
    """Where the winner's time goes, which SLO binds, and what the next instance's GPUs would buy."""
    c, b = winner.candidate, winner.best
    lines, facts = [], {}
    if b is None:
        return ["no candidate met the SLOs at any rate tried"], facts
    util = {}
    for r in b.summary["instances"]:
        util.setdefault(r["role"], []).append(r["utilization"])
    util = {k: sum(v) / len(v) for k, v in util.items()}
    decode_rows = [r for r in b.summary["instances"] if r["role"] != "prefill"]
    batch = int(round(sum(r["decode_tokens"] / max(1, r["steps"]) for r in decode_rows) / max(1, len(decode_rows))))
    parts = step_breakdown(c.deployment, planner.mean_in, batch, int(planner.mean_in + planner.mean_out / 2))
    facts.update(utilization=util, mean_decode_batch=batch, step_parts=parts)
    lines.append(f"winner: {c.label()} ({c.gpus} GPUs): {winner.goodput:.2f} req/s within the SLOs, "
                 f"{winner.goodput_per_gpu:.3f} per GPU, at {b.rate:.2f} req/s offered")
    lines.append("  busy: " + ", ".join(f"{role} instances {100 * u:.0f}%" for role, u in util.items()))
    for phase, d in parts.items():
        total = d.pop("total")
        top = sorted(d.items(), key=lambda kv: -kv[1])[:3]
        what = "a mean prompt" if phase == "prefill" else f"a step of {batch} sequences"
        lines.append(f"  {phase} of {what}: {1000 * total:.1f} ms = " +
                     ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in top))
    ttft, tpot = b.ttft_ratio, b.tpot_ratio
    lines.append(f"  binding SLO: {winner.binding} (at {b.rate:.2f} req/s {100 * b.attainment:.0f}% of requests meet both; "
                 f"p90 TTFT is {100 * ttft:.0f}% of its limit, p90 TPOT {100 * tpot:.0f}%)")
    for what, bigger in _grown(c):
        o = planner.evaluate(bigger)
        extra = bigger.gpus - c.gpus
        gain = (o.goodput - winner.goodput) / extra
        facts.setdefault("next", []).append({"change": what, "gpus": bigger.gpus, "goodput": o.goodput,
                                             "gain_per_added_gpu": gain})
        lines.append(f"  {what} (+{extra} GPUs): {o.goodput:.2f} req/s, {gain:+.3f} req/s per added GPU, "
                     f"{o.goodput_per_gpu:.3f} per GPU overall")
    return lines, facts


def sensitivity(planner: Planner, winner: Candidate, baseline: Candidate) -> tuple[list[str], list[dict]]:
    """Goodput per GPU of the winner and the baseline with one timing assumption changed at a time."""
    from pdserve.sim.sensitivity import VARIANTS, variant

    lines, rows = ["sensitivity (goodput per GPU, winner / baseline):"], []
    for name, why, change in VARIANTS:
        w = planner.evaluate(Candidate(variant(winner.deployment, change), winner.n_prefill, winner.n_decode))
        b = planner.evaluate(Candidate(variant(baseline.deployment, change), baseline.n_prefill, baseline.n_decode))
        ratio = w.goodput_per_gpu / b.goodput_per_gpu if b.goodput_per_gpu else float("inf")
        rows.append({"variant": name, "why": why, "winner_goodput_per_gpu": w.goodput_per_gpu,
                     "baseline_goodput_per_gpu": b.goodput_per_gpu, "ratio": ratio})
        lines.append(f"  {name:<26} {w.goodput_per_gpu:.3f} / {b.goodput_per_gpu:.3f} = {ratio:.2f}x   ({why})")
    return lines, rows


def cmd_plan(a: argparse.Namespace) -> int:
    slo = SLO(parse_duration(a.ttft_p90, "ttft_p90"), parse_duration(a.tpot_p90, "tpot_p90"))
    if a.max_nodes < 1:
        raise ValueError(f"max_nodes: must be at least 1, got {a.max_nodes}")
    refuse_unhonoured(a)
    probes = DEFAULT_PROBES if a.probes is None else a.probes
    if probes < 2:
        raise ValueError(f"probes: must be at least 2, got {a.probes}")
    emit_check(a)
    calibration = load_calibration_arg(a)
    started = time.perf_counter()
    try:
        modeled = deployment_from_args(a)
    except ValueError as exc:  # its fields ("hardware: unknown GPU ...") belong to one flag
        message = str(exc)
        raise ValueError(message if message.startswith("--deployment") else f"--deployment: {message}") from None
    requests, _ = build_workload(a)
    planner = Planner(requests, slo, SchedulerOverrides.from_args(a), probes, a.burstiness, a.seed)
    if calibration:
        from pdserve.perfmodel.calibration import check_range, load

        check_range(load(calibration), planner.mean_in, planner.mean_out)
    modeled.profile()  # an unknown model (or a config.json it cannot model) is refused here, naming the known ones
    hardware = plan_hardware(a.hardware, modeled, "hardware=" in (a.deployment or ""))
    try:
        tp_sizes = tuple(int(x) for x in a.tp_sizes.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"tp_sizes: expected integers like 8,4, got {a.tp_sizes!r}") from None
    if any(t <= 0 for t in tp_sizes) or a.instance_sizes < 1:
        raise ValueError("tp_sizes / instance_sizes: TP degrees must be positive and one instance size is needed")
    try:
        group_sizes = tuple(int(x) for x in a.dp_group_sizes.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"dp_group_sizes: expected integers like 1,2, got {a.dp_group_sizes!r}") from None
    if not group_sizes or any(s <= 0 for s in group_sizes):
        raise ValueError(f"dp_group_sizes: GPUs per DP attention group must be positive, got {a.dp_group_sizes!r}")
    pool_args = dict(dp_attention=(False,) if a.no_dp_attention else (False, True), tp_sizes=tp_sizes,
                     group_tp_sizes=group_sizes,
                     sizes=a.instance_sizes, overrides=planner.overrides, base=modeled,
                     gpus_per_node=modeled.gpus_per_node)
    slo_dict = {"ttft_p90_s": slo.ttft_p90_s, "tpot_p90_s": slo.tpot_p90_s}
    head = (f"workload: {len(requests)} requests, mean {planner.mean_in:.0f} prompt / {planner.mean_out:.0f} output "
            f"tokens; SLOs: p90 TTFT <= {slo.ttft_p90_s * 1000:.0f} ms, p90 TPOT <= {slo.tpot_p90_s * 1000:.0f} ms")
    goodput_line = (f"goodput: {GOODPUT_NAME}; a deployment holds a rate when at least "
                    f"{100 * HOLD_ATTAINMENT:.0f}% of its requests are within both SLOs")
    if not math.isinf(a.request_rate):
        return _cmd_target(a, planner, hardware, pool_args, slo_dict, head, goodput_line, started, calibration)
    pool = candidates(hardware, a.max_nodes, **pool_args)
    if not pool:
        raise ValueError(f"hardware: none of {', '.join(hardware)} holds {modeled.profile().name} within "
                         f"{a.max_nodes} nodes")
    same_model = modeled.profile().name == BASELINE.profile().name and not modeled.model_config
    baseline = Candidate(BASELINE, 0, 1) if same_model else Candidate(pool[0].deployment, 0, 1)
    with Progress(not a.json) as progress:
        tick = progress.phase(len(pool), "candidates")
        outcomes = []
        for c in pool:
            outcomes.append(planner.evaluate(c))
            tick()
    base = next((o for o in outcomes if o.candidate.label() == baseline.label()), None) or planner.evaluate(baseline)
    ranked = sorted(outcomes, key=lambda o: -o.goodput_per_gpu)
    winner = ranked[0]
    notes, facts = explain(planner, winner)
    if a.sensitivity:
        more, facts["sensitivity"] = sensitivity(planner, winner.candidate, baseline)
        notes += [""] + more
    rows = [_row(o) for o in ranked]
    front = [{"candidate": o.candidate.label(), "gpus": o.candidate.gpus, "rate": p.rate,
              "goodput_per_gpu": p.goodput / o.candidate.gpus,
              "mean_e2el_ms": p.summary["mean_e2el_ms"]} for o, p in pareto(outcomes)]
    best_per_hw = {}
    for o in ranked:
        best_per_hw.setdefault(o.candidate.deployment.hardware, _row(o))
    # how sure each recommended shape is: the held-out validation rows closest to it (sim/error_band.py)
    shown = {winner.candidate.label()} | {r["candidate"] for r in best_per_hw.values()}
    bands = {o.candidate.label(): band(o.candidate.deployment, not o.candidate.colocated)
             for o in ranked if o.candidate.label() in shown}
    elapsed = time.perf_counter() - started
    payload = {"slo": slo_dict, "goodput_definition": GOODPUT_NAME, "requests": len(requests),
               "mean_input_tokens": planner.mean_in, "mean_output_tokens": planner.mean_out, "candidates": rows,
               "pareto": front, "best_per_hardware": best_per_hw, "baseline": _row(base), "winner": _row(winner),
               "explanation": notes, "facts": facts,
               "error_bands": {k: {"rows": b.rows, "matched": b.matched, "dropped": b.dropped,
                                   "ranges": b.ranges, "on_gpu": b.on_gpu} for k, b in bands.items()},
               "simulations": planner.simulations, "wall_seconds": elapsed,
               "plan": plan_block(winner.candidate, winner.best, vars(a), slo_dict, planner.overrides,
                                  calibration) if winner.best else None}
    if a.json:
        print(json.dumps(payload, indent=2))
    else:
        print(head)
        print(goodput_line)
        print(_table(rows))
        print("\nPareto front (goodput per GPU vs mean e2e latency, passing operating points):")
        for f in front:
            print(f"  {f['candidate']:<40} at {f['rate']:6.2f} req/s: {f['goodput_per_gpu']:.3f} req/s/GPU, "
                  f"mean E2EL {f['mean_e2el_ms']:,.0f} ms")
        print("\nbest per hardware (and how sure: the simulator's errors on the closest held-out public runs):")
        for hw, r in best_per_hw.items():
            print(f"  {hw:<9} {r['candidate']:<40} {r['goodput_per_gpu']:.3f} req/s/GPU")
            print(f"  {'':<9} {bands[r['candidate']].describe()}")
        b = _row(base)
        what = "the article's 8 x H20-141G TP8 EP8, colocated" if same_model else \
            f"the smallest instance that holds {modeled.profile().name}: {b['candidate']}"
        print(f"\nbaseline ({what}): {b['goodput']:.2f} req/s, "
              f"{b['goodput_per_gpu']:.3f} per GPU (binds: {b['binding_slo']})")
        ratio = winner.goodput_per_gpu / base.goodput_per_gpu if base.goodput_per_gpu else float("inf")
        print(f"winner vs baseline: {ratio:.2f}x goodput per GPU")
        print(f"winner: {bands[winner.candidate.label()].describe()}\n")
        print("\n".join(notes))
        print(f"\n{planner.simulations} simulations in {elapsed:.0f} s")
    return _finish(a, payload)


def _cmd_target(a: argparse.Namespace, planner: Planner, hardware: list[str], pool_args: dict, slo_dict: dict,
                head: str, goodput_line: str, started: float, calibration: str | None) -> int:
    from pdserve.sim import target_rate

    with Progress(not a.json) as progress:
        search = target_rate.cheapest(planner, hardware, a.max_nodes, a.request_rate, pool_args, progress.phase)
    if not search.trials:
        raise ValueError(f"hardware: none of {', '.join(hardware)} holds the model within {a.max_nodes} nodes")
    elapsed = time.perf_counter() - started
    chosen = search.winner
    payload = {"mode": "target_rate", "request_rate": a.request_rate, "max_nodes": a.max_nodes, "slo": slo_dict,
               "goodput_definition": GOODPUT_NAME, "requests": len(planner.requests),
               "mean_input_tokens": planner.mean_in, "mean_output_tokens": planner.mean_out,
               "tried": [t.row() for t in search.trials], "winner": chosen.row() if chosen else None,
               "beyond_max_nodes": [t.row() for t in search.beyond],
               "smallest_beyond": search.smallest_beyond.row() if search.smallest_beyond else None,
               "simulations": planner.simulations, "wall_seconds": elapsed,
               "plan": plan_block(chosen.candidate, chosen.probe, vars(a), slo_dict, planner.overrides,
                                  calibration) if chosen else None}
    if a.json:
        print(json.dumps(payload, indent=2))
    else:
        print(f"{head}; target: {a.request_rate:g} req/s (burstiness {a.burstiness:g})")
        print(goodput_line)
        print("\n".join(target_rate.report(search)))
        print(f"\n{planner.simulations} simulations in {elapsed:.0f} s")
    rc = _finish(a, payload)
    return rc if chosen else 1


def _finish(a: argparse.Namespace, payload: dict) -> int:
    if a.save_result:
        save_json(a.save_result, payload)
        print(f"result written to {a.save_result}", file=sys.stderr)
    if getattr(a, "emit", None):
        if payload.get("plan") is None:
            raise ValueError("emit: the plan found no deployment within the SLOs; nothing to emit")
        from pdserve.sim.emit import emit_plan

        emit_plan(a.emit, payload["plan"], a.out)
    return 0
