"""How long a forward step takes on the modeled deployment, from the batch that really ran.

Each operator group is a roofline on one GPU: time = max(FLOPs / (peak x efficiency), bytes / (HBM bandwidth x
efficiency)). Groups: attention projections, the attention core (reading the KV cache: MLA's 576-wide latent for
DeepSeek), dense FFNs, shared experts, routed experts (weights of the *distinct* experts a batch touches), the output
head. Communication per layer: tensor-parallel all-reduce (interpolated from measured NVLink figures) and
expert-parallel all-to-all. A fixed per-layer and per-step overhead (launches, norms, routing, scheduling, sampling)
comes from the software profile. Nothing overlaps except compute with memory inside one group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from perfmodel.hardware import GPU, GIGA, gpu as gpu_by_name
from perfmodel.models import BYTES_PER_PARAM, ModelProfile, model_profile
from perfmodel.parallel import ParallelConfig

MICRO = 1e-6

# One-shot custom all-reduce (message <= 4 MB) then NCCL ring, 8 GPUs on NVLink (900 GB/s class) [M].
ALLREDUCE_POINTS = [(2e3, 6e-6), (1e6, 17e-6), (4e6, 34e-6), (16e6, 111e-6), (64e6, 322e-6)]

# Expert-parallel all-to-all inside one node (DeepEP) [M]: low-latency mode, 128 tokens top-8 on an H20 node,
# dispatch + combine about 222 us for ~22 MB per rank -> ~110 GB/s plus launch latency; normal mode ~330 GB/s.
A2A_LATENCY_S = 25e-6
A2A_BANDWIDTH_DECODE = 110 * GIGA
A2A_BANDWIDTH_PREFILL = 330 * GIGA


@dataclass(frozen=True)
class SoftwareProfile:
    """What the serving stack adds on top of the kernels' roofline; calibrated against published runs."""

    name: str
    layer_overhead_s: float  # per layer per forward step: small kernels, launches, norms, routing
    step_overhead_s: float  # per forward step: scheduling, sampling, graph replay
    request_overhead_s: float = 0.0  # per request, on TTFT only: API, tokenization, queue hops
    gemm_efficiency_scale: float = 1.0  # e.g. weight-only int4 kernels reach less of the GEMM peak
    prefill_chunk_tokens: int = 0  # chunked prefill: tokens per forward step (0: whole prompts)


SOFTWARE: dict[str, SoftwareProfile] = {
    # SGLang-class stack with CUDA graphs and fused MoE kernels; layer overhead calibrated on h200-tp8-c4.
    "sglang": SoftwareProfile("sglang", layer_overhead_s=95e-6, step_overhead_s=0.5e-3, request_overhead_s=5e-3),
    # vLLM serving AWQ (int4 weight-only) DeepSeek-R1: slower MoE kernels and more per-request overhead;
    # calibrated on h100-awq-c1 (decode) and h100-awq-ttft-128 (request overhead), see perfmodel/validate.py.
    "vllm-awq": SoftwareProfile("vllm-awq", layer_overhead_s=215e-6, step_overhead_s=1.0e-3,
                                request_overhead_s=18e-3, gemm_efficiency_scale=1.0, prefill_chunk_tokens=8192),
}


@dataclass
class Breakdown:
    """Seconds per component of one modeled step (or request)."""

    parts: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
    steps: int = 1

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())

    def add(self, other: "Breakdown") -> "Breakdown":
        for k, v in other.parts.items():
            self.parts[k] = self.parts.get(k, 0.0) + v
        self.tokens += other.tokens
        self.steps += other.steps
        return self

    def as_dict(self) -> dict[str, float]:
        return dict(self.parts, total=self.seconds)


