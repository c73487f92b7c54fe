"""``pdserve perf``: the modeled timing of one scenario on a modeled deployment."""

from __future__ import annotations

import argparse
import json

from pdserve.perfmodel.deployment import KV_PRECISIONS, add_deployment_flag, deployment_from_args
from pdserve.worker.clock import KV_LINKS


def cmd_perf(a: argparse.Namespace) -> int:
    from pdserve.perfmodel.report import format_report, scenario_report

    try:
        lens = [int(x) for x in a.prefill_lens.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"prefill_lens: {a.prefill_lens!r} is not a comma-separated list of integers") from None
    from pdserve.common.scheduling import modeled_scheduling
    from pdserve.engine.scheduler import Role

    # the memory its software leaves for weights + KV (SGLang's --mem-fraction-static, ...), as the workers size it
    deployment = modeled_scheduling(deployment_from_args(a), Role.DECODE).deployment
    report = scenario_report(deployment, lens, a.decode_batch, a.context_len, a.link)
    print(json.dumps(report, indent=2) if a.json else format_report(report, show_explain=a.explain))
    return 0


def register(sub) -> None:
    p = sub.add_parser("perf", help="modeled timing of a scenario on the modeled hardware")
    add_deployment_flag(p, help="the modeled deployment, KEY=V,.. over the default (deepseek-r1 on 8 x H20-141G, "
                                "TP8 EP8, sglang); keys: model (deepseek-r1, llama-3-70b, smollm2-135m, ...), "
                                "hardware (H20-96G, H20-141G, H800, H100, H200), gpus, tp, ep, dp_attention, software "
                                "(sglang, sglang-0.4, vllm, vllm-0.7, vllm-awq), kv_precision "
                                f"({', '.join(k for k in KV_PRECISIONS if k)}: fp8 halves DeepSeek's 70,272 B/token), "
                                "gpus_per_node, two_batch_overlap, mem_fraction (default: the software's)")
    p.add_argument("--prefill-lens", default="4096", help="prompt lengths prefilled together")
    p.add_argument("--decode-batch", type=int, default=32)
    p.add_argument("--context-len", type=int, default=2048)
    p.add_argument("--link", default="auto", choices=KV_LINKS,
                   help="KV hand-off path (auto: where the simulator places a prefill and a decode instance)")
    p.add_argument("--explain", action="store_true",
                   help="per operator group: FLOPs, bytes, the bound it hits, padding and imbalance factors")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_perf)
