"""Flags of ``pdserve simulate`` and ``pdserve plan``: the workload (workload/args.py, as ``pdserve bench serve``
names it), the cluster and the modeled deployment of each instance."""

from __future__ import annotations

import argparse

from pdserve.engine.sched.flags import add_scheduler_args
from pdserve.perfmodel.deployment import add_deployment_flag
from pdserve.workload.args import add_result_args, add_workload_args


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster")
    g.add_argument("--prefill", type=int, default=1, help="prefill instances")
    g.add_argument("--decode", type=int, default=1, help="decode instances")
    g.add_argument("--colocated", type=int, default=0, help="colocated instances instead of prefill + decode")
    add_deployment_flag(g, help="every instance's modeled deployment over the default (deepseek-r1, 8 x H20-141G, "
                                "TP8 EP8), e.g. hardware=H200,gpus=16,tp=8,ep=16,dp_attention=1,kv_precision=fp8")
    add_deployment_flag(g, "--prefill-deployment", help="prefill instances, over --deployment")
    add_deployment_flag(g, "--decode-deployment", help="decode instances, over --deployment")
    g.add_argument("--policy", default="cache_aware", help="prefill routing: round_robin, least_loaded, cache_aware")
    add_scheduler_args(g)
    g.add_argument("--prefill-max-num-seqs", type=int, default=None, help="prefill instances (default: --max-num-seqs)")
    g.add_argument("--prefix-cache-tokens", type=int, default=None,
                   help="cluster prefix cache in tokens (default: the prefill instances' KV capacity; 0: off)")
    g.add_argument("--kv-blocks", type=int, default=None,
                   help="decode KV budget per instance in 16-token blocks (default: the modeled KV capacity)")
    g.add_argument("--no-frontend-overhead", action="store_true",
                   help="requests reach the scheduler at once, without the software's fitted per-request latency "
                        "(HTTP, tokenization, the hops to the scheduler)")


def add_simulate_args(p: argparse.ArgumentParser) -> None:
    add_workload_args(p)
    p.set_defaults(model=None, ignore_eos=True)  # what build_requests reads; every request runs its full length
    add_cluster_args(p)
    g = add_result_args(p)
    g.add_argument("--plot", default=None, metavar="PNG", help="draw utilization, queues, KV usage and transfers")
    g.add_argument("--json", action="store_true", help="print the JSON summary instead of the tables")
    add_calibration_flag(g)
    g.add_argument("--explain", action="store_true",
                   help="where the time of a typical request went: front end, queue, prefill, waiting between tokens "
                        "(behind prefill steps, after preemption), decode steps, KV transfer")


def add_plan_args(p: argparse.ArgumentParser) -> None:
    add_workload_args(p)
    p.set_defaults(model=None, ignore_eos=True)
    g = p.add_argument_group("plan")
    add_scheduler_args(g)
    g.add_argument("--ttft-p90", default="2s", help="SLO on the 90th percentile of TTFT (e.g. 2s, 800ms)")
    g.add_argument("--tpot-p90", default="50ms", help="SLO on the 90th percentile of TPOT")
    g.add_argument("--hardware", default=None, help="GPU profiles to consider, comma separated (default: the "
                   "--deployment's hardware if it names one, else H20-141G,H20-96G; pdserve perf --list shows all)")
    add_deployment_flag(g, help="the model and software every candidate runs, KEY=V,.. (e.g. model=qwen3-235b-a22b,"
                        "hardware=H20-96G,weight_precision=fp8); the planner chooses gpus, tp, ep and dp_attention")
    g.add_argument("--max-nodes", type=int, default=4, help="8-GPU nodes at most per deployment")
    g.add_argument("--probes", type=int, default=None,
                   help="simulations per candidate (rate bisection; default 6); not with --request-rate")
    g.add_argument("--no-dp-attention", action="store_true", help="only tensor-parallel attention")
    g.add_argument("--tp-sizes", default="", help="attention TP degrees to try, comma separated (e.g. 8,4; default: "
                   "per instance the largest that divides the model's heads, within a node)")
    g.add_argument("--dp-group-sizes", default="1",
                   help="GPUs per DP attention group to try, comma separated (SGLang's --tp-size / --dp-size: 1 is "
                        "a group per GPU; e.g. 1,2,4)")
    g.add_argument("--instance-sizes", type=int, default=2,
                   help="instance sizes per hardware: the N smallest (1, 2, 4 GPUs, then whole nodes) that hold the "
                        "model")
    g.add_argument("--sensitivity", action="store_true",
                   help="re-evaluate the winner and the baseline under the timing model's known uncertainties")
    g.add_argument("--json", action="store_true", help="print the result as JSON")
    g.add_argument("--save-result", default=None, metavar="PATH",
                   help="write the result as JSON, with the recommended shape as its 'plan' block (pdserve up --plan)")
    add_calibration_flag(g)
    g = p.add_argument_group("target rate and launch configurations")
    g.description = ("--request-rate R (workload flag) turns the search into: the cheapest deployment, in GPUs then "
                     "nodes, that holds R requests/s within the SLOs")
    g.add_argument("--emit", default=None, metavar="TARGET,..",
                   help="write the recommended shape as launch configurations: sglang, vllm, dynamo (the real "
                        "engines' commands and manifests), k8s, compose (pdserve's own cluster, emulating the plan)")
    g.add_argument("--out", default=None, metavar="DIR", help="where --emit writes (default: ./plan-out)")
    p.set_defaults(num_prompts=200)


def add_calibration_flag(g) -> None:
    g.add_argument("--calibration", default=None, metavar="CAL.json",
                   help="the performance model fitted to your own runs (pdserve calibrate); applies to the "
                        "deployment it was fitted for")
