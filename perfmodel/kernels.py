"""How many GPU kernels a forward pass launches per layer, counted from the model's architecture: what the fitted
per-kernel overhead (overheads.py) is multiplied by.

Why count kernels: the serving stacks' fixed cost per layer is launch gaps and small kernels that never reach their
roofline (norms, RoPE, cache writes, routing, quantization of activations), so it grows with the kernels a layer
launches, not with the layer. A DeepSeek-V3 MoE layer (MLA's five projections, FP8 activation quantization before
each FP8 GEMM, grouped top-k routing, a shared expert) launches about three times the kernels of a Llama layer; a
per-layer figure fitted on DeepSeek-R1 and charged to Llama 3.1 8B priced 32 layers at 6.9 ms where the whole step
measures about 7.

The counts follow the forward of each architecture in vLLM's model code (vllm/model_executor/models/llama.py,
qwen3.py, qwen3_moe.py, deepseek_v2.py, gpt_oss.py at v0.11.0) with CUDA graphs, one fused residual-add + RMSNorm
before attention and before the FFN. Collectives (all-reduce, DeepEP dispatch and combine) are left out: their
latency is priced by communication.py. Per-step kernels (embedding, final norm, head, sampling) belong to the per-step
overhead. Another stack fuses some of these (SGLang's fused q/k norm + RoPE, its fused MoE gate); its fitted
per-kernel figure absorbs the difference on the models it is fitted on.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdserve.perfmodel.hardware import GPU
from pdserve.perfmodel.profile import ModelProfile

NORM = 1  # fused residual add + RMSNorm before each of a layer's two blocks
GQA_ATTENTION = 5  # QKV projection, RoPE, KV-cache write, attention, output projection
QK_NORM = 2  # RMSNorm on queries, RMSNorm on keys (Qwen3, GLM-4.5)
# fused q_a/kv_a down-projection, q_a and kv_a norms, q_b projection, RoPE, cache write, W_UK, FlashMLA's attention
# and its split-KV combine, W_UV, output projection
MLA_ATTENTION = 11
DENSE_FFN = 3  # gate/up projection, SiLU-and-mul, down projection
# router GEMM, expert alignment (sort tokens by expert), the two expert GEMMs, SiLU-and-mul, the weighted sum
MOE_FFN = 6
TOPK = 1  # softmax + top-k fused
GROUPED_TOPK = 2  # sigmoid scores with a correction bias, then (group-limited) top-k: vLLM's grouped_topk
SHARED_EXPERT = 4  # gate/up, SiLU-and-mul, down, add to the routed output


@dataclass(frozen=True)
class LayerKernels:
    """Kernels of one layer's attention block and of each kind of FFN block, norms included."""

    attention: int
    dense_ffn: int
    moe_ffn: int

    def per_forward(self, m: ModelProfile) -> int:
        return m.n_layers * self.attention + m.n_dense_layers * self.dense_ffn + m.n_moe_layers * self.moe_ffn


def quantizes_activations(precision: str, gpu: GPU | None) -> bool:
    """Whether GEMMs on weights of ``precision`` quantize their input first (FP8 block-scaled, NVFP4 W4A4): only
    where the GPU runs that precision natively; weight-only kernels (INT4, and FP8/FP4 on a part without them) take
    the BF16 activations as they are. ``gpu`` None: a part that runs FP8 natively."""
    native = gpu.tensor_precision(precision) if gpu is not None else ("fp8" if precision == "fp8" else "bf16")
    return native in ("fp8", "fp4")


def layer_kernels(m: ModelProfile, gpu: GPU | None = None) -> LayerKernels:
    """The kernels of ``m``'s layers on ``gpu``. A GEMM that quantizes its activations launches one more kernel
    before it (the absorbed MLA products run in BF16)."""
    fp8 = quantizes_activations(m.weight_precision, gpu)
    expert_fp8 = quantizes_activations(m.expert_weight_precision, gpu)
    if m.attention == "mla":
        attention = NORM + MLA_ATTENTION + (3 if fp8 else 0)  # fused q_a/kv_a, q_b, output projection
    else:
        attention = NORM + GQA_ATTENTION + (QK_NORM if m.qk_norm else 0) + (2 if fp8 else 0)  # QKV, output
    dense = NORM + DENSE_FFN + (2 if fp8 else 0)
    moe = 0
    if m.n_routed_experts:
        topk = GROUPED_TOPK if m.biased_routing else TOPK
        moe = NORM + MOE_FFN + topk + (2 if expert_fp8 else 0)
        if m.n_shared_experts:
            moe += SHARED_EXPERT + (2 if fp8 else 0)
    return LayerKernels(attention, dense, moe)


def kernels_per_forward(m: ModelProfile, gpu: GPU | None = None) -> int:
    return layer_kernels(m, gpu).per_forward(m)


def kernels_per_layer(m: ModelProfile, gpu: GPU | None = None) -> float:
    """The mean over the model's layers (what a per-layer overhead figure of the same stack corresponds to)."""
    return kernels_per_forward(m, gpu) / m.n_layers
