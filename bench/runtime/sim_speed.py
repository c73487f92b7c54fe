"""``pdserve bench sim``: how fast the simulator runs a large cluster (simulated requests per wall second).

Default: 10,000 random requests (1,000-3,000 prompt tokens, 100-300 output tokens, Poisson arrivals) on 16 nodes of
8 x H20-141G (128 GPUs), one DeepSeek-R1 instance (TP8 EP8) per node, 6 prefill and 10 decode.
"""

from __future__ import annotations

import argparse
import itertools
import time

from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.perfmodel.deployment import Deployment
from pdserve.sim.cluster import Cluster, ClusterSpec, Pool, SimRequest
from pdserve.sim.report import format_speed, summary
from pdserve.workload.arrivals import arrival_stream
from pdserve.workload.datasets import random_requests


def speed_run(num_prompts: int = 10_000, nodes: int = 16, prefill: int = 6, rate: float = 30.0,
              seed: int = 0) -> tuple[dict, object]:
    if not 0 < prefill < nodes:
        raise ValueError(f"prefill: must be between 1 and nodes - 1 ({nodes - 1}), got {prefill}")
    made = time.perf_counter()
    bench = random_requests(num_prompts, 49152, (1000, 3000), (100, 300), seed=seed)
    requests = [SimRequest(r.token_ids, r.output_len) for r in bench]
    offsets = list(itertools.islice(arrival_stream(rate, 1.0, seed), num_prompts))
    made = time.perf_counter() - made
    d = Deployment()
    spec = ClusterSpec([Pool(SchedulerRole.PREFILL, d, prefill), Pool(SchedulerRole.DECODE, d, nodes - prefill)])
    result = Cluster(spec).run(requests, offsets)
    return summary(result), (result, made)


def main(a: argparse.Namespace) -> int:
    s, (result, made) = speed_run(a.num_prompts, a.nodes, a.prefill, a.request_rate)
    print(f"workload: {a.num_prompts} random requests (1000-3000 in, 100-300 out) at {a.request_rate:g} req/s, "
          f"made in {made:.2f} s")
    print(format_speed(result))
    print(f"simulated: mean TTFT {s['mean_ttft_ms']:.0f} ms, mean TPOT {s['mean_tpot_ms']:.1f} ms, "
          f"{s['output_throughput']:,.0f} output tok/s, {s['completed']} completed, {s['failed']} failed")
    return 0


def add_args(p) -> None:
    p.add_argument("--num-prompts", type=int, default=10_000)
    p.add_argument("--nodes", type=int, default=16, help="8-GPU nodes (one instance per node)")
    p.add_argument("--prefill", type=int, default=6, help="prefill instances (the rest decode)")
    p.add_argument("--request-rate", type=float, default=30.0)
