"""What the timing model knows about a model: parameter counts per operator group, KV bytes per token, attention
arithmetic. The profiles themselves live in models.py (built from each model's published config.json)."""

from __future__ import annotations

from dataclasses import dataclass, replace

# Bytes per stored weight, scales included: int4 (AWQ/GPTQ) one BF16 scale per 128 values; fp4 (NVFP4) one FP8 scale
# per 16 values; mxfp4 (OCP microscaling) one E8M0 scale per 32 values; fp8 block scales (one per 128x128) are noise.
BYTES_PER_PARAM = {"fp8": 1.0, "bf16": 2.0, "fp16": 2.0, "int4": 0.5 + 2.0 / 128, "fp32": 4.0,
                   "fp4": 0.5 + 1.0 / 16, "mxfp4": 0.5 + 1.0 / 32}
WEIGHT_PRECISIONS = ("bf16", "fp8", "fp4", "mxfp4", "int4")
KV_CACHE_PRECISIONS = ("bf16", "fp8")


@dataclass(frozen=True)
class ModelProfile:
    name: str
    hidden: int
    n_layers: int
    vocab: int
    attention: str  # "mla" or "gqa" (MHA is GQA with n_kv_heads == n_heads)
    n_heads: int
    # GQA
    n_kv_heads: int = 0
    head_dim: int = 0
    # MLA
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # feed-forward
    n_dense_layers: int = 0  # leading layers with a dense FFN (all layers for a dense model)
    dense_intermediate: int = 0
    n_routed_experts: int = 0
    n_shared_experts: int = 0
    moe_intermediate: int = 0
    experts_per_token: int = 0
    n_expert_groups: int = 1  # group-limited routing: each token picks topk_groups of n_expert_groups groups first
    topk_groups: int = 1
    max_context: int = 0  # longest sequence the model serves (0: unchecked)
    tied_embeddings: bool = False
    weight_precision: str = "bf16"  # of the linear layers
    # FP8 weights scaled per 128 x 128 block (DeepSeek, Qwen3, GLM, Kimi releases), whose GEMMs promote every block's
    # partial sums on the CUDA cores; False: one scale per output channel (Meta's Llama FP8 releases, fbgemm_fp8), a
    # plain scaled GEMM (hardware.FP8_KERNELS "rowwise")
    fp8_block_scaled: bool = True
    kv_precision: str = "bf16"
    expert_precision: str = ""  # of the routed experts when it differs (GPT-OSS: MXFP4 experts, BF16 attention)
    sliding_window: int = 0  # keys a sliding-window layer attends to (0: none)
    n_sliding_layers: int = 0  # layers with sliding-window attention (the rest attend to the whole context)
    attention_sinks: bool = False  # a learned per-head sink logit (GPT-OSS): one more score per head, no KV
    qk_norm: bool = False  # RMSNorm on queries and keys before RoPE (Qwen3, GLM-4.5): two more kernels a layer
    biased_routing: bool = False  # sigmoid expert scores with a correction bias (DeepSeek-V3, Kimi-K2, GLM-4.5)
    hf_id: str = ""  # the Hugging Face repository of the published checkpoint
    source: str = ""  # where every field above comes from

    # --- precisions ---------------------------------------------------------------------------------------------------
    @property
    def checkpoint_precision(self) -> str:
        """The precision users name the checkpoint by: its experts' for a model that quantizes only them."""
        return self.expert_precision or self.weight_precision

    @property
    def expert_weight_precision(self) -> str:
        return self.expert_precision or self.weight_precision

    @property
    def bytes_per_weight(self) -> float:
        return BYTES_PER_PARAM[self.weight_precision]

    @property
    def expert_bytes_per_weight(self) -> float:
        return BYTES_PER_PARAM[self.expert_weight_precision]

    def with_weight_precision(self, precision: str) -> "ModelProfile":
        """The same model served with its linear layers stored as ``precision``; the checkpoint's own precision
        keeps its layout (GPT-OSS "mxfp4": MXFP4 experts, BF16 attention), any other applies to every linear layer."""
        if precision not in WEIGHT_PRECISIONS:
            raise ValueError(f"weight_precision: {precision!r} is not one of {', '.join(WEIGHT_PRECISIONS)}")
        if precision == self.checkpoint_precision:
            return self
        return replace(self, weight_precision=precision, expert_precision="")

    def with_kv_precision(self, precision: str) -> "ModelProfile":
        """The same model with its KV cache stored as ``precision`` (e.g. "fp8": 35,136 B/token for DeepSeek)."""
        if precision not in KV_CACHE_PRECISIONS:
            raise ValueError(f"kv_precision: {precision!r} is not one of {', '.join(KV_CACHE_PRECISIONS)}")
        return replace(self, kv_precision=precision)

    # --- parameter counts ---------------------------------------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        """Projection parameters of one attention layer (biases left out: under 0.1% of any profile)."""
        h = self.hidden
        if self.attention == "mla":
            qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = h * self.q_lora_rank + self.q_lora_rank * self.n_heads * qk_head
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + \
                self.kv_lora_rank * self.n_heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + self.n_heads * self.v_head_dim * h
        kv_width = self.n_kv_heads * self.head_dim
        return h * self.n_heads * self.head_dim * 2 + 2 * h * kv_width

    @property
    def attention_replicated_params(self) -> int:
        """The fused q_a / kv_a down-projection (7168 x 2112 for DeepSeek): SGLang keeps it whole on every TP rank."""
        if self.attention != "mla":
            return 0
        return self.hidden * (self.q_lora_rank + self.kv_lora_rank + self.qk_rope_head_dim)

    @property
    def attention_sharded_params(self) -> int:
        return self.attention_params - self.attention_replicated_params

    @property
    def absorbed_params(self) -> int:
        """kv_b_proj, which absorbed MLA decode applies per query as BF16 copies (w_kc, w_vc) next to the FP8 original."""
        if self.attention != "mla":
            return 0
        return self.kv_lora_rank * self.n_heads * (self.qk_nope_head_dim + self.v_head_dim)

    @property
    def router_params(self) -> int:
        """Router gate of one MoE layer (kept in BF16, replicated)."""
        return self.n_routed_experts * self.hidden

    @property
    def dense_ffn_params(self) -> int:
        return 3 * self.hidden * self.dense_intermediate

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden * self.moe_intermediate

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers if self.n_routed_experts else 0

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        moe = self.n_moe_layers * (self.n_routed_experts + self.n_shared_experts) * self.expert_params
        head = 0 if self.tied_embeddings else self.embedding_params
        return (self.n_layers * self.attention_params + self.n_dense_layers * self.dense_ffn_params + moe
                + self.n_moe_layers * self.router_params + self.embedding_params + head)

    @property
    def active_params(self) -> int:
        """Parameters multiplied per token (embedding lookup excluded, head included)."""
        moe = self.n_moe_layers * (self.experts_per_token + self.n_shared_experts) * self.expert_params
        return (self.n_layers * self.attention_params + self.n_dense_layers * self.dense_ffn_params + moe
                + self.embedding_params)

    # --- KV cache -----------------------------------------------------------------------------------------------------
    @property
    def kv_values_per_token_per_layer(self) -> int:
        """MLA caches the compressed latent plus the shared RoPE key; GQA caches K and V per KV head."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.n_kv_heads * self.head_dim

    @property
    def n_full_layers(self) -> int:
        return self.n_layers - (self.n_sliding_layers if self.sliding_window else 0)

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes every cached token costs in the layers that keep the whole context. A sliding-window layer keeps
        only its window per sequence (:attr:`kv_window_bytes`), as vLLM's hybrid KV allocator and SGLang's SWA pool
        store it."""
        return self.n_full_layers * self.kv_values_per_token_per_layer * BYTES_PER_PARAM[self.kv_precision]

    @property
    def kv_sliding_bytes_per_token(self) -> float:
        if not self.sliding_window:
            return 0.0
        return self.n_sliding_layers * self.kv_values_per_token_per_layer * BYTES_PER_PARAM[self.kv_precision]

    @property
    def kv_window_bytes(self) -> float:
        """Most bytes one sequence holds in the sliding-window layers."""
        return self.kv_sliding_bytes_per_token * self.sliding_window

    def kv_bytes_for(self, context: int) -> float:
        """KV bytes one sequence of ``context`` tokens holds (and a decode step reads)."""
        return self.kv_bytes_per_token * context + self.kv_sliding_bytes_per_token * min(context, self.sliding_window)

    # --- attention arithmetic -----------------------------------------------------------------------------------------
    def attention_flops(self, new_tokens: int, context_before: int, absorbed: bool) -> float:
        """FLOPs of the attention core (scores and weighted values) for ``new_tokens`` queries, all layers, all heads.

        Query j attends to context_before + j + 1 keys (at most the window in a sliding-window layer). MLA decode
        runs 'absorbed' (scores against the 576-wide latent, values from the 512-wide latent); MLA prefill runs
        expanded per-head K/V (192-wide q.k, 128-wide values).
        """
        pairs = new_tokens * context_before + new_tokens * (new_tokens + 1) / 2
        if self.attention == "mla":
            if absorbed:
                width = (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            else:
                width = (self.qk_nope_head_dim + self.qk_rope_head_dim) + self.v_head_dim
        else:
            width = 2 * self.head_dim
        layer_pairs = self.n_full_layers * pairs
        if self.sliding_window and self.n_sliding_layers:
            layer_pairs += self.n_sliding_layers * windowed_pairs(new_tokens, context_before, self.sliding_window)
        return 2.0 * self.n_heads * width * layer_pairs


def windowed_pairs(new_tokens: int, context_before: int, window: int) -> float:
    """Sum over the new queries at positions c+1 .. c+n of min(position, window): the (query, key) pairs of a
    sliding-window layer."""
    if new_tokens <= 0:
        return 0.0
    a, b = context_before + 1, context_before + new_tokens
    if b <= window:
        return (a + b) * new_tokens / 2
    if a > window:
        return float(new_tokens * window)
    return (a + window) * (window - a + 1) / 2 + (b - window) * window
