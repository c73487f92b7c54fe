"""GPU profiles: datasheet peaks, usable memory and the efficiencies measured on real machines.

Dense throughput only (datasheets quote 2x with structured sparsity). Sources: [V] vendor datasheet, [M] public
measurement, [E] estimate. docs/perf-model.md lists every source.
"""

from __future__ import annotations

from dataclasses import dataclass

TERA = 1e12
GIGA = 1e9
MIB = 1024 * 1024

# Fractions of the FP8 dense peak that block-scaled (128x128) FP8 GEMMs of DeepSeek's shapes reach on H800/H100-class
# SMs, per kernel family [M]:
# - deepgemm: DeepGEMM runs M=4096 GEMMs with N x K = 7168 x 2048 at 1,159-1,204 TFLOP/s and 24576 x 1536 at
#   1,166-1,204 TFLOP/s on H800, 0.59-0.61 of 1,979 (github.com/deepseek-ai/DeepGEMM pull requests 74 and 81,
#   2025-03/04). SGLang's DeepEP deployments run their GEMMs on it.
# - cutlass: the block-scaled CUTLASS kernel tensor-parallel serving runs (SGLang v0.5.3 dispatches its FP8 linear
#   layers to it before DeepGEMM, python/sglang/srt/layers/quantization/fp8_utils.py; vLLM since pull request 23280)
#   reaches 457-490 TFLOP/s on H100 at 4,096-8,192 rows of DeepSeek's N=2112 K=7168 shape, Triton's 403-407
#   (github.com/vllm-project/vllm pull request 23280, 2025-09): 0.248 of 1,979.
# - triton: that Triton kernel, 406 TFLOP/s in the same table (0.205): the block-scaled FP8 path of early-2025
#   releases (SGLang v0.4.3 had neither DeepGEMM nor the CUTLASS kernel).
# The H100/H200 share the H800's SMs and rates; no H20 figure is published, so the H20's are derived from these by what
# limits them (fp8_block_gemm_efficiency).
FP8_KERNELS = {"deepgemm": 0.60, "cutlass": 490 / 1979, "triton": 406 / 1979}
H800_BF16_GEMM_EFFICIENCY = 0.75  # the same part's large BF16 GEMMs (the default below)
H800_FP8_TFLOPS_PER_SM = 1979 / 132


def fp8_block_gemm_efficiency(bf16_efficiency: float, fp8_flops: float, sms: int, h800_efficiency: float) -> float:
    """Fraction of the FP8 peak a block-scaled FP8 GEMM reaches on a part, from what the same kernel reaches on an
    H800 (``h800_efficiency``) and the part's own BF16 efficiency.

    Block-scaled FP8 GEMMs lose to BF16 (DeepGEMM: 0.60 against 0.75 of peak on H800) because every 128-wide K block
    is promoted into FP32 accumulators and scaled on the CUDA cores (github.com/deepseek-ai/DeepGEMM README,
    "promotion"). That work is per SM and does not shrink with the tensor cores' rate. An H20 runs its tensor cores at
    3.8 FP8 TFLOP/s per SM against the H800's 15.0, so the same promotion costs a quarter as much of each GEMM's time:
    of the H800's extra time per ideal FLOP (1/0.60 - 1/0.75 = 0.33 for DeepGEMM), a part keeps that x (its FP8
    FLOP/s per SM / the H800's), added to its own BF16 efficiency's."""
    promotion = (1 / h800_efficiency - 1 / H800_BF16_GEMM_EFFICIENCY) * \
        (fp8_flops / TERA / sms) / H800_FP8_TFLOPS_PER_SM
    return 1.0 / (1.0 / bf16_efficiency + promotion)


