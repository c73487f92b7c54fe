"""A model profile from a Hugging Face style ``config.json`` (``--model-config PATH``, and every built-in profile).

The architectures below become a :class:`ModelProfile` without code. What the timing model cannot price is refused
with the field that stops it: linear attention or state-space layers, layer patterns other than full / sliding-window
attention, MoE layouts that skip layers in ways the profile cannot say, quantization methods it does not know, and
architecture names it has never seen.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pdserve.perfmodel.profile import ModelProfile

DENSE_GQA = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
MOE_GQA = ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM", "Glm4MoeForCausalLM",
           "GptOssForCausalLM")
MLA = ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM")
ARCHITECTURES = DENSE_GQA + MOE_GQA + MLA
QK_NORM = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")  # always; GLM-4 MoE says so with use_qk_norm
# sigmoid scores with a correction bias, which vLLM routes through grouped_topk whatever the number of groups
BIASED_ROUTING = ("DeepseekV3ForCausalLM", "Glm4MoeForCausalLM")
# Fields that announce layers without a KV cache of attention (state-space, linear attention, hybrid Mamba stacks).
NOT_ATTENTION_FIELDS = ("linear_num_value_heads", "linear_key_head_dim", "ssm_cfg", "mamba_d_state", "state_size",
                        "hybrid_override_pattern", "attn_layer_indices", "linear_attn_config")
LAYER_TYPES = ("full_attention", "sliding_attention")
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few kB; refuse anything that is not one


def _int(cfg: dict, key: str, default: Any = None, *alternatives: str) -> int:
    for k in (key,) + alternatives:
        if cfg.get(k) is not None:
            value = cfg[k]
            break
    else:
        if default is None:
            raise ValueError(f"model_config: {key} is missing")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"model_config: {key} must be a non-negative integer, got {value!r}")
    return value


def _fp8_block_scaled(cfg: dict) -> bool:
    """Whether an FP8 checkpoint scales its weights per block (``weight_block_size``) rather than per channel or
    tensor (fbgemm_fp8, per-tensor fp8, ModelOpt FP8)."""
    q = cfg.get("quantization_config")
    return not isinstance(q, dict) or bool(q.get("weight_block_size"))


def _precision(cfg: dict) -> tuple[str, str]:
    """(weight precision, expert precision or "") of the checkpoint the config describes."""
    q = cfg.get("quantization_config")
    if not q:
        dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
        if dtype not in ("bfloat16", "float16", "float32"):
            raise ValueError(f"model_config: torch_dtype {dtype!r} is not one of bfloat16, float16, float32")
        return "bf16", ""
    if not isinstance(q, dict):
        raise ValueError("model_config: quantization_config must be an object")
    method = str(q.get("quant_method", "")).lower()
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8", ""
    if method == "mxfp4":
        skipped = " ".join(str(m) for m in q.get("modules_to_not_convert") or [])
        return ("bf16", "mxfp4") if "self_attn" in skipped else ("mxfp4", "")
    if method in ("awq", "gptq") and int(q.get("bits", 4)) == 4:
        return "int4", ""
    if method == "modelopt" and "FP4" in str(q.get("quant_algo", "")).upper():
        return "fp4", ""
    if method == "modelopt" and "FP8" in str(q.get("quant_algo", "")).upper():
        return "fp8", ""
    raise ValueError(f"model_config: quantization_config.quant_method {method!r} is not modeled (known: fp8, "
                     "fbgemm_fp8, mxfp4, awq/gptq 4-bit, modelopt FP8/NVFP4)")


def _layer_pattern(cfg: dict, layers: int) -> tuple[int, int]:
    """(sliding window, sliding-window layers)."""
    types = cfg.get("layer_types")
    window = cfg.get("sliding_window") or 0
    if types is None:
        # Mistral-style configs give one window for every layer; Qwen2/3 set it but keep it off by default
        if window and cfg.get("use_sliding_window", True) and cfg.get("architectures", [""])[0].startswith("Mistral"):
            return int(window), layers
        return 0, 0
    if not isinstance(types, list) or len(types) != layers:
        raise ValueError(f"model_config: layer_types must list one type per layer ({layers})")
    unknown = sorted({t for t in types if t not in LAYER_TYPES})
    if unknown:
        raise ValueError(f"model_config: layer_types {', '.join(map(str, unknown))} is not modeled (only "
                         f"{', '.join(LAYER_TYPES)}: linear attention and state-space layers have no KV cache to price)")
    sliding = types.count("sliding_attention")
    if sliding and not window:
        raise ValueError("model_config: sliding_window is missing for the sliding_attention layers")
    return (int(window), sliding) if sliding else (0, 0)


def profile_from_config(cfg: dict, name: str = "", source: str = "", hf_id: str = "") -> ModelProfile:
    """The profile of the model a config.json describes; ValueError naming the field it cannot model."""
    if not isinstance(cfg, dict):
        raise ValueError("model_config: expected a JSON object")
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs:
        raise ValueError(f"model_config: architectures is missing; known: {', '.join(ARCHITECTURES)}")
    arch = str(archs[0])
    if arch not in ARCHITECTURES:
        raise ValueError(f"model_config: architectures {arch!r} is not modeled; known: {', '.join(ARCHITECTURES)}")
    for key in NOT_ATTENTION_FIELDS:
        if cfg.get(key) is not None:
            raise ValueError(f"model_config: {key} announces linear-attention or state-space layers, which are not "
                             "modeled")
    hidden = _int(cfg, "hidden_size")
    layers = _int(cfg, "num_hidden_layers")
    heads = _int(cfg, "num_attention_heads")
    if not (hidden and layers and heads):
        raise ValueError("model_config: hidden_size, num_hidden_layers and num_attention_heads must be positive")
    weight, expert = _precision(cfg)
    window, sliding = _layer_pattern(cfg, layers)
    common = dict(name=name or str(cfg.get("_name_or_path") or arch).split("/")[-1].lower(), hidden=hidden,
                  n_layers=layers, vocab=_int(cfg, "vocab_size"), n_heads=heads,
                  max_context=_int(cfg, "max_position_embeddings", 0),
                  tied_embeddings=bool(cfg.get("tie_word_embeddings", True)), weight_precision=weight,
                  expert_precision=expert, kv_precision="bf16", sliding_window=window, n_sliding_layers=sliding,
                  fp8_block_scaled=_fp8_block_scaled(cfg),
                  attention_sinks=arch == "GptOssForCausalLM",
                  qk_norm=arch in QK_NORM or bool(cfg.get("use_qk_norm")),
                  biased_routing=arch in BIASED_ROUTING, hf_id=hf_id or str(cfg.get("_name_or_path", "")),
                  source=source)
    inter = _int(cfg, "intermediate_size", 0)
    if arch in MLA:
        if cfg.get("q_lora_rank") is None:
            raise ValueError("model_config: q_lora_rank is null (MLA without a query down-projection) is not modeled")
        experts = _int(cfg, "n_routed_experts", 0)
        dense = _int(cfg, "first_k_dense_replace", 0) if experts else layers
        if experts and _int(cfg, "moe_layer_freq", 1) != 1:
            raise ValueError("model_config: moe_layer_freq other than 1 is not modeled")
        return ModelProfile(
            attention="mla", q_lora_rank=_int(cfg, "q_lora_rank"), kv_lora_rank=_int(cfg, "kv_lora_rank"),
            qk_nope_head_dim=_int(cfg, "qk_nope_head_dim"), qk_rope_head_dim=_int(cfg, "qk_rope_head_dim"),
            v_head_dim=_int(cfg, "v_head_dim"), n_dense_layers=dense, dense_intermediate=inter,
            n_routed_experts=experts, n_shared_experts=_int(cfg, "n_shared_experts", 0),
            moe_intermediate=_int(cfg, "moe_intermediate_size", 0),
            experts_per_token=_int(cfg, "num_experts_per_tok", 0), n_expert_groups=max(1, _int(cfg, "n_group", 1)),
            topk_groups=max(1, _int(cfg, "topk_group", 1)), **common)
    kv_heads = _int(cfg, "num_key_value_heads", heads)
    head_dim = _int(cfg, "head_dim", hidden // heads)
    if not kv_heads or heads % kv_heads:
        raise ValueError(f"model_config: num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}")
    gqa = dict(attention="gqa", n_kv_heads=kv_heads, head_dim=head_dim, **common)
    if arch in DENSE_GQA:
        return ModelProfile(n_dense_layers=layers, dense_intermediate=inter, **gqa)
    return ModelProfile(**_moe_fields(cfg, arch, layers, inter), **gqa)


def _moe_fields(cfg: dict, arch: str, layers: int, inter: int) -> dict:
    """Experts, routing and the dense layers of the MoE architectures that use GQA."""
    if arch == "Glm4MoeForCausalLM":
        return dict(n_dense_layers=_int(cfg, "first_k_dense_replace", 0), dense_intermediate=inter,
                    n_routed_experts=_int(cfg, "n_routed_experts"), n_shared_experts=_int(cfg, "n_shared_experts", 0),
                    moe_intermediate=_int(cfg, "moe_intermediate_size"),
                    experts_per_token=_int(cfg, "num_experts_per_tok"), n_expert_groups=max(1, _int(cfg, "n_group", 1)),
                    topk_groups=max(1, _int(cfg, "topk_group", 1)))
    if arch in ("MixtralForCausalLM", "GptOssForCausalLM"):
        return dict(n_routed_experts=_int(cfg, "num_local_experts", None, "num_experts"), moe_intermediate=inter,
                    experts_per_token=_int(cfg, "num_experts_per_tok", None, "experts_per_token"))
    # Qwen2-MoE / Qwen3-MoE
    if _int(cfg, "decoder_sparse_step", 1) != 1:
        raise ValueError("model_config: decoder_sparse_step other than 1 (MoE on every n-th layer) is not modeled")
    if cfg.get("mlp_only_layers"):
        raise ValueError("model_config: mlp_only_layers (dense layers between MoE layers) is not modeled")
    moe = _int(cfg, "moe_intermediate_size")
    shared = _int(cfg, "shared_expert_intermediate_size", 0)
    if shared and shared % moe:
        raise ValueError(f"model_config: shared_expert_intermediate_size {shared} is not a multiple of "
                         f"moe_intermediate_size {moe}")
    return dict(n_routed_experts=_int(cfg, "num_experts"), moe_intermediate=moe,
                experts_per_token=_int(cfg, "num_experts_per_tok"), n_shared_experts=shared // moe if moe else 0)


def load_model_config(path: str) -> ModelProfile:
    """``--model-config PATH``: the profile of a config.json on disk (a directory holding one is fine too)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        if p.stat().st_size > MAX_CONFIG_BYTES:
            raise ValueError(f"model_config: {p} is larger than {MAX_CONFIG_BYTES} bytes: not a config.json")
        cfg = json.loads(p.read_text())
    except OSError as exc:
        raise ValueError(f"model_config: cannot read {p}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"model_config: {p} is not JSON ({exc.msg} at line {exc.lineno})") from None
    return profile_from_config(cfg, source=str(p))
