"""Model profiles for the timing model: parameter counts per operator group, derived from each model's configuration.

DeepSeek-V3/R1 from its config (MLA, 3 dense + 58 MoE layers, 256 routed + 1 shared experts, top-8, FP8 weights);
Llama-style dense models from hidden size, layers, heads and FFN width.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

BYTES_PER_PARAM = {"fp8": 1.0, "bf16": 2.0, "fp16": 2.0, "int4": 0.5 + 2.0 / 128, "fp32": 4.0}  # int4: + group scales


@dataclass(frozen=True)
class ModelProfile:
    name: str
    hidden: int
    n_layers: int
    vocab: int
    attention: str  # "mla" or "gqa"
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
    kv_precision: str = "bf16"

    # --- parameter counts ---------------------------------------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        """Projection parameters of one attention layer."""
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
                + self.embedding_params + head)

    @property
    def active_params(self) -> int:
        """Parameters multiplied per token (embedding lookup excluded, head included)."""
        moe = self.n_moe_layers * (self.experts_per_token + self.n_shared_experts) * self.expert_params
        return (self.n_layers * self.attention_params + self.n_dense_layers * self.dense_ffn_params + moe
                + self.embedding_params)

    @property
    def bytes_per_weight(self) -> float:
        return BYTES_PER_PARAM[self.weight_precision]

    # --- KV cache -----------------------------------------------------------------------------------------------------
    @property
    def kv_values_per_token_per_layer(self) -> int:
        """MLA caches the compressed latent plus the shared RoPE key; GQA caches K and V per KV head."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.n_kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> float:
        return self.n_layers * self.kv_values_per_token_per_layer * BYTES_PER_PARAM[self.kv_precision]

    def with_kv_precision(self, precision: str) -> "ModelProfile":
        """The same model with its KV cache stored as ``precision`` (e.g. "fp8": 35,136 B/token for DeepSeek)."""
        if precision not in BYTES_PER_PARAM:
            raise ValueError(f"kv_precision: {precision!r} is not one of {', '.join(BYTES_PER_PARAM)}")
        return replace(self, kv_precision=precision)

    # --- attention arithmetic -----------------------------------------------------------------------------------------
    def attention_flops(self, new_tokens: int, context_before: int, absorbed: bool) -> float:
        """FLOPs of the attention core (scores and weighted values) for ``new_tokens`` queries, all layers, all heads.

        Query j attends to context_before + j + 1 keys. MLA decode runs 'absorbed' (scores against the 576-wide latent,
        values from the 512-wide latent); MLA prefill runs expanded per-head K/V (192-wide q.k, 128-wide values).
        """
        pairs = new_tokens * context_before + new_tokens * (new_tokens + 1) / 2
        if self.attention == "mla":
            if absorbed:
                width = (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            else:
                width = (self.qk_nope_head_dim + self.qk_rope_head_dim) + self.v_head_dim
        else:
            width = 2 * self.head_dim
        return 2.0 * self.n_layers * self.n_heads * width * pairs


DEEPSEEK_R1 = ModelProfile(
    name="deepseek-r1", hidden=7168, n_layers=61, vocab=129280, attention="mla", n_heads=128,
    q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
    n_dense_layers=3, dense_intermediate=18432, n_routed_experts=256, n_shared_experts=1, moe_intermediate=2048,
    experts_per_token=8, n_expert_groups=8, topk_groups=4, max_context=163840, weight_precision="fp8",
    kv_precision="bf16",
)


def llama_dense(name: str, hidden: int, n_layers: int, n_heads: int, n_kv_heads: int, ffn: int, vocab: int,
                max_context: int, tied: bool = False, precision: str = "bf16") -> ModelProfile:
    return ModelProfile(name=name, hidden=hidden, n_layers=n_layers, vocab=vocab, attention="gqa", n_heads=n_heads,
                        n_kv_heads=n_kv_heads, head_dim=hidden // n_heads, n_dense_layers=n_layers,
                        dense_intermediate=ffn, max_context=max_context, tied_embeddings=tied,
                        weight_precision=precision, kv_precision=precision)


MODELS: dict[str, ModelProfile] = {
    "deepseek-r1": DEEPSEEK_R1,
    "deepseek-v3": DEEPSEEK_R1,  # identical architecture
    "deepseek-r1-awq": replace(DEEPSEEK_R1, name="deepseek-r1-awq", weight_precision="int4"),
    "smollm2-135m": llama_dense("smollm2-135m", 576, 30, 9, 3, 1536, 49152, 8192, tied=True),
    "llama-3-70b": llama_dense("llama-3-70b", 8192, 80, 64, 8, 28672, 128256, 8192),
    "llama-3-8b": llama_dense("llama-3-8b", 4096, 32, 32, 8, 14336, 128256, 8192),
}


def model_profile(name: str) -> ModelProfile:
    key = name.lower()
    if key not in MODELS:
        raise ValueError(f"model: unknown profile {name!r}; known: {', '.join(MODELS)}")
    return MODELS[key]
