"""``pdserve perf``: the modeled timing of one scenario on a modeled deployment."""

from __future__ import annotations

import argparse
import json

from pdserve.perfmodel.deployment import KV_PRECISIONS, add_deployment_flag, deployment_from_args
from pdserve.worker.clock import KV_LINKS


def cmd_list(a: argparse.Namespace) -> int:
    """The profiles and how many held-out public measurements check each (step rows priced, serving rows counted)."""
    from pdserve.perfmodel.catalog_report import format_catalog, gpu_rows, model_rows
    from pdserve.sim.coverage import held_out_counts, serving_cells, step_cells

    per_model, per_gpu = held_out_counts(step_cells(), serving_cells(replay=False))
    models, gpus = model_rows(per_model), gpu_rows(per_gpu)
    print(json.dumps({"models": models, "gpus": gpus}, indent=2) if a.json else format_catalog(models, gpus))
    return 0


def cmd_perf(a: argparse.Namespace) -> int:
    if a.list:
        return cmd_list(a)
    from pdserve.perfmodel.report import format_report, scenario_report

    try:
        lens = [int(x) for x in a.prefill_lens.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"prefill_lens: {a.prefill_lens!r} is not a comma-separated list of integers") from None
    from pdserve.common.scheduling import modeled_scheduling
    from pdserve.engine.sched.scheduler import SchedulerRole

    if a.calibration:
        from pdserve.perfmodel.calibration import apply_calibration

        apply_calibration(a.calibration, a.deployment or None)

    # the memory its software leaves for weights + KV (SGLang's --mem-fraction-static, ...), as the workers size it
    deployment = modeled_scheduling(deployment_from_args(a), SchedulerRole.BOTH).deployment
    report = scenario_report(deployment, lens, a.decode_batch, a.context_len, a.link)
    print(json.dumps(report, indent=2) if a.json else format_report(report, show_explain=a.explain))
    return 0


def register(sub) -> None:
    p = sub.add_parser("perf", help="modeled timing of a scenario on the modeled hardware")
    add_deployment_flag(p, help="the modeled deployment, KEY=V,.. over the default (deepseek-r1 on 8 x H20-141G, "
                                "TP8 EP8, sglang); keys: model (deepseek-r1, qwen3-235b-a22b, gpt-oss-120b, "
                                "llama-3.1-70b, ... or a Hugging Face id; --list shows all), hardware (H20-96G, H200, "
                                "B200, GB200, A100-80G, L20, L40S, MI300X, ...), weight_precision (bf16, fp8, fp4, mxfp4, "
                                "int4; default the checkpoint's), gpus, tp, ep, dp_attention, dp (DP attention groups), "
                                "software "
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
    p.add_argument("--list", action="store_true",
                   help="print the model and GPU profiles with their validation status, and exit")
    p.add_argument("--calibration", default=None, metavar="CAL.json",
                   help="the model fitted to your own runs (pdserve calibrate)")
    p.set_defaults(func=cmd_perf)
