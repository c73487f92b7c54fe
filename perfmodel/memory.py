"""Does it fit: weights and KV cache per GPU, and the largest batch x context the rest of HBM holds."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from perfmodel.hardware import GPU
from perfmodel.models import BYTES_PER_PARAM, ModelProfile
from perfmodel.parallel import ParallelConfig

RESERVED_FRACTION = 0.10  # activations, CUDA graphs, allocator slack, communication buffers


@dataclass
class MemoryFit:
    hbm_bytes_per_gpu: float
    weight_bytes_per_gpu: float
    reserved_bytes_per_gpu: float
    kv_bytes_free_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    max_kv_tokens: int  # across the whole deployment (all attention replicas)
    fits: bool

    def max_batch(self, context_len: int) -> int:
        return self.max_kv_tokens // max(1, context_len)

    def as_dict(self) -> dict:
        return asdict(self)


def weight_bytes_per_gpu(m: ModelProfile, p: ParallelConfig) -> float:
    wb = m.bytes_per_weight
    attention = m.n_layers * m.attention_params * wb / p.attention_shards
    dense = m.n_dense_layers * m.dense_ffn_params * wb / p.tp
    shared = m.n_moe_layers * m.n_shared_experts * m.expert_params * wb / p.tp
    routed = m.n_moe_layers * m.n_routed_experts * m.expert_params * wb / p.expert_split
    embeddings = m.embedding_params * BYTES_PER_PARAM["bf16"] * (1 if m.tied_embeddings else 2) / p.tp
    return attention + dense + shared + routed + embeddings


def memory_fit(m: ModelProfile, gpu: GPU, p: ParallelConfig) -> MemoryFit:
    weights = weight_bytes_per_gpu(m, p)
    reserved = RESERVED_FRACTION * gpu.hbm_bytes
    free = max(0.0, gpu.hbm_bytes - weights - reserved)
    # MLA's latent is shared by all heads: every tensor-parallel rank keeps all of it. GQA splits KV heads.
    per_token = m.kv_bytes_per_token / (1 if m.attention == "mla" else min(p.attention_shards, m.n_kv_heads))
    tokens_per_replica = int(free // per_token)
    return MemoryFit(gpu.hbm_bytes, weights, reserved, free, per_token,
                     tokens_per_replica * p.attention_replicas, weights + reserved < gpu.hbm_bytes)
