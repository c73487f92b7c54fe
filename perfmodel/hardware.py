"""GPU profiles: datasheet peaks, usable memory and the efficiencies measured on real machines.

Dense throughput only (datasheets quote 2x with structured sparsity). Sources: [V] vendor datasheet, [M] public
measurement, [E] estimate. docs/perf-model.md lists every source.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdserve.perfmodel.gpu_generations import tensor_precision

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
# - rowwise: FP8 weights with one scale per output channel (or tensor), no block promotion: FBGEMM's row-wise FP8 GEMM
#   reaches 1,083-1,141 TFLOP/s on an H100 (500 W) at 8,192-65,536 rows (github.com/pytorch/FBGEMM pull request 2546,
#   "fp8 row gemm only", 2024-04): 1,100 of 1,979.
FP8_KERNELS = {"deepgemm": 0.60, "cutlass": 490 / 1979, "triton": 406 / 1979, "rowwise": 1100 / 1979}
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
    fp4_flops: float = 0.0  # dense FP4 tensor-core FLOP/s (0: no FP4 tensor cores, pre-Blackwell)
    generation: str = "hopper"  # kernel-efficiency class: ampere, ada, hopper, blackwell, cdna3 (gpu_generations.py)
    nvlink_domain: int = 8  # GPUs one NVLink fabric joins (72 in a GB200 NVL72 rack; 1 without NVLink)
    # a fabric of point-to-point links instead of a switch (AMD's Infinity Fabric mesh): one link's bytes/s, both
    # directions; a group of n GPUs then talks over n - 1 of them. 0: switched (NVSwitch), any group at the full rate
    peer_link_bandwidth: float = 0.0
    fp8_gemm_ceiling: float = 1.0  # the most of the FP8 peak any FP8 GEMM reaches here, where one is measured [M]

    def flops(self, precision: str) -> float:
        return {"fp8": self.fp8_flops, "fp4": self.fp4_flops}.get(precision) or self.bf16_flops

    def tensor_precision(self, weight_precision: str) -> str:
        """The tensor-core precision GEMMs on weights stored as ``weight_precision`` run at here: native where the
        part has it, else weight-only (dequantized to BF16 in the kernel, e.g. Marlin): see gpu_generations.py."""
        return tensor_precision(self, weight_precision)

    def fp8_gemm_efficiency(self, kernels: str = "deepgemm") -> float:
        if self.generation == "blackwell":  # block scales applied inside the MMA: no promotion on the CUDA cores
            return self.gemm_efficiency
        derived = fp8_block_gemm_efficiency(self.gemm_efficiency, self.fp8_flops, self.sms, FP8_KERNELS[kernels])
        return min(derived, self.fp8_gemm_ceiling)

    def group_bandwidth(self, ranks: int) -> float:
        """Bytes/s (both directions) one GPU has towards the others of a group of ``ranks`` GPUs in its node: the whole
        NVLink rate through a switch; on a point-to-point mesh only the links to the group's other members."""
        if not self.peer_link_bandwidth or ranks < 2:
            return self.nvlink_bandwidth
        return min(self.nvlink_bandwidth, self.peer_link_bandwidth * (ranks - 1))

    def gemm_rate(self, precision: str, kernels: str = "deepgemm") -> float:
        """FLOP/s a large GEMM on weights of this precision really reaches (FP8: on that family of block-scaled
        kernels; a precision the part lacks runs weight-only at its BF16 rate)."""
        native = self.tensor_precision(precision)
        if native == "fp4":
            return self.fp4_flops * self.gemm_efficiency
        if native == "fp8":
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


