"""``pdserve simulate``: a workload on a simulated cluster, reported as ``pdserve bench`` reports a run."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace

from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.engine.sched.profiles import scheduling_profile
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.perfmodel.deployment import deployment_text, parse_deployment
from pdserve.sim.cluster import Cluster, ClusterSpec, Pool, SimResult
from pdserve.sim.explain import explain_requests, format_explain, scheduling_lines
from pdserve.sim.report import format_instances, format_speed, format_summary, instance_rows, run_result, summary
from pdserve.sim.workload import build_workload
from pdserve.workload.report import default_result_path, result_json, save_json
from pdserve.workload.stats import parse_goodput, parse_percentiles


def cluster_spec(a: argparse.Namespace) -> ClusterSpec:
    base = parse_deployment(deployment_text(a))
    overrides = SchedulerOverrides.from_args(a)
    if a.colocated:
        pools = [Pool(SchedulerRole.BOTH, parse_deployment(a.decode_deployment, base, "decode_deployment"), a.colocated,
                      overrides)]
    else:
        prefill = replace(overrides, max_num_seqs=a.prefill_max_num_seqs or overrides.max_num_seqs)
        pools = [Pool(SchedulerRole.PREFILL, parse_deployment(a.prefill_deployment, base, "prefill_deployment"), a.prefill,
                      prefill),
                 Pool(SchedulerRole.DECODE, parse_deployment(a.decode_deployment, base, "decode_deployment"), a.decode,
                      overrides)]
    return ClusterSpec(pools, a.policy, prefix_cache_tokens=a.prefix_cache_tokens, kv_blocks=a.kv_blocks,
                       frontend=not a.no_frontend_overhead)


def offered(a: argparse.Namespace) -> dict:
    """What the run served and how it was loaded: the header's and the JSON's first keys."""
    spec = cluster_spec(a)
    models = sorted({p.deployment.model for p in spec.pools if p.count})
    software = sorted({scheduling_profile(p.deployment.software).release for p in spec.pools if p.count})
    rate = a.request_rate if not math.isinf(a.request_rate) else "inf"
    return {"model": ", ".join(models), "software": ", ".join(software), "request_rate": rate,
            "burstiness": a.burstiness, "max_concurrency": a.max_concurrency}


def header(info: dict) -> str:
    rate, shape = info["request_rate"], info["burstiness"]
    arrivals = "Poisson" if shape == 1 else f"gamma, burstiness {shape:g}"
    load = "all requests at once" if rate == "inf" else f"{rate:g} req/s offered ({arrivals} arrivals)"
    if info["max_concurrency"]:
        load += f", at most {info['max_concurrency']} in flight"
    return f"model: {info['model']}; software: {info['software']}; load: {load}"


def simulate(a: argparse.Namespace) -> tuple[SimResult, dict]:
    requests, offsets = build_workload(a)
    result = Cluster(cluster_spec(a)).run(requests, offsets, a.max_concurrency)
    load = {"rate": a.request_rate, "burstiness": a.burstiness, "seed": a.seed}
    s = summary(result, a.max_concurrency, parse_percentiles(a.metric_percentiles), parse_goodput(a.goodput), **load)
    return result, dict(offered(a), **s)


def cmd_simulate(a: argparse.Namespace) -> int:
    percentiles = parse_percentiles(a.metric_percentiles)
    if getattr(a, "calibration", None):
        from pdserve.perfmodel.calibration import apply_calibration

        data = apply_calibration(a.calibration, a.deployment or None)
    result, s = simulate(a)
    if getattr(a, "calibration", None):
        from pdserve.perfmodel.calibration import check_range

        seqs = result.sequences
        check_range(data, sum(len(q.prompt_ids) for q in seqs) / len(seqs), s["total_output_tokens"] / len(seqs))
    rows = instance_rows(result)
    if a.json:
        print(json.dumps({k: v for k, v in s.items() if k != "has_modeled"}, indent=2))
    else:
        print(header(s))
        print(f"cluster: {result.spec.describe()} = {result.spec.gpus} GPUs, policy {result.spec.policy}")
        for line in scheduling_lines(result):
            print(line)
        print(format_summary(s, percentiles))
        print(format_instances(rows))
        if a.explain:
            print(format_explain(explain_requests(result)))
        print(format_speed(result))
    if a.save_result is not None:
        path = a.save_result or default_result_path("simulate")
        config = {"backend": "pdserve-simulate", "cluster": result.spec.describe(), "gpus": result.spec.gpus,
                  "dataset": a.dataset, "num_prompts": len(result.sequences),
                  "request_rate": a.request_rate if not math.isinf(a.request_rate) else "inf",
                  "burstiness": a.burstiness, "max_concurrency": a.max_concurrency, "seed": a.seed}
        run = run_result(result, a.max_concurrency, a.request_rate, a.burstiness, a.seed)
        payload = dict(result_json(s, config, run), instances=rows, wall_seconds=result.wall_s)
        save_json(path, payload)
        print(f"result written to {path}", file=sys.stderr)
    if a.plot:
        from pdserve.sim.plot import plot_instances

        print(f"plot written to {plot_instances(rows, a.plot, result.spec.describe())}", file=sys.stderr)
    return 0
