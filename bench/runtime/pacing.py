"""Does wall time follow the modeled clock? The stack runs the synthetic backend with ``--pace realtime``; at each
concurrency the client measures TPOT on the wall clock, and each request's final chunk carries the modeled TPOT of
the decode steps it was really part of (the batch the decode worker really ran). Their ratio is 1 when pacing holds
and the machine keeps up; above 1 means real work overran the modeled budgets.
"""

from __future__ import annotations

import numpy as np

from pdserve.bench.serve.command import run_grpc
from pdserve.common.scrape import total
from pdserve.launcher.stack import Stack, StackSpec
from pdserve.workload.datasets import BenchRequest
from pdserve.workload.record import LoadSpec, Sampling
from pdserve.workload.report import fixed_width


def _decode_step_stats(stack: Stack) -> tuple[float, float, float]:
    """(steps, summed modeled seconds, summed batch size) of the decode worker so far."""
    page = stack.scrape(stack.decodes[0])
    return (total(page, "pdserve_step_modeled_seconds_count", phase="decode"),
            total(page, "pdserve_step_modeled_seconds_sum", phase="decode"),
            total(page, "pdserve_step_batch_tokens_sum", phase="decode"))


def run_pacing_bench(concurrencies=(1, 16, 64), prompt_len: int = 256, output_len: int = 128,
                     time_scale: float = 1.0, waves: int = 2) -> list[dict]:
    rng = np.random.default_rng(0)
    spec = StackSpec(model="synthetic", pace="realtime", time_scale=time_scale, metrics=True,
                     extra={"decode": ["--max-num-seqs", str(max(concurrencies))]})
    rows = []
    with Stack(spec) as stack:
        for concurrency in concurrencies:
            n = max(4, waves * concurrency)
            requests = [BenchRequest(output_len=output_len, token_ids=rng.integers(100, 40000, prompt_len).tolist())
                        for _ in range(n)]
            before = _decode_step_stats(stack)
            spec = LoadSpec(max_concurrency=concurrency, sampling=Sampling(temperature=0.0, ignore_eos=True),
                            progress=False)
            run = run_grpc(stack.router_target, requests, spec)
            results, duration = run.records, run.duration_s
            after = _decode_step_stats(stack)
            ok = [r for r in results if r.ok]
            steps = after[0] - before[0]
            wall_tpot = float(np.mean([r.tpot_s for r in ok]))
            modeled_tpot = float(np.mean([r.server["tpot_modeled_s"] for r in ok]))
            rows.append({
                "concurrency": concurrency, "requests": n, "failed": len(results) - len(ok),
                "mean_decode_batch": (after[2] - before[2]) / steps if steps else 0.0,
                "mean_modeled_step_s": (after[1] - before[1]) / steps if steps else 0.0,
                "wall_tpot_s": wall_tpot, "modeled_tpot_s": modeled_tpot,
                "ratio": wall_tpot / (modeled_tpot * time_scale) if modeled_tpot else float("nan"),
                "duration_s": duration,
            })
    return rows


def format_pacing(rows: list[dict], time_scale: float) -> str:
    columns = [("concurrency", ">11"), ("mean batch", ">10.1f"), ("modeled step ms", ">15.2f"),
               ("modeled TPOT ms", ">15.2f"), ("wall TPOT ms", ">12.2f"), ("wall/modeled", ">12.3f")]
    table = fixed_width(columns, [(r["concurrency"], r["mean_decode_batch"], r["mean_modeled_step_s"] * 1e3,
                                   r["modeled_tpot_s"] * 1e3, r["wall_tpot_s"] * 1e3, r["ratio"]) for r in rows])
    return "\n".join([f"synthetic backend, --pace realtime --time-scale {time_scale:g}, modeled deepseek-r1 on "
                      "8 x H20-141G", *table])


def add_args(p) -> None:
    p.add_argument("--concurrency", default="1,16,64")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--json", default=None)


def main(a) -> int:
    import json

    levels = tuple(int(x) for x in a.concurrency.split(","))
    rows = run_pacing_bench(levels, a.prompt_len, a.output_len, a.time_scale)
    print(format_pacing(rows, a.time_scale))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0
