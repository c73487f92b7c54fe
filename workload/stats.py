"""Statistics of a run, in the wall clock (measured here) and the modeled clock (each stream's final chunk).

Definitions follow vLLM's benchmark so the numbers compare: TTFT from send to the first chunk with tokens; ITL every
gap between such chunks; TPOT = (e2e - TTFT) / (output tokens - 1) over requests with more than one token; e2el from
send to the end of the stream; throughputs over the run's duration. The modeled clock has TTFT, TPOT and e2el per
request (the final chunk carries means, not every gap, so there is no modeled ITL); its duration is the makespan of
the same arrival schedule and concurrency cap with each request lasting its modeled e2el (arrivals.modeled_makespan).
Goodput: completed requests meeting every SLO given, per second, in each clock, and the share of requests that did
(workload/goodput.py: the one definition bench, simulate and plan share).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from pdserve.workload import goodput as gp
from pdserve.workload.arrivals import modeled_makespan
from pdserve.workload.record import RequestRecord, RunResult

METRICS = ("ttft", "tpot", "itl", "e2el")
MODELED_METRICS = ("ttft", "tpot", "e2el")
DEFAULT_PERCENTILES = (90.0, 95.0, 99.0)


def parse_goodput(items: list[str] | None) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` -> {"ttft": 0.5, "tpot": 0.05} (seconds)."""
    slo = {}
    for item in items or []:
        name, _, value = item.partition(":")
        if name not in ("ttft", "tpot", "e2el"):
            raise ValueError(f"--goodput: {name!r} is not one of ttft, tpot, e2el (as NAME:MILLISECONDS)")
        try:
            ms = float(value)
        except ValueError:
            raise ValueError(f"--goodput {name}: {value!r} is not a number of milliseconds") from None
        if ms <= 0:
            raise ValueError(f"--goodput {name}: must be positive, got {value}")
        slo[name] = ms / 1000.0
    return slo


def parse_percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--metric-percentiles: expected numbers like 90,95,99, got {text!r}") from None
    if not values or not all(0 < p < 100 for p in values):
        raise ValueError(f"--metric-percentiles: each must be in (0, 100), got {text!r}")
    return values


def percentile_key(p: float) -> str:
    return f"p{int(p)}" if p == int(p) else f"p{p:g}"


def distribution(values_s: list[float], percentiles: tuple[float, ...]) -> dict[str, float]:
    """mean / median / std / pNN in milliseconds (zeros when there are no values, as vLLM reports)."""
    a = np.asarray(values_s, dtype=float) * 1000.0 if values_s else np.zeros(1)
    out = {"mean": float(a.mean()), "median": float(np.median(a)), "std": float(a.std())}
    for p in percentiles:
        out[percentile_key(p)] = float(np.percentile(a, p))
    return out


def wall_values(ok: list[RequestRecord]) -> dict[str, list[float]]:
    return {"ttft": [r.ttft_s for r in ok], "tpot": [r.tpot_s for r in ok if r.completion_tokens > 1],
            "itl": [x for r in ok for x in r.itl_s], "e2el": [r.e2e_s for r in ok]}


def modeled_values(ok: list[RequestRecord]) -> dict[str, list[float]]:
    return {"ttft": [r.modeled("ttft") for r in ok], "tpot": [r.modeled("tpot") for r in ok if r.completion_tokens > 1],
            "e2el": [r.modeled("e2e") for r in ok]}


meets = gp.within


def failures(records: list[RequestRecord]) -> list[dict]:
    """Failed requests grouped by status code and message, most frequent first."""
    counts = Counter((r.error_code, r.error) for r in records if not r.ok)
    return [{"status": code, "message": msg, "count": n} for (code, msg), n in counts.most_common()]


def summarize(result: RunResult, percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
              slo: dict[str, float] | None = None) -> dict:
    """The flat result dict, with vLLM's key names and ``modeled_`` twins."""
    records = result.records
    ok = [r for r in records if r.ok]
    duration = result.duration_s
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = sum(r.completion_tokens for r in ok)
    cached = sum(r.cached_tokens for r in ok)

    def per_s(x: float, d: float) -> float:
        return x / d if d > 0 else 0.0

    s: dict = {
        "duration": duration, "completed": len(ok), "failed": len(records) - len(ok),
        "total_input_tokens": total_in, "total_output_tokens": total_out, "cached_prompt_tokens": cached,
        "prefix_hit_rate": per_s(cached, total_in),
        "request_throughput": per_s(len(ok), duration), "output_throughput": per_s(total_out, duration),
        "total_token_throughput": per_s(total_in + total_out, duration),
        "request_goodput": gp.goodput(ok, slo, duration) if slo else None,
        "slo_attainment": gp.attainment(records, slo) if slo else None,
    }
    if slo:
        s["goodput_definition"] = gp.describe(slo)
    for name, values in wall_values(ok).items():
        for stat, value in distribution(values, percentiles).items():
            s[f"{stat}_{name}_ms"] = value

    has_modeled = bool(ok) and all(r.modeled("e2e") is not None for r in ok)
    s["has_modeled"] = has_modeled
    if has_modeled:
        mdur = modeled_makespan([r.scheduled_s for r in ok], [r.modeled("e2e") for r in ok],
                                result.spec.max_concurrency)
        s.update({
            "modeled_duration": mdur, "modeled_request_throughput": per_s(len(ok), mdur),
            "modeled_output_throughput": per_s(total_out, mdur),
            "modeled_total_token_throughput": per_s(total_in + total_out, mdur),
            "modeled_request_goodput": gp.goodput(ok, slo, mdur, "modeled") if slo else None,
            "modeled_slo_attainment": gp.attainment(records, slo, "modeled") if slo else None,
        })
        for name, values in modeled_values(ok).items():
            for stat, value in distribution(values, percentiles).items():
                s[f"modeled_{stat}_{name}_ms"] = value
        hand = [r.server.get("kv_handoff_wall_s", 0.0) for r in ok]
        s["mean_kv_store_ms"] = 1000 * float(np.mean([r.server.get("kv_store_wall_s", 0.0) for r in ok]))
        s["mean_kv_fetch_ms"] = 1000 * float(np.mean([r.server.get("kv_fetch_wall_s", 0.0) for r in ok]))
        s["mean_kv_handoff_ms"] = 1000 * float(np.mean(hand))
        s["modeled_mean_kv_transfer_ms"] = 1000 * float(np.mean([r.server.get("kv_transfer_modeled_s", 0.0)
                                                                 for r in ok]))
    s["errors_by_status"] = failures(records)
    return s
