"""Published architectures: the fields of each model's config.json the timing model reads, copied from the file at
``config_url`` (hf_config.py turns them into a profile, exactly as ``--model-config`` does for a file on disk), its
published parameter counts with their source, and the names users call it by.

Pure data: any change here is checked by tests/unit/test_model_profiles.py against the parameter counts and KV bytes
per token the configs imply.
"""

from __future__ import annotations

HF = "https://huggingface.co/{}/blob/main/config.json"
CARD = "https://huggingface.co/{}"


def _entry(hf_id: str, config: dict, params: tuple, aliases: dict[str, str], fp8_block_scaled: bool = True) -> dict:
    """``fp8_block_scaled``: how the family's published FP8 checkpoint scales its weights (per 128 x 128 block, or
    per output channel), for a BF16 config served in FP8."""
    return {"hf_id": hf_id, "config_url": HF.format(hf_id), "config": config, "params": params,
            "aliases": {hf_id: "", **aliases}, "fp8_block_scaled": fp8_block_scaled}


_QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "decoder_sparse_step": 1, "mlp_only_layers": [],
              "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "num_experts": 128, "num_experts_per_tok": 8}
_LLAMA31 = {"architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "max_position_embeddings": 131072,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "num_key_value_heads": 8}
_GPT_OSS = {"architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "intermediate_size": 2880,
            "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "num_experts_per_tok": 4,
            "sliding_window": 128, "vocab_size": 201088, "max_position_embeddings": 131072,
            "tie_word_embeddings": False,
            "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
                "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}

PUBLISHED: dict[str, dict] = {
    "qwen3-235b-a22b": _entry("Qwen/Qwen3-235B-A22B", {
        **_QWEN3_MOE, "hidden_size": 4096, "num_hidden_layers": 94, "num_attention_heads": 64,
        "num_key_value_heads": 4, "intermediate_size": 12288, "moe_intermediate_size": 1536},
        (235, 22, CARD.format("Qwen/Qwen3-235B-A22B"), 0.03),
        {"qwen3-235b": "", "Qwen/Qwen3-235B-A22B-Instruct-2507": "", "Qwen/Qwen3-235B-A22B-FP8": "fp8",
         "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": "fp8", "qwen3-235b-a22b-fp8": "fp8"}),
    "qwen3-30b-a3b": _entry("Qwen/Qwen3-30B-A3B", {
        **_QWEN3_MOE, "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
        "num_key_value_heads": 4, "intermediate_size": 6144, "moe_intermediate_size": 768},
        (30.5, 3.3, CARD.format("Qwen/Qwen3-30B-A3B"), 0.03),
        {"qwen3-30b": "", "Qwen/Qwen3-30B-A3B-Instruct-2507": "", "Qwen/Qwen3-30B-A3B-FP8": "fp8",
         "qwen3-30b-a3b-fp8": "fp8"}),
    "qwen3-32b": _entry("Qwen/Qwen3-32B", {
        "architectures": ["Qwen3ForCausalLM"], "hidden_size": 5120, "num_hidden_layers": 64,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 25600,
        "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16"},
        (32.8, 32.8, CARD.format("Qwen/Qwen3-32B"), 0.03),
        {"Qwen/Qwen3-32B-FP8": "fp8", "qwen3-32b-fp8": "fp8"}),
    # Kimi-K2 is DeepSeek-V3's architecture with 384 experts, 64 heads, one dense layer and no expert groups
    "kimi-k2": _entry("moonshotai/Kimi-K2-Instruct", {
        "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
        "num_attention_heads": 64, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
        "n_group": 1, "topk_group": 1, "moe_layer_freq": 1, "vocab_size": 163840,
        "max_position_embeddings": 131072, "tie_word_embeddings": False,
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}},
        (1040, 32, "https://arxiv.org/abs/2507.20534", 0.02),
        {"kimi-k2-instruct": "", "moonshotai/Kimi-K2-Base": "", "moonshotai/Kimi-K2-Instruct-0905": "",
         "kimi-k2-0905": ""}),
    # GLM-4.5's 355B count includes its one MTP layer (num_nextn_predict_layers), which the profile leaves out
    "glm-4.5": _entry("zai-org/GLM-4.5", {
        "architectures": ["Glm4MoeForCausalLM"], "hidden_size": 5120, "num_hidden_layers": 92,
        "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
        "moe_intermediate_size": 1536, "n_routed_experts": 160, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "n_group": 1, "topk_group": 1, "use_qk_norm": True, "vocab_size": 151552,
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
        (355, 32, CARD.format("zai-org/GLM-4.5"), 0.03),
        {"glm4.5": "", "THUDM/GLM-4.5": "", "zai-org/GLM-4.5-FP8": "fp8", "glm-4.5-fp8": "fp8"}),
    "gpt-oss-120b": _entry("openai/gpt-oss-120b", {
        **_GPT_OSS, "num_hidden_layers": 36, "num_local_experts": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 18},
        (116.83, 5.13, "https://arxiv.org/abs/2508.10925", 0.01),
        {"gpt-oss:120b": ""}),
    "gpt-oss-20b": _entry("openai/gpt-oss-20b", {
        **_GPT_OSS, "num_hidden_layers": 24, "num_local_experts": 32,
        "layer_types": ["sliding_attention", "full_attention"] * 12},
        (20.91, 3.61, "https://arxiv.org/abs/2508.10925", 0.01),
        {"gpt-oss:20b": ""}),
    # Llama's FP8 releases scale per output channel (Meta's -FP8: quantization_config quant_method fbgemm_fp8) or per
    # tensor (NVIDIA's ModelOpt FP8), never per block
    "llama-3.1-8b": _entry("meta-llama/Llama-3.1-8B-Instruct", {
        **_LLAMA31, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "intermediate_size": 14336},
        (8.03, 8.03, CARD.format("meta-llama/Llama-3.1-8B-Instruct"), 0.01),
        {"meta-llama/Meta-Llama-3.1-8B-Instruct": "", "meta-llama/Llama-3.1-8B": "", "llama3.1-8b": "",
         "nvidia/Llama-3.1-8B-Instruct-FP8": "fp8"}, fp8_block_scaled=False),
    "llama-3.1-70b": _entry("meta-llama/Llama-3.1-70B-Instruct", {
        **_LLAMA31, "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
        "intermediate_size": 28672},
        (70.6, 70.6, CARD.format("meta-llama/Llama-3.1-70B-Instruct"), 0.01),
        {"meta-llama/Meta-Llama-3.1-70B-Instruct": "", "meta-llama/Llama-3.1-70B": "", "llama3.1-70b": "",
         "nvidia/Llama-3.1-70B-Instruct-FP8": "fp8"}, fp8_block_scaled=False),
    "llama-3.1-405b": _entry("meta-llama/Llama-3.1-405B-Instruct", {
        **_LLAMA31, "hidden_size": 16384, "num_hidden_layers": 126, "num_attention_heads": 128,
        "intermediate_size": 53248},
        (405, 405, CARD.format("meta-llama/Llama-3.1-405B-Instruct"), 0.01),
        {"meta-llama/Meta-Llama-3.1-405B-Instruct": "", "meta-llama/Llama-3.1-405B-Instruct-FP8": "fp8",
         "meta-llama/Meta-Llama-3.1-405B-Instruct-FP8": "fp8", "llama-3.1-405b-fp8": "fp8", "llama3.1-405b": ""},
        fp8_block_scaled=False),
}
