"""Flags shared by ``pdserve simulate`` and ``pdserve plan``: the workload (named as ``pdserve bench`` names them)
and the modeled deployment of each instance."""

from __future__ import annotations

import argparse
from dataclasses import fields

from pdserve.client.bench.datasets import DATASETS
from pdserve.perfmodel.deployment import Deployment


def add_workload_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload (as pdserve bench)")
    g.add_argument("--dataset", "--dataset-name", dest="dataset", default="random", choices=DATASETS)
    g.add_argument("--dataset-path", default=None, help="file for jsonl, sharegpt and trace")
    g.add_argument("--num-prompts", type=int, default=None, help="requests (default: 100 for random, the whole file)")
    g.add_argument("--input-len", default="256", help="random prompt tokens: N or MIN:MAX")
    g.add_argument("--output-len", default=None, help="output tokens per request: N or MIN:MAX (default 128)")
    g.add_argument("--random-prefix-fraction", type=float, default=0.0)
    g.add_argument("--vocab-size", type=int, default=None, help="token ids of random and trace prompts (default 49152)")
    g.add_argument("--tokenizer", default=None, help="GGUF whose tokenizer turns text prompts into tokens")
    g.add_argument("--trace-block-tokens", type=int, default=512)
    g.add_argument("--trace-time-scale", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--request-rate", type=float, default=float("inf"), help="requests per second (default: all at once)")
    g.add_argument("--burstiness", type=float, default=1.0)
    g.add_argument("--max-concurrency", type=int, default=None)
    g.add_argument("--metric-percentiles", default="90,95,99")
    p.set_defaults(model=None, ignore_eos=True)  # what build_requests reads; every request runs its full length


def parse_deployment(text: str, base: Deployment | None = None, field_name: str = "deployment") -> Deployment:
    """``"hardware=H20-141G,gpus=8,tp=8,ep=8,dp_attention=1"`` over ``base`` (or the default deployment)."""
    values = {f.name: getattr(base or Deployment(), f.name) for f in fields(Deployment) if not f.name.startswith("_")}
    for item in filter(None, (x.strip() for x in (text or "").split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in values:
            raise ValueError(f"{field_name}: {item!r} is not KEY=VALUE with KEY one of {', '.join(values)}")
        kind = type(values[key])
        try:
            if kind is bool:
                if value.lower() not in ("1", "0", "true", "false", "on", "off", "yes", "no"):
                    raise ValueError
                values[key] = value.lower() in ("1", "true", "on", "yes")
            else:
                values[key] = kind(value)
        except ValueError:
            raise ValueError(f"{field_name}: {key}={value!r} is not a {kind.__name__}") from None
    return Deployment(**values)


def add_scheduler_args(g) -> None:
    """The scheduler limits of every instance (the workers' --max-num-seqs and --max-num-batched-tokens)."""
    g.add_argument("--max-num-seqs", type=int, default=64, help="sequences per step (decode batch), per instance")
    g.add_argument("--max-num-batched-tokens", type=int, default=2048, help="prompt tokens per step (chunked prefill)")


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster")
    g.add_argument("--prefill", type=int, default=1, help="prefill instances")
    g.add_argument("--decode", type=int, default=1, help="decode instances")
    g.add_argument("--colocated", type=int, default=0, help="colocated instances instead of prefill + decode")
    g.add_argument("--deployment", default="", metavar="KEY=V,..",
                   help="every instance's modeled deployment over the default (deepseek-r1, 8 x H20-141G, TP8 EP8), "
                        "e.g. hardware=H200,gpus=16,tp=8,ep=16,dp_attention=1,kv_precision=fp8")
    g.add_argument("--prefill-deployment", default="", metavar="KEY=V,..", help="prefill instances, over --deployment")
    g.add_argument("--decode-deployment", default="", metavar="KEY=V,..", help="decode instances, over --deployment")
    g.add_argument("--policy", default="cache_aware", help="prefill routing: round_robin, least_loaded, cache_aware")
    add_scheduler_args(g)
    g.add_argument("--prefill-max-num-seqs", type=int, default=None, help="prefill instances (default: --max-num-seqs)")
    g.add_argument("--prefix-cache-tokens", type=int, default=None,
                   help="cluster prefix cache in tokens (default: the prefill instances' KV capacity; 0: off)")
    g.add_argument("--kv-blocks", type=int, default=None,
                   help="decode KV budget per instance in 16-token blocks (default: the modeled KV capacity)")


def add_simulate_args(p: argparse.ArgumentParser) -> None:
    add_workload_args(p)
    add_cluster_args(p)
    g = p.add_argument_group("results")
    g.add_argument("--goodput", nargs="+", default=None, metavar="NAME:MS", help="SLOs, e.g. ttft:2000 tpot:50")
    g.add_argument("--save-result", default=None, metavar="PATH", help="write the JSON result")
    g.add_argument("--plot", default=None, metavar="PNG", help="draw utilization, queues, KV usage and transfers")
    g.add_argument("--json", action="store_true", help="print the JSON summary instead of the tables")


def add_plan_args(p: argparse.ArgumentParser) -> None:
    add_workload_args(p)
    g = p.add_argument_group("plan")
    add_scheduler_args(g)
    g.add_argument("--ttft-p90", default="2s", help="SLO on the 90th percentile of TTFT (e.g. 2s, 800ms)")
    g.add_argument("--tpot-p90", default="50ms", help="SLO on the 90th percentile of TPOT")
    g.add_argument("--hardware", default="H20-141G,H20-96G", help="GPU profiles to consider, comma separated "
                   "(H20-96G, H20-141G, H800, H100, H200)")
    g.add_argument("--max-nodes", type=int, default=4, help="8-GPU nodes at most per deployment")
    g.add_argument("--probes", type=int, default=6, help="simulations per candidate (rate bisection)")
    g.add_argument("--no-dp-attention", action="store_true", help="only tensor-parallel attention")
    g.add_argument("--tp-sizes", default="8", help="attention TP degrees to try, comma separated (e.g. 8,4)")
    g.add_argument("--instance-sizes", type=int, default=2,
                   help="instance sizes per hardware: the N smallest whole-node sizes that hold the model")
    g.add_argument("--sensitivity", action="store_true",
                   help="re-evaluate the winner and the baseline under the timing model's known uncertainties")
    g.add_argument("--json", action="store_true", help="print the result as JSON")
    g.add_argument("--save-result", default=None, metavar="PATH")
    p.set_defaults(num_prompts=200, max_num_seqs=256)
