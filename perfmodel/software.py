"""What each serving stack adds on top of the kernels' roofline: its per-kernel, per-step and per-request overheads
(fallbacks; the fitted figures live in data/calibration.json), its GEMM kernels and its prefill chunk."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class SoftwareProfile:
    """What the serving stack adds on top of the kernels' roofline. Overheads here are the fallback only: the fitted
    figures per GPU family live in data/calibration.json (``python -m perfmodel.fit``)."""

    name: str
    kernel_overhead_s: float  # per kernel launched (perfmodel/kernels.py)
    step_overhead_s: float
    request_overhead_s: float = 0.0
    gemm_efficiency_scale: float = 1.0  # e.g. weight-only int4 kernels reach less of the GEMM peak
    prefill_chunk_tokens: int = 0  # chunked prefill: tokens per forward step (0: whole prompts)
    fitted_as: str = ""  # whose fitted overheads it uses (an older release of the same stack); "": its own
    fp8_kernels: str = "cutlass"  # block-scaled FP8 GEMMs of a tensor-parallel deployment (hardware.FP8_KERNELS)

    def with_chunk(self, tokens: int) -> "SoftwareProfile":
        return replace(self, prefill_chunk_tokens=tokens)


SOFTWARE: dict[str, SoftwareProfile] = {
    # SGLang-class stack with CUDA graphs, DeepGEMM / fused MoE kernels, FlashMLA.
    "sglang": SoftwareProfile("sglang", kernel_overhead_s=3e-6, step_overhead_s=0.5e-3, request_overhead_s=5e-3),
    # SGLang 0.4 (early 2025): the same kernels' costs as far as any public run tells them apart; its scheduling
    # defaults differ (engine/sched/profiles.py).
    "sglang-0.4": SoftwareProfile("sglang-0.4", kernel_overhead_s=3e-6, step_overhead_s=0.5e-3,
                                  request_overhead_s=5e-3, fitted_as="sglang", fp8_kernels="triton"),
    # SGLang v0.5.23: no public run of it is in the tables to fit, so SGLang's fitted figures; its scheduling defaults
    # differ (engine/sched/profiles.py).
    "sglang-0.5.23": SoftwareProfile("sglang-0.5.23", kernel_overhead_s=3e-6, step_overhead_s=0.5e-3,
                                     request_overhead_s=5e-3, fitted_as="sglang"),
    # vLLM V1 serving the FP8 checkpoint (CUDA graphs, FlashMLA): fitted on its own runs.
    "vllm": SoftwareProfile("vllm", kernel_overhead_s=3e-6, step_overhead_s=1.0e-3, request_overhead_s=18e-3),
    # vLLM v0.34: asynchronous scheduling is on by default (vllm/config/vllm.py; max_concurrent_batches = 2): the
    # scheduler prepares step N+1 on the CPU while step N runs, so the CPU share of the per-step time is hidden behind
    # the GPU and what stays is the GPU's (sampling, graph launch): priced as SGLang's, whose overlap scheduler does
    # the same. The fitted per-kernel and per-request figures are v0.11's (no v0.34 run is in the tables to fit).
    "vllm-0.34": SoftwareProfile("vllm-0.34", kernel_overhead_s=3e-6, step_overhead_s=0.5e-3, request_overhead_s=18e-3,
                                 fitted_as="vllm"),
    # vLLM 0.7 (the V0 engine): vLLM's costs, V0's scheduling.
    "vllm-0.7": SoftwareProfile("vllm-0.7", kernel_overhead_s=3e-6, step_overhead_s=1.0e-3,
                                request_overhead_s=18e-3, fitted_as="vllm", fp8_kernels="triton"),
    # vLLM serving AWQ (int4 weight-only) DeepSeek-R1: slower MoE kernels and more per-request overhead.
    "vllm-awq": SoftwareProfile("vllm-awq", kernel_overhead_s=8e-6, step_overhead_s=1.0e-3,
                                request_overhead_s=18e-3, prefill_chunk_tokens=8192),
}
