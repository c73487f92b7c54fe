"""``pdserve perf --list``: the model and GPU profiles, what each holds, and how much public measurement checks it."""

from __future__ import annotations

from pdserve.perfmodel.hardware import GPUS, TERA
from pdserve.perfmodel.models import CATALOG, MODELS
from pdserve.perfmodel.profile import ModelProfile


def _attention(m: ModelProfile) -> str:
    if m.attention == "mla":
        return f"MLA {m.n_heads}h"
    kind = "MHA" if m.n_kv_heads == m.n_heads else f"GQA {m.n_heads}q/{m.n_kv_heads}kv"
    if m.sliding_window:
        kind += f", SWA {m.sliding_window} on {m.n_sliding_layers}/{m.n_layers}"
    return kind + (", sinks" if m.attention_sinks else "")


def _ffn(m: ModelProfile) -> str:
    if not m.n_routed_experts:
        return f"dense x{m.n_layers}"
    shared = f"+{m.n_shared_experts}sh" if m.n_shared_experts else ""
    dense = f"{m.n_dense_layers} dense + " if m.n_dense_layers else ""
    return f"{dense}{m.n_moe_layers} MoE {m.n_routed_experts}{shared} top-{m.experts_per_token}"


def model_rows(held_out: dict[str, int]) -> list[dict]:
    out, seen = [], set()
    for name, m in MODELS.items():
        if id(m) in seen:
            continue  # deepseek-v3 is deepseek-r1's profile
        seen.add(id(m))
        out.append({"model": name, "hf_id": m.hf_id, "attention": _attention(m), "layers": _ffn(m),
                    "kv_bytes_per_token_bf16": m.with_kv_precision("bf16").kv_bytes_per_token,
                    "kv_bytes_per_token_fp8": m.with_kv_precision("fp8").kv_bytes_per_token,
                    "checkpoint": m.checkpoint_precision, "total_params_b": round(m.total_params / 1e9, 1),
                    "active_params_b": round(m.active_params / 1e9, 1), "published": name in CATALOG,
                    "held_out_rows": held_out.get(m.name, 0)})
    return out


def gpu_rows(held_out: dict[str, int]) -> list[dict]:
    return [{"gpu": name, "generation": g.generation, "bf16_tflops": g.bf16_flops / TERA,
             "fp8_tflops": g.fp8_flops / TERA, "fp4_tflops": g.fp4_flops / TERA, "memory_gb": g.hbm_bytes / 1e9,
             "hbm_tb_s": g.hbm_bandwidth / 1e12, "nvlink_gb_s": g.nvlink_bandwidth / 1e9,
             "nvlink_domain": g.nvlink_domain, "held_out_rows": held_out.get(name, 0)} for name, g in GPUS.items()]


def _rate(tflops: float) -> str:
    return f"{tflops:.0f}" if tflops else "-"


def _status(n: int) -> str:
    return f"{n} held-out rows" if n else "no public measurement checked"


def format_catalog(models: list[dict], gpus: list[dict]) -> str:
    lines = ["models (--deployment model=NAME, or its Hugging Face id; weight_precision=bf16|fp8|fp4|mxfp4|int4):",
             f"  {'name':<16} {'attention':<38} {'layers':<34} {'KV B/token bf16':>15} {'ckpt':>6} "
             f"{'params B':>13}  validation"]
    for r in models:
        lines.append(f"  {r['model']:<16} {r['attention']:<38} {r['layers']:<34} {r['kv_bytes_per_token_bf16']:>15,.0f} "
                     f"{r['checkpoint']:>6} {r['total_params_b']:>6}/{r['active_params_b']:<6}  "
                     f"{_status(r['held_out_rows'])}")
    lines += ["", "GPUs (--deployment hardware=NAME; dense TFLOP/s, usable memory):",
              f"  {'name':<10} {'class':<10} {'BF16':>6} {'FP8':>6} {'FP4':>6} {'GB':>6} {'TB/s':>5} "
              f"{'NVLink GB/s':>12}  validation"]
    for r in gpus:
        lines.append(f"  {r['gpu']:<10} {r['generation']:<10} {r['bf16_tflops']:>6.0f} {_rate(r['fp8_tflops']):>6} "
                     f"{_rate(r['fp4_tflops']):>6} {r['memory_gb']:>6.1f} {r['hbm_tb_s']:>5.2f} "
                     f"{r['nvlink_gb_s']:>7.0f} x{r['nvlink_domain']:<3}  {_status(r['held_out_rows'])}")
    lines += ["", "validation: held-out rows of perfmodel/data/published_measurements.csv and sim/data/serving_runs.csv; "
              "per model x GPU with their errors: python -m pdserve.sim.coverage (docs/validation.md)"]
    return "\n".join(lines)