def allreduce_seconds(nbytes: float, gpu: GPU, ranks: int) -> float:
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    pts = ALLREDUCE_POINTS
    if nbytes <= pts[0][0]:
        t = pts[0][1]
    elif nbytes >= pts[-1][0]:
        t = pts[-1][1] * nbytes / pts[-1][0]
    else:  # log-log interpolation between measured points
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if x0 <= nbytes <= x1:
                f = (math.log(nbytes) - math.log(x0)) / (math.log(x1) - math.log(x0))
                t = math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0)))
                break
    return t * max(1.0, 900 * GIGA / gpu.nvlink_bandwidth)  # measured on 900 GB/s NVLink


def expected_distinct_experts(tokens: float, experts: int, per_token: int) -> float:
    """Distinct experts a batch of ``tokens`` touches if routing is uniform: N (1 - (1 - k/N)^T)."""
    return experts * (1.0 - (1.0 - per_token / experts) ** tokens)


class TimingModel:
    def __init__(self, model: ModelProfile | str, gpu: GPU | str, parallel: ParallelConfig | None = None,
                 software: SoftwareProfile | str = "sglang") -> None:
        self.model = model_profile(model) if isinstance(model, str) else model
        self.gpu = gpu_by_name(gpu) if isinstance(gpu, str) else gpu
        self.parallel = parallel or ParallelConfig()
        self.software = SOFTWARE[software] if isinstance(software, str) else software

    # --- rooflines ----------------------------------------------------------------------------------------------------
    def _gemm(self, flops: float, weight_bytes: float, precision: str) -> float:
        g = self.gpu
        peak = g.flops("fp8" if precision == "fp8" else "bf16")
        compute = flops / (peak * g.gemm_efficiency * self.software.gemm_efficiency_scale)
        memory = weight_bytes / (g.hbm_bandwidth * g.hbm_efficiency)
        return max(compute, memory)

    def _attention_core(self, flops: float, kv_bytes: float) -> float:
        g = self.gpu
        return max(flops / (g.bf16_flops * g.attention_efficiency), kv_bytes / (g.hbm_bandwidth * g.hbm_efficiency))

    # --- one forward step -----------------------------------------------------------------------------------------------
    def forward(self, seqs: list[tuple[int, int]], head_rows: int, decode: bool) -> Breakdown:
        """One step over sequences given as (new tokens, tokens already cached)."""
        m, p, sw = self.model, self.parallel, self.software
        wb = m.bytes_per_weight
        tokens = sum(n for n, _ in seqs)
        per_replica = tokens / p.attention_replicas
        per_gpu = tokens / p.gpus
        parts: dict[str, float] = {}

        parts["attention_proj"] = self._gemm(2.0 * m.attention_params * m.n_layers * per_replica / p.attention_shards,
                                             m.n_layers * m.attention_params * wb / p.attention_shards,
                                             m.weight_precision)
        core_flops = sum(m.attention_flops(n, c, absorbed=decode) for n, c in seqs) / p.gpus
        kv_tokens = sum(n + c for n, c in seqs)
        kv_split = p.attention_replicas * (1 if m.attention == "mla" else p.attention_shards)
        parts["attention_core"] = self._attention_core(core_flops, kv_tokens * m.kv_bytes_per_token / kv_split)
        if m.n_dense_layers:
            parts["dense_ffn"] = self._gemm(2.0 * m.dense_ffn_params * m.n_dense_layers * per_gpu,
                                            m.n_dense_layers * m.dense_ffn_params * wb / p.tp, m.weight_precision)
        if m.n_moe_layers:
            if m.n_shared_experts:
                shared = m.n_moe_layers * m.n_shared_experts * m.expert_params
                parts["shared_experts"] = self._gemm(2.0 * shared * per_gpu, shared * wb / p.tp, m.weight_precision)
            touched = expected_distinct_experts(tokens, m.n_routed_experts, m.experts_per_token)
            parts["routed_experts"] = self._gemm(
                2.0 * m.expert_params * m.experts_per_token * m.n_moe_layers * per_gpu,
                m.n_moe_layers * touched * m.expert_params * wb / p.expert_split, m.weight_precision)
        head_bytes = BYTES_PER_PARAM["bf16"]
        parts["lm_head"] = self._gemm(2.0 * m.embedding_params * head_rows / p.gpus,
                                      m.embedding_params * head_bytes / p.tp, "bf16")
        parts["communication"] = self._communication(per_replica, per_gpu, decode)
        parts["overhead"] = m.n_layers * sw.layer_overhead_s + sw.step_overhead_s
        return Breakdown(parts, tokens=tokens)

    def _communication(self, per_replica: float, per_gpu: float, decode: bool) -> float:
        m, p = self.model, self.parallel
        t = 0.0
        if p.attention_shards > 1:  # attention output all-reduce, every layer
            t += m.n_layers * allreduce_seconds(per_replica * m.hidden * 2, self.gpu, p.attention_shards)
        ffn_allreduces = m.n_dense_layers + (m.n_moe_layers if p.ep == 1 else 0)
        t += ffn_allreduces * allreduce_seconds(per_replica * m.hidden * 2, self.gpu, p.tp)
        if p.ep > 1 and m.n_moe_layers:  # dispatch (fp8) + combine (bf16) of each token's k expert copies
            nbytes = per_gpu * m.experts_per_token * m.hidden * (1 + 2)
            bandwidth = A2A_BANDWIDTH_DECODE if decode else A2A_BANDWIDTH_PREFILL
            t += m.n_moe_layers * (2 * A2A_LATENCY_S + nbytes / bandwidth)
        return t

    # --- the questions the services ask ---------------------------------------------------------------------------------
    def decode_step_time(self, context_lens: list[int]) -> Breakdown:
        """One decode step: every running sequence adds one token after ``context_len`` cached ones."""
        if not context_lens:
            return Breakdown()
        return self.forward([(1, c) for c in context_lens], head_rows=len(context_lens), decode=True)

    def prefill_time(self, new_tokens: list[int], cached: list[int] | None = None) -> Breakdown:
        """Prefill of several prompts (new tokens after ``cached`` reused ones), chunked as the software profile says."""
        cached = cached or [0] * len(new_tokens)
        chunk = self.software.prefill_chunk_tokens
        if not chunk:
            return self.forward(list(zip(new_tokens, cached)), head_rows=len(new_tokens), decode=False)
        total = Breakdown(steps=0)
        pending = [[n, c] for n, c in zip(new_tokens, cached) if n > 0]
        while pending:
            budget, step = chunk, []
            for item in pending:
                if budget <= 0:
                    break
                take = min(item[0], budget)
                step.append((take, item[1]))
                item[0] -= take
                item[1] += take
                budget -= take
            heads = sum(1 for item in pending if item[0] == 0)
            total.add(self.forward(step, head_rows=heads, decode=False))
            pending = [item for item in pending if item[0] > 0]
        return total

    def ttft(self, prompt_len: int, cached: int = 0) -> float:
        """Time to first token of a lone request: request overhead + its prefill."""
        return self.software.request_overhead_s + self.prefill_time([prompt_len], [cached]).seconds

    def kv_bytes(self, tokens: int) -> float:
        return tokens * self.model.kv_bytes_per_token

    def kv_transfer_time(self, tokens: int, link: str = "nvlink") -> float:
        """Moving ``tokens`` tokens of KV from a prefill GPU group to a decode group.

        ``nvlink``: both inside one node; ``rdma``: across nodes over the NICs (45 GB/s each, measured);
        ``pcie``: staged through host memory (~25 GB/s).
        """
        g = self.gpu
        bandwidth = {"nvlink": g.nvlink_bandwidth / 2, "rdma": g.internode_bandwidth * g.nics,
                     "pcie": 25 * GIGA}.get(link)
        if bandwidth is None:
            raise ValueError(f"link: {link!r} is not one of nvlink, rdma, pcie")
        latency = 10 * MICRO if link == "nvlink" else 30 * MICRO
        return latency + self.kv_bytes(tokens) / bandwidth
