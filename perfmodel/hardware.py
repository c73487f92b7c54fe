"""GPU profiles: datasheet peaks and the efficiencies measured on real machines.

Dense throughput only (datasheets quote 2x with structured sparsity). Sources: [V] vendor datasheet, [M] public
measurement, [E] estimate; see ../shared/perf/hardware.md in the project's steering notes for the full list.
"""

from __future__ import annotations

from dataclasses import dataclass

TERA = 1e12
GIGA = 1e9


@dataclass(frozen=True)
class GPU:
    name: str
    bf16_flops: float  # dense FLOP/s
    fp8_flops: float
    hbm_bytes: float
    hbm_bandwidth: float  # bytes/s
    nvlink_bandwidth: float  # bytes/s per GPU, bidirectional
    sms: int
    # fractions of peak that real kernels reach [M]
    gemm_efficiency: float = 0.75  # large GEMMs
    hbm_efficiency: float = 0.82  # streaming reads (weights, KV)
    attention_efficiency: float = 0.70  # FlashAttention / FlashMLA compute
    internode_bandwidth: float = 45 * GIGA  # per 400 Gb/s NIC, measured [M]
    nics: int = 4

    def flops(self, precision: str) -> float:
        return self.fp8_flops if precision == "fp8" else self.bf16_flops


GPUS: dict[str, GPU] = {
    # H20 96 GB: 148 / 296 TFLOP/s [V], 4.0 TB/s [V], NVLink 900 GB/s [V], 78 SMs [V].
    # Measured [M]: BF16 GEMM 136-142 TFLOP/s (0.94), HBM copy ~3.3 TB/s (0.82), FlashMLA ~125-130 TFLOP/s (0.86).
    "H20-96G": GPU("H20-96G", 148 * TERA, 296 * TERA, 96e9, 4.0e12, 900 * GIGA, 78,
                   gemm_efficiency=0.92, hbm_efficiency=0.82, attention_efficiency=0.86),
    # H20 141 GB ("H20-3e"): same compute [V]; 4.8 TB/s is an estimate [E] (unpublished; assumed equal to H200).
    "H20-141G": GPU("H20-141G", 148 * TERA, 296 * TERA, 141e9, 4.8e12, 900 * GIGA, 78,
                    gemm_efficiency=0.92, hbm_efficiency=0.82, attention_efficiency=0.86),
    # H800 SXM: 989 / 1979 TFLOP/s [V], 80 GB, 3.35 TB/s [V], NVLink 400 GB/s [V], 132 SMs.
    "H800": GPU("H800", 989 * TERA, 1979 * TERA, 80e9, 3.35e12, 400 * GIGA, 132),
    # H100 SXM: 989 / 1979 TFLOP/s [V], 80 GB, 3.35 TB/s [V], NVLink 900 GB/s [V], 132 SMs.
    "H100": GPU("H100", 989 * TERA, 1979 * TERA, 80e9, 3.35e12, 900 * GIGA, 132),
    # H200 SXM: H100 compute [V], 141 GB HBM3e at 4.8 TB/s [V], NVLink 900 GB/s [V].
    "H200": GPU("H200", 989 * TERA, 1979 * TERA, 141e9, 4.8e12, 900 * GIGA, 132),
}


def gpu(name: str) -> GPU:
    key = {k.lower(): k for k in GPUS}.get(name.lower())
    if key is None:
        raise ValueError(f"hardware: unknown GPU {name!r}; known: {', '.join(GPUS)}")
    return GPUS[key]
