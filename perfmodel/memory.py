"""Does it fit: weights and KV cache per GPU, and the largest batch x context the rest of HBM holds."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pdserve.perfmodel.hardware import GPU
from pdserve.perfmodel.models import BYTES_PER_PARAM, ModelProfile
from pdserve.perfmodel.parallel import ParallelConfig

# Activations, CUDA graphs, allocator slack, communication buffers: SGLang's default --mem-fraction-static leaves
# roughly this share of usable memory outside the weights + KV pool on 8-GPU Hopper nodes (0.897 on the 141 GB parts
# at TP8, v0.5.3). A deployment's mem_fraction (the scheduling profile's, or the user's) replaces it.
RESERVED_FRACTION = 0.10


@dataclass
class MemoryFit:
    hbm_bytes_per_gpu: float  # usable, as nvidia-smi reports
    weight_bytes_per_gpu: float
    reserved_bytes_per_gpu: float
    kv_bytes_free_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    max_kv_tokens: int  # across the whole deployment (all attention replicas)
    kv_tokens_per_replica: int  # what one attention replica (one DP rank, or the TP group) can hold
    fits: bool
    weights: dict[str, float]  # bytes per GPU by kind

    def max_batch(self, context_len: int) -> int:
        return self.max_kv_tokens // max(1, context_len)

    def as_dict(self) -> dict:
        return asdict(self)


def weight_breakdown(m: ModelProfile, p: ParallelConfig) -> dict[str, float]:
    """Bytes of weights each GPU really holds, by kind."""
    wb, bf16 = m.bytes_per_weight, BYTES_PER_PARAM["bf16"]
    shards = p.attention_shards
    w = {
        "attention_replicated": m.n_layers * m.attention_replicated_params * wb,
        "attention_split": m.n_layers * m.attention_sharded_params * wb / shards,
        "mla_absorbed_bf16": m.n_layers * m.absorbed_params * bf16 / shards,
        "dense_ffn": m.n_dense_layers * m.dense_ffn_params * wb / p.tp,
        "routed_experts": m.n_moe_layers * m.n_routed_experts * m.expert_params * m.expert_bytes_per_weight
        / p.expert_split,
        "router_gates": m.n_moe_layers * m.router_params * bf16 if m.n_routed_experts else 0.0,
        "embeddings_and_head": m.embedding_params * bf16 * (1 if m.tied_embeddings else 2)
        / (shards if p.dp_attention else p.tp),
    }
    shared_split = 1 if (p.ep > 1 and p.dp_attention) else p.tp
    w["shared_experts"] = m.n_moe_layers * m.n_shared_experts * m.expert_params * wb / shared_split
    return w


def weight_bytes_per_gpu(m: ModelProfile, p: ParallelConfig) -> float:
    return sum(weight_breakdown(m, p).values())


def kv_bytes_per_token_per_gpu(m: ModelProfile, p: ParallelConfig) -> float:
    # MLA's latent is shared by all heads: every tensor-parallel rank keeps all of it. GQA splits KV heads.
    return m.kv_bytes_per_token / (1 if m.attention == "mla" else min(p.attention_shards, m.n_kv_heads))


def memory_fit(m: ModelProfile, gpu: GPU, p: ParallelConfig, mem_fraction: float = 0.0) -> MemoryFit:
    """``mem_fraction``: the share of memory for weights + KV cache (SGLang's --mem-fraction-static); 0: 1 -
    RESERVED_FRACTION."""
    parts = weight_breakdown(m, p)
    weights = sum(parts.values())
    reserved = (1.0 - mem_fraction if mem_fraction else RESERVED_FRACTION) * gpu.hbm_bytes
    free = max(0.0, gpu.hbm_bytes - weights - reserved)
    per_token = kv_bytes_per_token_per_gpu(m, p)
    tokens_per_replica = int(free // per_token)
    return MemoryFit(gpu.hbm_bytes, weights, reserved, free, per_token, tokens_per_replica * p.attention_replicas,
                     tokens_per_replica, weights + reserved < gpu.hbm_bytes, parts)
