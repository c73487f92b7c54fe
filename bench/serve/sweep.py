"""``--sweep rate:1,2,4`` or ``--sweep concurrency:1,4,16``: the same workload at each load, one table, three PNGs.

- ``latency.png``: median and p99 of TTFT, TPOT and e2el against load, wall (solid) and modeled (dashed; log scale
  when both clocks are drawn);
- ``throughput.png``: request throughput and goodput, and output token throughput, against load in both clocks;
- ``distributions.png``: TTFT and TPOT cumulative distributions per load level, wall and modeled.

Random prompts are drawn anew for each level (seed + level index), so a level does not hit the prefix cache that
the previous level filled.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import numpy as np

from pdserve.bench.serve.command import load_spec, make_backend, run_config, with_backend
from pdserve.bench.serve.runner import run
from pdserve.workload.report import default_result_path, result_json, save_json
from pdserve.workload.requests import build_requests
from pdserve.workload.stats import modeled_values, summarize, wall_values

KINDS = {"rate": "request_rate", "concurrency": "max_concurrency"}
LABELS = {"rate": "request rate (req/s)", "concurrency": "max concurrency"}


def parse_sweep(text: str) -> tuple[str, list[float]]:
    kind, _, values = text.partition(":")
    if kind not in KINDS:
        raise ValueError(f"--sweep: {kind!r} is not 'rate' or 'concurrency' (as rate:1,2,4)")
    try:
        levels = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--sweep: {values!r} is not a comma-separated list of numbers") from None
    if not levels or any(v <= 0 for v in levels):
        raise ValueError(f"--sweep: give positive levels, as {kind}:1,2,4")
    if kind == "concurrency":
        if any(v != int(v) for v in levels):
            raise ValueError("--sweep concurrency: levels must be whole numbers")
        levels = [int(v) for v in levels]
    return kind, levels


def format_table(kind: str, points: list[dict]) -> str:
    has_goodput = points[0]["summary"].get("request_goodput") is not None
    head = (f"{kind:>11} {'ok':>4} {'req/s':>7} {'tok/s':>8} " + (f"{'goodput':>8} " if has_goodput else "")
            + f"{'TTFT p50':>9} {'p99':>8} {'TPOT p50':>9} {'p99':>7} | {'modeled TTFT p50':>16} {'TPOT p50':>9}")
    lines = [head + "   (ms)"]
    for p in points:
        s = p["summary"]
        modeled = (f"{s['modeled_median_ttft_ms']:>16.1f} {s['modeled_median_tpot_ms']:>9.2f}" if s["has_modeled"]
                   else f"{'-':>16} {'-':>9}")
        lines.append(f"{p['level']:>11g} {s['completed']:>4} {s['request_throughput']:>7.2f} "
                     f"{s['output_throughput']:>8.1f} " + (f"{s['request_goodput']:>8.2f} " if has_goodput else "")
                     + f"{s['median_ttft_ms']:>9.1f} {s['p99_ttft_ms']:>8.1f} {s['median_tpot_ms']:>9.2f} "
                     f"{s['p99_tpot_ms']:>7.2f} | {modeled}")
    return "\n".join(lines)


def _save(plt, fig, axes, log_scale: bool, path: Path) -> Path:
    """Grid and legend on every axis (log scale when both clocks are drawn: they can be orders of magnitude apart),
    then the figure to ``path``."""
    for ax in axes:
        if log_scale:
            ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_sweep(kind: str, points: list[dict], out_dir: str | Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    x = [p["level"] for p in points]
    sums = [p["summary"] for p in points]
    modeled = all(s["has_modeled"] for s in sums)
    paths = []

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (metric, title) in zip(axes, (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "end-to-end latency"))):
        for stat, color in (("median", "tab:blue"), ("p99", "tab:red")):
            ax.plot(x, [s[f"{stat}_{metric}_ms"] for s in sums], "o-", color=color, label=f"{stat} wall")
            if modeled:
                ax.plot(x, [s[f"modeled_{stat}_{metric}_ms"] for s in sums], "s--", color=color,
                        label=f"{stat} modeled")
        ax.set(title=title, xlabel=LABELS[kind], ylabel="ms")
    paths.append(_save(plt, fig, axes, modeled, out / "latency.png"))

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for clock, style, prefix in (("wall", "o-", ""), ("modeled", "s--", "modeled_")):
        if clock == "modeled" and not modeled:
            continue
        ax1.plot(x, [s[f"{prefix}request_throughput"] for s in sums], style, color="tab:blue",
                 label=f"throughput {clock}")
        if sums[0].get("request_goodput") is not None:
            ax1.plot(x, [s[f"{prefix}request_goodput"] for s in sums], style, color="tab:green",
                     label=f"goodput {clock}")
        ax2.plot(x, [s[f"{prefix}output_throughput"] for s in sums], style, color="tab:purple", label=clock)
    ax1.set(title="requests per second", xlabel=LABELS[kind], ylabel="req/s")
    ax2.set(title="output tokens per second", xlabel=LABELS[kind], ylabel="tok/s")
    paths.append(_save(plt, fig, (ax1, ax2), modeled, out / "throughput.png"))

    rows = (("wall", wall_values),) + ((("modeled", modeled_values),) if modeled else ())
    fig, axes = plt.subplots(len(rows), 2, figsize=(11, 3.6 * len(rows)), squeeze=False)
    for (clock, values_of), ax_row in zip(rows, axes):
        for ax, metric in zip(ax_row, ("ttft", "tpot")):
            for p in points:
                ok = [r for r in p["result"].records if r.ok]
                values = np.sort(np.asarray(values_of(ok)[metric], dtype=float) * 1000.0)
                if values.size:
                    ax.step(values, np.arange(1, values.size + 1) / values.size, where="post", linewidth=1.5,
                            label=f"{kind} {p['level']:g}")
            ax.set(title=f"{metric.upper()} distribution ({clock})", xlabel="ms", ylabel="fraction of requests <= x")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / "distributions.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths


def run_sweep(a: argparse.Namespace, percentiles: tuple[float, ...], slo: dict[str, float]) -> int:
    kind, levels = parse_sweep(a.sweep)
    for level in levels:
        load_spec(a, **{KINDS[kind]: level})  # flag errors before connecting

    async def body(backend, served):
        points = []
        for i, level in enumerate(levels):
            requests = build_requests(a, served, seed_offset=i)
            spec = load_spec(a, **{KINDS[kind]: level})
            result = await run(backend, requests, spec)
            points.append({"level": level, "result": result, "summary": summarize(result, percentiles, slo),
                           "config": run_config(a, backend.name, served, spec, len(result.records))})
        return points

    points = asyncio.run(with_backend(lambda: make_backend(a), body))
    print(format_table(kind, points))
    for path in plot_sweep(kind, points, a.plot_dir):
        print(f"plot written to {path}")
    if a.save_result is not None:
        path = a.save_result or default_result_path(points[0]["config"]["backend"] + "-sweep")
        save_json(path, {"sweep": kind, "levels": levels,
                         "points": [result_json(p["summary"], p["config"], p["result"]) for p in points]})
        print(f"result written to {path}")
    return 0