# Beyond the Hopper SXM parts. Dense rates are half the datasheets' sparse figures. [V] vendor datasheet, [M] public
# measurement, [E] estimate (no public figure; set to the generation's class, gpu_generations.py). Datasheets:
# HGX B200 and GB200 NVL72: nvidia.com/en-us/data-center/hgx/ and nvidia.com/en-us/data-center/gb200-nvl72/;
# A100: nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf;
# L40S: nvidia.com/en-us/data-center/l40s/; H100 PCIe/NVL: nvidia.com/en-us/data-center/h100/; H200 NVL:
# nvidia.com/en-us/data-center/h200/. The L20 (sold in China) has no NVIDIA page: its figures are the OEM listings'
# (48 GB GDDR6, 864 GB/s, 119.5 FP16 TFLOP/s dense, 239 FP8) and cuBLAS reaches 105-115 of its 119.5 FP16 TFLOP/s
# [M] (github.com/DefTruth/CUDA-Learn-Notes hgemm/README.md). Usable memory [M] as nvidia-smi reports: 183,359 MiB
# for a B200, 46,068 MiB for an L20 or L40S (ECC on); the A100 figures (81,920 / 40,960 MiB) and the GB200's are [E].
# Parts without NVLink (L20, L40S) talk over PCIe Gen4 x16: 64 GB/s bidirectional stands in for NVLink.
PCIE4_X16 = 64 * GIGA
MORE_GPUS: dict[str, GPU] = {
    # B200 (HGX, 1,000 W): 2.25 / 4.5 / 9 PF BF16 / FP8 / FP4 dense [V]; 180 GB HBM3e at 8 TB/s [V]; NVLink 5
    # 1.8 TB/s [V]; 148 SMs [V]. Efficiencies [E]: Blackwell class (GEMM 0.70, HBM 0.80, attention 0.60).
    "B200": GPU("B200", 2250 * TERA, 4500 * TERA, 183_359 * MIB, 8.0e12, 1800 * GIGA, 148, gemm_efficiency=0.70,
                hbm_efficiency=0.80, attention_efficiency=0.60, fp4_flops=9000 * TERA, generation="blackwell"),
    # GB200 (NVL72 rack, per GPU): 2.5 / 5 / 10 PF dense [V]; 186 GB HBM3e at 8 TB/s [V] (13.4 TB and 576 TB/s per 72
    # GPUs); NVLink 5 1.8 TB/s across all 72 GPUs of the rack [V]; usable memory [E] 186 GB less the B200's 2%.
    "GB200": GPU("GB200", 2500 * TERA, 5000 * TERA, 186e9 * 0.98, 8.0e12, 1800 * GIGA, 148, gemm_efficiency=0.70,
                 hbm_efficiency=0.80, attention_efficiency=0.60, fp4_flops=10000 * TERA, generation="blackwell",
                 nvlink_domain=72),
    # A100 SXM 80 GB: 312 BF16 TFLOP/s dense [V], no FP8; 2,039 GB/s HBM2e [V]; NVLink 3 600 GB/s [V]; 108 SMs [V].
    # Efficiencies [E]: Ampere class (GEMM 0.80, HBM 0.85, FlashAttention-2 0.60).
    "A100-80G": GPU("A100-80G", 312 * TERA, 0.0, 81_920 * MIB, 2.039e12, 600 * GIGA, 108, gemm_efficiency=0.80,
                    hbm_efficiency=0.85, attention_efficiency=0.60, generation="ampere"),
    # A100 SXM 40 GB: the same compute [V]; 1,555 GB/s HBM2 [V].
    "A100-40G": GPU("A100-40G", 312 * TERA, 0.0, 40_960 * MIB, 1.555e12, 600 * GIGA, 108, gemm_efficiency=0.80,
                    hbm_efficiency=0.85, attention_efficiency=0.60, generation="ampere"),
    # L40S: 362 BF16 / 733 FP8 TFLOP/s dense [V]; 48 GB GDDR6 at 864 GB/s [V]; no NVLink; 142 SMs [V].
    "L40S": GPU("L40S", 362 * TERA, 733 * TERA, 46_068 * MIB, 864e9, PCIE4_X16, 142, gemm_efficiency=0.70,
                hbm_efficiency=0.85, attention_efficiency=0.55, generation="ada", nvlink_domain=1),
    # L20: 119.5 BF16 / 239 FP8 TFLOP/s dense [V, OEM]; 48 GB GDDR6 at 864 GB/s [V, OEM]; no NVLink; 92 SMs [V, OEM];
    # GEMM efficiency 0.92 [M] (cuBLAS, above): like the H20, a compute-cut part whose clocks hold under load.
    "L20": GPU("L20", 119.5 * TERA, 239 * TERA, 46_068 * MIB, 864e9, PCIE4_X16, 92, gemm_efficiency=0.92,
               hbm_efficiency=0.85, attention_efficiency=0.70, generation="ada", nvlink_domain=1),
    # H100 PCIe: 756 / 1,513 TFLOP/s dense [V]; 80 GB HBM2e at 2.0 TB/s [V]; NVLink bridge 600 GB/s (pairs) [V];
    # 114 SMs [V].
    "H100-PCIe": GPU("H100-PCIe", 756 * TERA, 1513 * TERA, GB80_BYTES, 2.0e12, 600 * GIGA, 114, nvlink_domain=2),
    # H100 NVL: 835 / 1,671 TFLOP/s dense [V]; 94 GB HBM3 at 3.9 TB/s [V]; NVLink bridge 600 GB/s (pairs) [V].
    "H100-NVL": GPU("H100-NVL", 835 * TERA, 1671 * TERA, 94e9 * 0.98, 3.9e12, 600 * GIGA, 132, nvlink_domain=2),
    # H200 NVL: 835 / 1,671 TFLOP/s dense [V]; 141 GB HBM3e at 4.8 TB/s [V]; NVLink bridge 900 GB/s, 2- or 4-way [V].
    "H200-NVL": GPU("H200-NVL", 835 * TERA, 1671 * TERA, GB141_BYTES, 4.8e12, 900 * GIGA, 132, nvlink_domain=4),
    # AMD Instinct MI300X (750 W; amd.com/en/products/accelerators/instinct/mi300/mi300x.html): 1,307.4 BF16 / 2,614.9
    # FP8 TFLOP/s dense [V]; 192 GB HBM3 at 5.3 TB/s [V]; 304 compute units (the SMs' counterpart) [V]; seven Infinity
    # Fabric links of 128 GB/s to the seven other GPUs of an 8-GPU platform, 896 GB/s [V] (a full mesh, no switch).
    # Usable memory [M]: rocm-smi reports 205,822,885,888 bytes. Measured [M]: hipBLASLt's best BF16 GEMM 708 TFLOP/s
    # (0.54 of peak; AMD's "max-achievable FLOPs", rocm.blogs.amd.com measuring-max-achievable-flops-part2, 2025-02:
    # the clock falls to 1.2 GHz of 2.1 under dense matrix work), FP8 1,273 (0.487: the ceiling of any FP8 GEMM
    # here); BabelStream 0.81 of the HBM peak ("AMD MI300X GPU Performance Analysis", arXiv 2025). Attention [E]:
    # Hopper's 0.70 scaled by the GEMM ratio (0.54 / 0.75): no public FlashMLA-class figure for ROCm's MLA kernels of
    # early 2025 (Triton decode, CK prefill). The links are point to point: a TP2 pair shares one 128 GB/s link.
    "MI300X": GPU("MI300X", 1307.4 * TERA, 2614.9 * TERA, 205_822_885_888, 5.3e12, 896 * GIGA, 304,
                  gemm_efficiency=0.54, hbm_efficiency=0.81, attention_efficiency=0.50, generation="cdna3",
                  peer_link_bandwidth=128 * GIGA, fp8_gemm_ceiling=1273 / 2614.9),
}
# The names users type for the same parts.
GPU_ALIASES = {"h100-sxm": "H100", "h100-80g": "H100", "h200-sxm": "H200", "h200-141g": "H200", "h20": "H20-96G",
               "h20-3e": "H20-141G", "b200-180g": "B200", "gb200-nvl72": "GB200", "a100": "A100-80G",
               "a100-sxm-80g": "A100-80G", "a100-sxm-40g": "A100-40G", "a100-80gb": "A100-80G",
               "a100-40gb": "A100-40G", "l20-48g": "L20", "l40s-48g": "L40S", "h100-pcie-80g": "H100-PCIe",
               "h100-nvl-94g": "H100-NVL", "h200-nvl-141g": "H200-NVL", "mi300x-192g": "MI300X",
               "instinct-mi300x": "MI300X"}
GPUS.update(MORE_GPUS)


def gpu(name: str) -> GPU:
    key = {k.lower(): k for k in GPUS}.get(GPU_ALIASES.get(name.strip().lower(), name.strip()).lower())
    if key is None:
        raise ValueError(f"hardware: unknown GPU {name!r}; known: {', '.join(GPUS)}")
    return GPUS[key]
