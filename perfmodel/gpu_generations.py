"""Kernel-efficiency classes per GPU generation: which tensor-core precisions a part runs natively and what a
weight precision it lacks falls back to.

- ampere (A100): BF16/FP16 and INT8 tensor cores, no FP8: FP8, FP4 and INT4 checkpoints run weight-only (Marlin
  kernels dequantize to BF16 in the GEMM; vLLM docs "FP8 W8A8": "Ampere GPUs are supported for W8A16 (weight-only
  FP8) utilizing Marlin kernels", docs.vllm.ai/en/latest/features/quantization/fp8.html).
- ada (L20, L40S): FP8 tensor cores (sm_89) without Hopper's WGMMA; FP4 runs weight-only.
- hopper (H20, H100, H200, H800): FP8 via WGMMA, block-scaled FP8 pays the CUDA-core promotion (hardware.py);
  FP4/MXFP4 run weight-only (MXFP4 MoE through Triton or Marlin with BF16 activations).
- blackwell (B200, GB200): FP4 and FP8 tensor cores with block scales applied inside the MMA (tcgen05,
  UE8M0/E4M3 scale factors), so block-scaled FP8 runs at the part's GEMM efficiency; NVFP4 weights run W4A4 at the FP4
  rate; MXFP4 experts (GPT-OSS) run with MXFP8 activations at the FP8 rate (FlashInfer's trtllm-gen MoE, which
  vLLM's GPT-OSS recipe enables with VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8).
- cdna3 (AMD MI300X): FP8 matrix cores (E4M3FNUZ; vLLM and SGLang rescale E4M3FN checkpoints at load) whose MFMA
  instructions take no block scales, so block-scaled FP8 pays Hopper's promotion, on the vector ALUs; no FP4 (CDNA 4,
  MI355X, adds it): FP4/MXFP4 run weight-only.
"""

from __future__ import annotations

from typing import Protocol

GENERATIONS = ("ampere", "ada", "hopper", "blackwell", "cdna3")


class _Part(Protocol):
    fp8_flops: float
    fp4_flops: float
    generation: str


def tensor_precision(part: _Part, weight_precision: str) -> str:
    """"fp4", "fp8" or "bf16": the tensor-core precision a GEMM on ``weight_precision`` weights runs at."""
    if weight_precision == "fp4":
        return "fp4" if part.fp4_flops else "bf16"
    if weight_precision == "mxfp4":
        return "fp8" if part.fp4_flops and part.fp8_flops else "bf16"
    if weight_precision == "fp8":
        return "fp8" if part.fp8_flops else "bf16"
    return "bf16"  # bf16, fp16, int4 (weight-only AWQ/GPTQ everywhere)