@dataclass(frozen=True)
class GPU:
    name: str
    bf16_flops: float  # dense FLOP/s
    fp8_flops: float
    hbm_bytes: float  # usable bytes as nvidia-smi reports them (not the marketing figure)
    hbm_bandwidth: float  # bytes/s
    nvlink_bandwidth: float  # bytes/s per GPU, bidirectional
    sms: int
    # fractions of peak that real kernels reach [M]
    gemm_efficiency: float = 0.75  # large BF16 GEMMs
    hbm_efficiency: float = 0.82  # streaming reads (weights, KV)
    attention_efficiency: float = 0.70  # FlashAttention / FlashMLA compute
    nic_bandwidth: float = 45 * GIGA  # per 400 Gb/s NIC, achieved [M]
    nics: int = 8  # per 8-GPU server

    def flops(self, precision: str) -> float:
        return self.fp8_flops if precision == "fp8" else self.bf16_flops

    def fp8_gemm_efficiency(self, kernels: str = "deepgemm") -> float:
        return fp8_block_gemm_efficiency(self.gemm_efficiency, self.fp8_flops, self.sms, FP8_KERNELS[kernels])

    def gemm_rate(self, precision: str, kernels: str = "deepgemm") -> float:
        """FLOP/s a large GEMM of this precision really reaches (FP8: on that family of block-scaled kernels)."""
        if precision == "fp8":
            return self.fp8_flops * self.fp8_gemm_efficiency(kernels)
        return self.bf16_flops * self.gemm_efficiency

    def nic_bandwidth_per_gpu(self, gpus_per_node: int = 8) -> float:
        return self.nic_bandwidth * self.nics / gpus_per_node


# Usable memory [M]: nvidia-smi reports 97,871 MiB for the H20 sold as 96 GB, 143,771 MiB for the 141 GB parts
# (H20-3e, H200; sgl-project/sglang issue 3196) and 81,559 MiB for the 80 GB H100/H800 (sgl-project/sglang issue 5429).
H20_96_BYTES = 97_871 * MIB
GB141_BYTES = 143_771 * MIB
GB80_BYTES = 81_559 * MIB

GPUS: dict[str, GPU] = {
    # H20 96 GB: 148 / 296 TFLOP/s [V], 4.0 TB/s [V], NVLink 900 GB/s [V], 78 SMs [V], 4 x 400 Gb/s NICs per server
    # (LMSYS blog 2025-09-26, Ant Group). Measured [M]: BF16 GEMM 136-142 TFLOP/s (0.92), HBM copy ~3.3 TB/s (0.82),
    # FlashMLA ~125-130 TFLOP/s (0.86).
    "H20-96G": GPU("H20-96G", 148 * TERA, 296 * TERA, H20_96_BYTES, 4.0e12, 900 * GIGA, 78,
                   gemm_efficiency=0.92, hbm_efficiency=0.82, attention_efficiency=0.86, nics=4),
    # H20 141 GB ("H20-3e"): same compute [V]; 4.8 TB/s is an estimate [E] (unpublished; assumed equal to H200).
    "H20-141G": GPU("H20-141G", 148 * TERA, 296 * TERA, GB141_BYTES, 4.8e12, 900 * GIGA, 78,
                    gemm_efficiency=0.92, hbm_efficiency=0.82, attention_efficiency=0.86, nics=4),
    # H800 SXM: 989 / 1979 TFLOP/s [V], 80 GB, 3.35 TB/s [V], NVLink 400 GB/s [V], 132 SMs, 8 x 400 Gb/s NICs.
    "H800": GPU("H800", 989 * TERA, 1979 * TERA, GB80_BYTES, 3.35e12, 400 * GIGA, 132),
    # H100 SXM: 989 / 1979 TFLOP/s [V], 80 GB, 3.35 TB/s [V], NVLink 900 GB/s [V], 132 SMs.
    "H100": GPU("H100", 989 * TERA, 1979 * TERA, GB80_BYTES, 3.35e12, 900 * GIGA, 132),
    # H200 SXM: H100 compute [V], 141 GB HBM3e at 4.8 TB/s [V], NVLink 900 GB/s [V].
    "H200": GPU("H200", 989 * TERA, 1979 * TERA, GB141_BYTES, 4.8e12, 900 * GIGA, 132),
}


def gpu(name: str) -> GPU:
    key = {k.lower(): k for k in GPUS}.get(name.lower())
    if key is None:
        raise ValueError(f"hardware: unknown GPU {name!r}; known: {', '.join(GPUS)}")
    return GPUS[key]
