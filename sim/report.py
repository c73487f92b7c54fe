"""What a simulation prints and saves: ``pdserve bench``'s result block and JSON keys (client/bench/metrics.py,
report.py) in the simulated clock, plus per-instance utilization, queues, KV usage and KV transfer volume."""

from __future__ import annotations

import math

from pdserve.sim.cluster import SimResult
from pdserve.sim.instance import Instance
from pdserve.workload.record import LoadSpec, RequestRecord, RunResult
from pdserve.workload.report import format_result
from pdserve.workload.stats import summarize

SERIES_BINS = 60


def records(result: SimResult) -> list[RequestRecord]:
    """One bench record per request, every figure in virtual seconds; the modeled twins carry the same values so
    the JSON compares with a `pdserve bench` run on its modeled_* keys and with vLLM's on the plain ones."""
    out = []
    for seq in result.sequences:
        r = RequestRecord(seq.index, scheduled_s=seq.scheduled_s, start_s=seq.start_s,
                          prompt_tokens=len(seq.prompt_ids), cached_tokens=seq.cached_tokens)
        if seq.index in result.failed or seq.finish_s is None:
            r.error_code, r.error = "SIMULATED", result.failed.get(seq.index, "never finished")
            out.append(r)
            continue
        r.ok = True
        r.completion_tokens = len(seq.output_ids)
        r.ttft_s = seq.first_token_s - seq.start_s
        r.e2e_s = seq.finish_s - seq.start_s
        r.itl_s = seq.itl_s
        r.finish_reason = "length"
        r.server = {"ttft_modeled_s": r.ttft_s, "tpot_modeled_s": r.tpot_s, "e2e_modeled_s": r.e2e_s,
                    "kv_transfer_modeled_s": seq.transfer_s}
        out.append(r)
    return out


def run_result(result: SimResult, max_concurrency: int | None, rate: float = math.inf, burstiness: float = 1.0,
               seed: int = 0) -> RunResult:
    spec = LoadSpec(request_rate=rate, burstiness=burstiness, max_concurrency=max_concurrency, seed=seed,
                    progress=False)
    return RunResult(records(result), result.duration_s, spec)


def summary(result: SimResult, max_concurrency: int | None = None, percentiles=(90.0, 95.0, 99.0),
            slo: dict[str, float] | None = None, **load) -> dict:
    s = summarize(run_result(result, max_concurrency, **load), percentiles, slo)
    s["gpus"] = result.spec.gpus
    s["request_goodput_per_gpu"] = (s["request_goodput"] or 0.0) / s["gpus"] if slo else None
    s["output_throughput_per_gpu"] = s["output_throughput"] / s["gpus"]
    return s


def format_summary(s: dict, percentiles=(90.0, 95.0, 99.0)) -> str:
    """The bench block with one column: the simulated cluster's own clock."""
    block = format_result(dict(s, has_modeled=False), "Simulation Result", percentiles).splitlines()
    block[1] = f"{'':<36}{'simulated':>14}"
    return "\n".join(block)


def instance_rows(result: SimResult) -> list[dict]:
    d = max(result.duration_s, 1e-12)
    rows = []
    for inst in result.instances:
        st = inst.stats
        trace = st.trace
        waiting = [t[2] for t in trace] or [0]
        total = inst.scheduler.budget.total_blocks if inst.scheduler.budget else 0
        kv = [t[4] / total for t in trace] if total and trace else [0.0]
        rows.append({
            "name": inst.name, "role": inst.role.value, "deployment": inst.describe(), "node": inst.node,
            "steps": st.steps, "utilization": st.busy_s / d, "prefill_tokens": st.prefill_tokens,
            "decode_tokens": st.decode_tokens, "mean_waiting": sum(waiting) / len(waiting), "max_waiting": max(waiting),
            "mean_kv_usage": sum(kv) / len(kv), "max_kv_usage": max(kv),
            "preemptions": inst.scheduler.num_preemptions, "transfer_gb": st.transfer_bytes / 1e9,
            "series": series(inst, result.duration_s),
        })
    return rows


def series(inst: Instance, duration: float, bins: int = SERIES_BINS) -> dict[str, list[float]]:
    """Per time bin: busy fraction, mean waiting, mean running, mean KV usage (per step), GB of KV sent."""
    width = max(duration, 1e-9) / bins
    busy = [0.0] * bins
    waiting, running, kv, n = [0.0] * bins, [0.0] * bins, [0.0] * bins, [0] * bins
    sent = [0.0] * bins
    total = inst.scheduler.budget.total_blocks if inst.scheduler.budget else 0
    for start, seconds, w, r, used in inst.stats.trace:
        i = min(bins - 1, int(start / width))
        waiting[i] += w
        running[i] += r
        kv[i] += used / total if total else 0.0
        n[i] += 1
        t, end = start, start + seconds
        while t < end and i < bins:  # spread the busy time over the bins the step covers
            edge = min(end, (i + 1) * width)
            busy[i] += edge - t
            t, i = edge, i + 1
    for at, nbytes in inst.stats.transfers:
        sent[min(bins - 1, int(at / width))] += nbytes / 1e9
    return {"t": [(i + 0.5) * width for i in range(bins)], "utilization": [b / width for b in busy],
            "waiting": [w / k if k else 0.0 for w, k in zip(waiting, n)],
            "running": [r / k if k else 0.0 for r, k in zip(running, n)],
            "kv_usage": [u / k if k else 0.0 for u, k in zip(kv, n)], "transfer_gb": sent}


def format_instances(rows: list[dict]) -> str:
    lines = ["instance  role     deployment               steps  util%  wait mean/max   KV% mean/max  preempt  "
             "KV sent GB"]
    for r in rows:
        lines.append(f"{r['name']:<9} {r['role']:<8} {r['deployment']:<24} {r['steps']:>6} {100 * r['utilization']:>6.1f}"
                     f" {r['mean_waiting']:>7.1f} /{r['max_waiting']:>5} {100 * r['mean_kv_usage']:>7.1f} /"
                     f"{100 * r['max_kv_usage']:>5.1f} {r['preemptions']:>8} {r['transfer_gb']:>11.2f}")
    return "\n".join(lines)


def format_speed(result: SimResult) -> str:
    n = len(result.sequences)
    return (f"simulated {n} requests on {result.spec.gpus} GPUs ({result.spec.describe()}) in "
            f"{result.wall_s:.2f} s wall ({n / max(result.wall_s, 1e-9):,.0f} requests/s, "
            f"{result.events / max(result.wall_s, 1e-9):,.0f} events/s); {result.duration_s:.1f} s simulated")
