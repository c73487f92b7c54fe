"""The model profiles ``--deployment model=NAME`` names, each built from its published config.json (the fields the
timing model reads, copied with the file's URL), and the names users guess for them (Hugging Face ids too).

DeepSeek-V3/R1 from its config (MLA, 3 dense + 58 MoE layers, 256 routed + 1 shared experts, top-8, FP8 weights);
the other families through the same parser ``--model-config PATH`` uses (hf_config.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pdserve.perfmodel.hf_config import profile_from_config
from pdserve.perfmodel.model_configs import PUBLISHED
from pdserve.perfmodel.profile import BYTES_PER_PARAM, WEIGHT_PRECISIONS, ModelProfile

__all__ = ["BYTES_PER_PARAM", "WEIGHT_PRECISIONS", "ModelProfile", "MODELS", "DEEPSEEK_R1", "model_profile",
           "resolve_model_name", "Published", "CATALOG"]

DEEPSEEK_R1 = ModelProfile(
    name="deepseek-r1", hidden=7168, n_layers=61, vocab=129280, attention="mla", n_heads=128,
    q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
    n_dense_layers=3, dense_intermediate=18432, n_routed_experts=256, n_shared_experts=1, moe_intermediate=2048,
    experts_per_token=8, n_expert_groups=8, topk_groups=4, biased_routing=True, max_context=163840,
    weight_precision="fp8",
    kv_precision="bf16", hf_id="deepseek-ai/DeepSeek-R1",
    source="https://huggingface.co/deepseek-ai/DeepSeek-R1/blob/main/config.json",
)


def llama_dense(name: str, hidden: int, n_layers: int, n_heads: int, n_kv_heads: int, ffn: int, vocab: int,
                max_context: int, tied: bool = False, precision: str = "bf16") -> ModelProfile:
    return ModelProfile(name=name, hidden=hidden, n_layers=n_layers, vocab=vocab, attention="gqa", n_heads=n_heads,
                        n_kv_heads=n_kv_heads, head_dim=hidden // n_heads, n_dense_layers=n_layers,
                        dense_intermediate=ffn, max_context=max_context, tied_embeddings=tied,
                        weight_precision=precision, kv_precision=precision, fp8_block_scaled=False)


@dataclass(frozen=True)
class Published:
    """A profile's published facts the tests hold its arithmetic to: total and active parameters (billions)."""

    total_b: float
    active_b: float
    source: str
    tolerance: float = 0.01  # relative; wider where the count includes a layer the profile leaves out (MTP)


MODELS: dict[str, ModelProfile] = {
    "deepseek-r1": DEEPSEEK_R1,
    "deepseek-v3": DEEPSEEK_R1,  # identical architecture
    "deepseek-r1-awq": replace(DEEPSEEK_R1, name="deepseek-r1-awq", weight_precision="int4",
                               hf_id="cognitivecomputations/DeepSeek-R1-AWQ"),
    "smollm2-135m": llama_dense("smollm2-135m", 576, 30, 9, 3, 1536, 49152, 8192, tied=True),
    "llama-3-70b": llama_dense("llama-3-70b", 8192, 80, 64, 8, 28672, 128256, 8192),
    "llama-3-8b": llama_dense("llama-3-8b", 4096, 32, 32, 8, 14336, 128256, 8192),
}
CATALOG: dict[str, Published] = {
    # DeepSeek-V3 technical report (arXiv 2412.19437): 671B total, 37B activated per token (MTP module excluded)
    "deepseek-r1": Published(671, 37, "https://arxiv.org/abs/2412.19437", 0.01),
}
ALIASES: dict[str, tuple[str, str]] = {  # lower-cased name -> (profile, weight precision or "" for its own)
    "deepseek-ai/deepseek-r1": ("deepseek-r1", ""), "deepseek-ai/deepseek-r1-0528": ("deepseek-r1", ""),
    "deepseek-ai/deepseek-v3": ("deepseek-v3", ""), "deepseek-ai/deepseek-v3-0324": ("deepseek-v3", ""),
    "cognitivecomputations/deepseek-r1-awq": ("deepseek-r1-awq", ""),
    "meta-llama/meta-llama-3-70b-instruct": ("llama-3-70b", ""), "meta-llama/meta-llama-3-8b-instruct": ("llama-3-8b", ""),
    "huggingfacetb/smollm2-135m-instruct": ("smollm2-135m", ""),
}
for _name, _entry in PUBLISHED.items():
    MODELS[_name] = replace(profile_from_config(_entry["config"], _name, _entry["config_url"], _entry["hf_id"]),
                            fp8_block_scaled=_entry["fp8_block_scaled"])
    CATALOG[_name] = Published(*_entry["params"])
    for _alias, _precision in _entry["aliases"].items():
        ALIASES[_alias.lower()] = (_name, _precision)


def resolve_model_name(name: str) -> tuple[str, str]:
    """(profile name, weight precision its name implies or "") for a profile name, a Hugging Face id or a common
    spelling (case-insensitive; an "-Instruct" suffix is ignored). ValueError lists the known names."""
    key = name.strip().lower()
    for candidate in (key, key.removesuffix("-instruct"), key.split("/")[-1], key.split("/")[-1].removesuffix("-instruct")):
        if candidate in MODELS:
            return candidate, ""
        if candidate in ALIASES:
            return ALIASES[candidate]
    raise ValueError(f"model: unknown profile {name!r}; known: {', '.join(MODELS)} (or their Hugging Face ids, e.g. "
                     "Qwen/Qwen3-235B-A22B; any other model: --model-config PATH/config.json)")


def model_profile(name: str) -> ModelProfile:
    profile, precision = resolve_model_name(name)
    m = MODELS[profile]
    return m.with_weight_precision(precision) if precision else m
