"""The fixed-width result block and the JSON file (``--save-result``)."""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict
from pathlib import Path

from pdserve.workload.record import RunResult
from pdserve.workload.stats import METRICS, MODELED_METRICS, percentile_key

WIDTH = 64
SECTIONS = {"ttft": ("Time to First Token", "TTFT"), "tpot": ("Time per Output Token (excl. 1st token)", "TPOT"),
            "itl": ("Inter-token Latency", "ITL"), "e2el": ("End-to-end Latency", "E2EL")}


def _num(value, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def _row(label: str, wall, modeled=None, fmt: str = ".2f") -> str:
    return f"{label:<36}{_num(wall, fmt):>14}{_num(modeled, fmt):>14}".rstrip()


def _rule(title: str, fill: str = "-") -> str:
    return f"{title:{fill}^{WIDTH}}" if title else fill * WIDTH


def format_result(s: dict, title: str = "Serving Benchmark Result",
                  percentiles: tuple[float, ...] = (90.0, 95.0, 99.0)) -> str:
    """vLLM's block layout with a second column for the modeled clock (empty where a figure has no modeled twin)."""
    m = s.get("has_modeled")

    def mod(key: str):
        return s.get(f"modeled_{key}") if m else None

    lines = [_rule(f" {title} ", "="), f"{'':<36}{'wall':>14}{'modeled' if m else '':>14}".rstrip(),
             _row("Successful requests:", s["completed"], fmt="d"),
             _row("Failed requests:", s["failed"], fmt="d"),
             _row("Benchmark duration (s):", s["duration"], mod("duration")),
             _row("Total input tokens:", s["total_input_tokens"], fmt="d"),
             _row("Total generated tokens:", s["total_output_tokens"], fmt="d"),
             _row("Cached prompt tokens:", s["cached_prompt_tokens"], fmt="d"),
             _row("Prefix hit rate (%):", 100 * s["prefix_hit_rate"]),
             _row("Request throughput (req/s):", s["request_throughput"], mod("request_throughput"))]
    if s.get("request_goodput") is not None:
        lines.append(_row("Request goodput (req/s):", s["request_goodput"], mod("request_goodput")))
        if s.get("slo_attainment") is not None:
            share = mod("slo_attainment")
            lines.append(_row("Requests within SLOs (%):", 100 * s["slo_attainment"],
                              100 * share if share is not None else None))
    lines += [_row("Output token throughput (tok/s):", s["output_throughput"], mod("output_throughput")),
              _row("Total token throughput (tok/s):", s["total_token_throughput"], mod("total_token_throughput"))]
    for metric in METRICS:
        section, short = SECTIONS[metric]
        lines.append(_rule(section))
        for stat in ("mean", "median", "std") + tuple(percentile_key(p) for p in percentiles):
            key = f"{stat}_{metric}_ms"
            label = stat.capitalize() if stat[0] != "p" else stat.upper()
            lines.append(_row(f"{label} {short} (ms):", s[key], mod(key) if metric in MODELED_METRICS else None))
    if m and s.get("mean_kv_handoff_ms"):
        lines += [_rule("KV hand-off, mean per request"),
                  _row("Prefill -> kvstore store (ms):", s["mean_kv_store_ms"]),
                  _row("Decode <- kvstore fetch (ms):", s["mean_kv_fetch_ms"]),
                  _row("Hand-off total / transfer (ms):", s["mean_kv_handoff_ms"], s["modeled_mean_kv_transfer_ms"])]
    if s["errors_by_status"]:
        lines.append(_rule("Failed requests by status"))
        for e in s["errors_by_status"]:
            lines.append(f"{e['count']:>6} x {e['status']}: {e['message']}"[:WIDTH * 2])
    lines.append(_rule("", "="))
    if s.get("goodput_definition"):
        lines.append(f"goodput: {s['goodput_definition']}")
    return "\n".join(lines)


def result_json(s: dict, config: dict, result: RunResult) -> dict:
    """What ``--save-result`` writes: the configuration, the summary (vLLM's keys + modeled_*), vLLM's per-request
    lists, and every request's record."""
    records = result.records
    return {
        "date": datetime.datetime.now().strftime("%Y%m%d-%H%M%S"),
        **config,
        **{k: v for k, v in s.items() if k != "has_modeled"},
        "input_lens": [r.prompt_tokens for r in records],
        "output_lens": [r.completion_tokens for r in records],
        "ttfts": [r.ttft_s for r in records],
        "itls": [r.itl_s for r in records],
        "errors": [f"{r.error_code}: {r.error}" if not r.ok else "" for r in records],
        "requests": [dict(asdict(r), tpot_s=r.tpot_s) for r in records],
    }


def save_json(path: str | Path, payload: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=2, ensure_ascii=False)


def default_result_path(backend_name: str) -> str:
    return f"bench-{backend_name}-{datetime.datetime.now():%Y%m%d-%H%M%S}.json"


def fixed_width(columns: list[tuple[str, str]], rows: list[tuple]) -> list[str]:
    """Lines of a fixed-width text table: ``columns`` are (title, cell format such as ``">8.1f"`` or ``"<16"``), the
    titles aligned and as wide as their cells."""
    def title_format(spec: str) -> str:
        align = spec[0] if spec[:1] in "<>^" else ">"
        return align + "".join(c for c in spec.lstrip("<>^").split(".")[0] if c.isdigit())

    lines = [" ".join(f"{title:{title_format(spec)}}" for title, spec in columns)]
    lines += [" ".join(f"{value:{spec}}" for value, (_, spec) in zip(row, columns)) for row in rows]
    return lines
