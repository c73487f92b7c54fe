"""How long a forward step takes on the modeled deployment, from the batch that really ran.

Each operator group is a roofline on the *busiest* GPU: time = max(FLOPs / (peak x efficiency), bytes / (HBM bandwidth
x efficiency)). Groups: attention projections (the fused q_a/kv_a down-projection replicated on every TP rank, the
rest split), the absorbed MLA projections (BF16 copies, decode only), the attention core (MLA decode pads each GPU's
query heads to the kernel's 64-row tile), dense FFNs, shared experts, routed experts (the expected busiest
expert-parallel GPU under group-limited routing, see routing.py), the output head. Communication per layer:
tensor-parallel all-reduce (interpolated from measured NVLink figures; over the NICs when the group spans nodes) and
expert-parallel all-to-all (NVLink inside a node, NICs across nodes). Two-batch overlap runs two half batches and hides
communication behind compute. Per-kernel (times the kernels a forward launches, kernels.py), per-step and per-request
overheads are fitted per software and GPU family (overheads.py). ``explain`` keeps every group's FLOPs, bytes and
bound so the arithmetic can be checked by hand.

Over 300 lines because the operator groups, the per-rank step composition (``step_time``) and the overlap/overhead
finish share one cost vocabulary and are checked against each other to 1e-12; moving the composition to its own
module is the next split if it grows.
"""

from __future__ import annotations

import math

from pdserve.perfmodel.communication import all_to_all_seconds, allreduce_seconds, expert_copies
from pdserve.perfmodel.costs import Breakdown, GroupCost
from pdserve.perfmodel.handoff import HandOff
from pdserve.perfmodel.hardware import GPU
from pdserve.perfmodel.hardware import gpu as gpu_by_name
from pdserve.perfmodel.kernels import kernels_per_forward, layer_kernels
from pdserve.perfmodel.models import BYTES_PER_PARAM, ModelProfile, model_profile
from pdserve.perfmodel.overheads import Overheads, overheads
from pdserve.perfmodel.parallel import ParallelConfig
from pdserve.perfmodel.routing import ExpertLoad, expert_load
from pdserve.perfmodel.software import SOFTWARE, SoftwareProfile

MICRO = 1e-6
Seqs = list[tuple[int, int]]  # (new tokens, tokens already cached) per sequence


# MLA decode kernels (FlashMLA, FA3-MLA) work on 64 query rows per tile (github.com/deepseek-ai/FlashMLA).
MLA_QUERY_TILE = 64
# FP8 MLA (FP8 Q and KV, FP8 WGMMA) against BF16 FlashMLA on H20: "~70% speedup" (LMSYS blog 2025-09-26, Ant Group).
FP8_ATTENTION_SPEEDUP = 1.7
# SMs DeepEP's normal (prefill) kernels occupy while they run: deep_ep.Buffer.num_sms = 20 (github.com/deepseek-ai/
# DeepEP). Under two-batch overlap in prefill, compute shares the GPU with them; low-latency (decode) kernels hold no
# SMs while in flight (deepseek-ai/profile-data README).
DEEPEP_NORMAL_SMS = 20


def expected_distinct_experts(tokens: float, experts: int, per_token: int) -> float:
    """Distinct experts a batch of ``tokens`` touches if routing is uniform: N (1 - (1 - k/N)^T)."""
    return experts * (1.0 - (1.0 - per_token / experts) ** tokens)


def busiest_share(seqs: list[tuple[int, int]], replicas: int) -> list[tuple[int, int]]:
    """The sequences of the most loaded attention replica when ``seqs`` are spread greedily (largest first)."""
    if replicas <= 1 or len(seqs) <= 1:
        return list(seqs)
    loads = [0.0] * replicas
    shares: list[list[tuple[int, int]]] = [[] for _ in range(replicas)]
    for n, c in sorted(seqs, key=lambda s: -(s[0] * (s[0] + 2 * s[1] + 1024))):
        i = loads.index(min(loads))
        shares[i].append((n, c))
        loads[i] += n * (n + 2 * c + 1024)  # tokens weigh with the attention they need
    return shares[loads.index(max(loads))]


class TimingModel:
    def __init__(self, model: ModelProfile | str, gpu: GPU | str, parallel: ParallelConfig | None = None,
                 software: SoftwareProfile | str = "sglang") -> None:
        self.model = model_profile(model) if isinstance(model, str) else model
        self.gpu = gpu_by_name(gpu) if isinstance(gpu, str) else gpu
        self.parallel = parallel or ParallelConfig()
        if isinstance(software, str):
            if software not in SOFTWARE:
                raise ValueError(f"software: unknown profile {software!r}; known: {', '.join(SOFTWARE)}")
            software = SOFTWARE[software]
        self.software = software
        # Block-scaled FP8 kernels (hardware.FP8_KERNELS): DeepEP deployments (expert parallel with DP attention) run
        # DeepGEMM throughout; otherwise the linear layers run the stack's own kernel, expert-parallel MoE DeepGEMM's
        # grouped GEMMs (SGLang v0.5.3 EPMoE) and tensor-parallel MoE Triton's fused MoE (SGLang v0.5.3 FusedMoE with
        # MoeRunnerBackend.TRITON, python/sglang/srt/layers/moe/ep_moe/layer.py get_moe_impl_class)
        p = self.parallel
        deepep = p.ep > 1 and p.dp_attention
        self.fp8_kernels = "deepgemm" if deepep else software.fp8_kernels if self.model.fp8_block_scaled else "rowwise"
        self.moe_kernels = "deepgemm" if deepep or (p.ep > 1 and software.fp8_kernels != "triton") else "triton"
        self.balanced_routing = False  # True: every EP rank gets the mean load (as DeepSeek's profiles simulate)
        self.token_split_down_proj = False  # True: the replicated q_a/kv_a projection is split by tokens over TP
        self.overheads: Overheads = overheads(software.fitted_as or software.name, self.gpu.name, {
            "kernel_overhead_s": software.kernel_overhead_s, "step_overhead_s": software.step_overhead_s,
            "request_overhead_s": software.request_overhead_s})

    # --- rooflines ----------------------------------------------------------------------------------------------------
    def _gemm(self, flops: float, nbytes: float, precision: str, kernels: str = "", **factors: float) -> GroupCost:
        g = self.gpu
        rate = g.gemm_rate(precision, kernels or self.fp8_kernels) * \
            self.software.gemm_efficiency_scale
        return GroupCost(flops, nbytes, flops / rate, nbytes / (g.hbm_bandwidth * g.hbm_efficiency), factors)

    def _attention_core(self, flops: float, kv_bytes: float, **factors: float) -> GroupCost:
        g, m = self.gpu, self.model
        rate = g.bf16_flops * g.attention_efficiency
        if m.kv_precision == "fp8" and m.attention == "mla":
            rate *= FP8_ATTENTION_SPEEDUP
        return GroupCost(flops, kv_bytes, flops / rate, kv_bytes / (g.hbm_bandwidth * g.hbm_efficiency), factors)

    # --- one forward step -----------------------------------------------------------------------------------------------
    def _rank_groups(self, prefill: Seqs, decode: Seqs) -> dict[str, GroupCost]:
        """The groups one attention replica (a DP rank, or the whole TP group) runs for its own sequences: the
        attention projections, the absorbed MLA projections, the attention core and, with DeepEP's replicated shared
        expert, the shared expert. Prefill chunks run expanded (MHA) attention, decodes absorbed MLA."""
        m, p = self.model, self.parallel
        wb = m.bytes_per_weight
        shards = p.attention_shards
        t_prefill = sum(n for n, _ in prefill)
        t_decode = sum(n for n, _ in decode)
        t_mine = t_prefill + t_decode
        groups: dict[str, GroupCost] = {}

        # attention projections: replicated down-projection + split remainder (kv_b separately for decode tokens)
        absorbed = m.absorbed_params if decode else 0
        split = m.attention_sharded_params - absorbed
        # the replicated down-projection runs on every TP rank for all tokens, unless it is split by tokens
        # (reduce-scatter, down-projection, all-gather: Ant Group's H20 prefill)
        down_tokens = t_mine / shards if self.token_split_down_proj else t_mine
        expand = 2.0 * m.absorbed_params / shards * sum(c for _, c in prefill)  # a cached prefix's K/V, expanded
        prefill_kv_b = 2.0 * absorbed / shards * t_prefill  # kv_b of prefill tokens when decodes share the step
        weights = m.attention_replicated_params + split + (absorbed if prefill else 0)
        groups["attention_proj"] = self._gemm(
            m.n_layers * (2.0 * m.attention_replicated_params * down_tokens + 2.0 * split / shards * t_mine + expand
                          + prefill_kv_b),
            m.n_layers * (m.attention_replicated_params + (weights - m.attention_replicated_params) / shards) * wb,
            m.weight_precision)
        if absorbed:
            groups["mla_absorb"] = self._gemm(m.n_layers * 2.0 * absorbed / shards * t_decode,
                                              m.n_layers * absorbed / shards * BYTES_PER_PARAM["bf16"], "bf16")

        # attention core
        pad = 1.0
        if decode and m.attention == "mla":
            rows = m.n_heads // shards * max(n for n, _ in decode)
            pad = math.ceil(rows / MLA_QUERY_TILE) * MLA_QUERY_TILE / rows
        core_flops = (sum(m.attention_flops(n, c, absorbed=False) for n, c in prefill)
                      + sum(m.attention_flops(n, c, absorbed=True) for n, c in decode) * pad) / shards
        kv_split = 1 if m.attention == "mla" else min(shards, m.n_kv_heads)
        kv_bytes = sum(m.kv_bytes_for(n + c) for n, c in prefill + decode) / kv_split
        groups["attention_core"] = self._attention_core(core_flops, kv_bytes, head_padding=pad)

        if m.n_moe_layers and m.n_shared_experts and p.ep > 1 and p.dp_attention:
            # DeepEP deployments keep the shared expert whole on every rank; a DP group's tokens reach the MoE layer
            # scattered over its attention-TP GPUs (SGLang's LayerCommunicator, ScatterMode.SCATTERED)
            shared = m.n_moe_layers * m.n_shared_experts * m.expert_params
            groups["shared_experts"] = self._gemm(2.0 * shared * t_mine / shards, shared * wb, m.weight_precision)
        return groups

    def _groups(self, prefill: Seqs, decode: Seqs, tokens: int, head_rows: float,
                decode_only: bool) -> dict[str, GroupCost]:
        """Compute groups of one forward pass on the busiest GPU: ``prefill`` and ``decode`` are the busiest attention
        replica's sequences as (new tokens, tokens already cached), ``tokens`` the step's tokens over all replicas;
        ``decode_only``: no replica prefills in this step (the expert all-to-all runs in its low-latency mode)."""
        m, p = self.model, self.parallel
        wb = m.bytes_per_weight
        t_mine = sum(n for n, _ in prefill) + sum(n for n, _ in decode)
        groups = self._rank_groups(prefill, decode)
        # attention's projections and core come first in the breakdown, the shared expert (if per rank) with the FFNs
        shared_mine = groups.pop("shared_experts", None)

        # feed-forward: dense layers tensor-parallel over the tokens of one TP group
        t_tp = tokens * p.tp / p.gpus
        if m.n_dense_layers:
            groups["dense_ffn"] = self._gemm(2.0 * m.dense_ffn_params * m.n_dense_layers * t_tp / p.tp,
                                             m.n_dense_layers * m.dense_ffn_params * wb / p.tp, m.weight_precision)
        if m.n_moe_layers:
            if m.n_shared_experts:
                if shared_mine is not None:
                    groups["shared_experts"] = shared_mine
                else:
                    shared = m.n_moe_layers * m.n_shared_experts * m.expert_params
                    groups["shared_experts"] = self._gemm(2.0 * shared * t_tp / p.tp, shared * wb / p.tp,
                                                          m.weight_precision)
            groups["routed_experts"] = self._routed(tokens)
        rows_mine = head_rows * (t_mine / tokens if tokens else 1.0)
        head_split = p.attention_shards if p.dp_attention else p.tp
        groups["lm_head"] = self._gemm(2.0 * m.embedding_params * (rows_mine if p.dp_attention else head_rows)
                                       / head_split, m.embedding_params * BYTES_PER_PARAM["bf16"] / head_split, "bf16")
        groups["elementwise"] = self._elementwise(t_mine, t_tp, tokens)
        groups["_comm"] = GroupCost(compute_s=self._communication(tokens, t_mine, decode_only))
        return groups

    def _elementwise(self, t_mine: float, t_tp: float, tokens: int) -> GroupCost:
        """Memory-bound passes over activations that no GEMM roofline sees, counted per operator [E]: per token and
        layer two RMSNorms (read + write 2H bytes each), two residual adds (read 4H, write 2H), FP8 quantization of the
        GEMM inputs (read 2 B, write 1 B per value); per FFN row (routed expert-token pair, shared expert, dense FFN)
        the gate/up output (4I), SiLU-and-mul (read 4I, write I), the down output (2H), and for routed pairs the
        permutation and the weighted combine (2H + 2H)."""
        m, p = self.model, self.parallel
        h, shards = m.hidden, p.attention_shards
        quant = 3 if m.weight_precision == "fp8" else 0
        heads_out = m.n_heads // shards * (m.v_head_dim or m.head_dim)
        per_token = 8 * h + 12 * h + quant * h * 2 + quant * heads_out
        nbytes = m.n_layers * t_mine * per_token
        if m.n_dense_layers:
            inter = m.dense_intermediate / p.tp
            nbytes += m.n_dense_layers * t_tp * (9 * inter + 2 * h)
        if m.n_moe_layers:
            if m.n_shared_experts:
                dp_shared = p.ep > 1 and p.dp_attention
                inter = m.moe_intermediate * m.n_shared_experts / (1 if dp_shared else p.tp)
                nbytes += m.n_moe_layers * (t_mine / shards if dp_shared else t_tp) * (9 * inter + 2 * h)
            if p.ep > 1:
                pairs = self._ep_load(tokens).max_pairs
                nbytes += m.n_moe_layers * pairs * (9 * m.moe_intermediate + 6 * h)
            else:
                nbytes += m.n_moe_layers * t_tp * m.experts_per_token * (9 * m.moe_intermediate / p.tp + 2 * h)
        g = self.gpu
        return GroupCost(0.0, nbytes, 0.0, nbytes / (g.hbm_bandwidth * g.hbm_efficiency))

    def _ep_load(self, tokens: int) -> ExpertLoad:
        """Expected load of the busiest expert-parallel GPU for ``tokens`` tokens spread over all GPUs."""
        m, p = self.model, self.parallel
        load = expert_load(math.ceil(tokens * p.ep / p.gpus), m.n_routed_experts, m.experts_per_token, p.ep,
                           m.n_expert_groups, m.topk_groups)
        if self.balanced_routing:
            return ExpertLoad(load.mean_pairs, load.mean_pairs, load.mean_distinct_experts, load.mean_distinct_experts)
        return load

    def _routed(self, tokens: int) -> GroupCost:
        m, p = self.model, self.parallel
        wb, layers = m.expert_bytes_per_weight, m.n_moe_layers
        if p.ep > 1:
            load = self._ep_load(tokens)
            return self._gemm(2.0 * m.expert_params * load.max_pairs * layers,
                              layers * load.max_distinct_experts * m.expert_params * wb, m.expert_weight_precision,
                              self.moe_kernels, ep_imbalance=load.imbalance)
        t_tp = math.ceil(tokens * p.tp / p.gpus)
        load = expert_load(t_tp, m.n_routed_experts, m.experts_per_token, 1, m.n_expert_groups, m.topk_groups)
        return self._gemm(2.0 * m.expert_params * m.experts_per_token * t_tp * layers / p.tp,
                          layers * load.mean_distinct_experts * m.expert_params * wb / p.tp, m.expert_weight_precision,
                          self.moe_kernels,
                          distinct_experts=load.mean_distinct_experts)

    def _communication(self, tokens: int, t_mine: int, decode: bool) -> float:
        m, p, g = self.model, self.parallel, self.gpu
        act = m.hidden * BYTES_PER_PARAM["bf16"]
        t_tp = tokens * p.tp / p.gpus
        t = 0.0
        if p.dp_attention and not (p.ep > 1 and m.n_moe_layers):
            # DP attention before tensor-parallel FFNs: every layer gathers all groups' tokens over the whole TP group
            # (SGLang's dp_gather_partial, an all-reduce of the padded global buffer that also sums the attention
            # output of a group's TP ranks) and scatters the FFN's result back (a local copy)
            t += m.n_layers * allreduce_seconds(t_tp * act, g, p.tp, p.gpus_per_node)
        elif p.attention_shards > 1:  # attention output all-reduce, every layer
            t += m.n_layers * allreduce_seconds(t_mine * act, g, p.attention_shards, p.gpus_per_node)
        ffn_allreduces = m.n_dense_layers + (m.n_moe_layers if p.ep == 1 else 0)
        t += ffn_allreduces * allreduce_seconds(t_tp * act, g, p.tp, p.gpus_per_node)
        if p.ep > 1 and m.n_moe_layers:  # dispatch (fp8) + combine (bf16) of each token's k expert copies
            load = self._ep_load(tokens)
            per_copy = m.hidden * (1 + 2) * load.imbalance * tokens / p.gpus
            local, remote = expert_copies(m.experts_per_token, m.topk_groups, p.nodes_spanned(p.ep), decode)
            t += m.n_moe_layers * all_to_all_seconds(local * per_copy, remote * per_copy, g, decode, p.gpus_per_node)
        return t

    def forward(self, seqs: Seqs, head_rows: int, decode: bool) -> Breakdown:
        """One step over sequences given as (new tokens, tokens already cached), all prefill or all decode; with
        data-parallel attention they are spread greedily over the replicas (:func:`busiest_share`)."""
        tokens = sum(n for n, _ in seqs)
        overlap = self.parallel.two_batch_overlap and tokens > 1
        group_sets = []
        for half in _split_in_two(seqs) if overlap else [seqs]:
            mine = busiest_share(half, self.parallel.attention_replicas)
            t = sum(n for n, _ in half)
            rows = head_rows * t // max(1, tokens) if overlap else head_rows
            group_sets.append(self._groups([] if decode else mine, mine if decode else [], t, rows, decode))
        return self._finish(group_sets, tokens, prefilling=not decode)

    def step_time(self, ranks: list[tuple[Seqs, list[int]]]) -> Breakdown:
        """One step as a scheduler really composed it: per attention rank (one with tensor-parallel attention) its
        prefill chunks as (new tokens, tokens already cached) and the contexts of its decodes (one token each). Every
        rank runs its own attention; the experts, the dense layers and the collectives run on all ranks' tokens
        together, so the step lasts as long as its slowest rank (a rank with nothing to do runs an idle batch)."""
        batches = [(list(p), [(1, c) for c in d]) for p, d in ranks if p or d]
        if not batches:
            return Breakdown()
        prefilling = any(p for p, _ in batches)
        tokens = sum(n for p, d in batches for n, _ in p + d)
        rows = sum(len(p) + len(d) for p, d in batches)  # a prompt chunk's last position and every decode
        overlap = self.parallel.two_batch_overlap and tokens > 1
        if overlap:
            split = [(_split_in_two(p), _split_in_two(d)) for p, d in batches]
            halves = [[(ps[k], ds[k]) for ps, ds in split] for k in (0, 1)]
        else:
            halves = [batches]
        group_sets = []
        for half in halves:
            t = sum(n for p, d in half for n, _ in p + d)
            mine_p, mine_d = half[0] if len(half) == 1 else max(half, key=lambda b: self.rank_seconds(*b))
            group_sets.append(self._groups(mine_p, mine_d, t, rows * t // max(1, tokens) if overlap else rows,
                                           not prefilling))
        return self._finish(group_sets, tokens, prefilling)

    def busiest_rank_step(self, prefill: Seqs, decode: Seqs, tokens: int, head_rows: int,
                          prefilling: bool) -> Breakdown:
        """:meth:`step_time` once the busiest rank is known (its prefill chunks and decodes as (new, cached)), for
        a step of ``tokens`` tokens over all ranks (``prefilling``: some rank prefills); no two-batch overlap."""
        return self._finish([self._groups(prefill, decode, tokens, head_rows, not prefilling)], tokens, prefilling)

    def rank_seconds(self, prefill: Seqs, decode: Seqs) -> float:
        """What one attention rank's own share of a step costs (what makes it the busiest)."""
        return sum(g.seconds for g in self._rank_groups(prefill, decode).values())

    def _finish(self, group_sets: list[dict[str, GroupCost]], tokens: int, prefilling: bool) -> Breakdown:
        """The step's breakdown from its (one, or two overlapped) micro-batches' groups: communication exposed or
        hidden, the SMs DeepEP holds, and the per-kernel and per-step overheads."""
        p = self.parallel
        groups = group_sets[0]
        for other in group_sets[1:]:
            for name, g in other.items():
                groups[name] = groups[name].plus(g) if name in groups else g
        comm = groups.pop("_comm").compute_s
        if p.two_batch_overlap and prefilling:  # DeepEP normal kernels hold SMs while compute overlaps them
            share = self.gpu.sms / (self.gpu.sms - DEEPEP_NORMAL_SMS)
            for g in groups.values():
                g.compute_s *= share
                g.memory_s *= share
                g.factors["sm_share"] = share
        parts = {name: g.seconds for name, g in groups.items()}
        if p.two_batch_overlap:
            compute = sum(parts.values())
            parts["communication"] = max(0.0, comm - compute)  # exposed communication only
            groups["communication"] = GroupCost(compute_s=parts["communication"], factors={"overlapped_s": comm})
        else:
            parts["communication"] = comm
            groups["communication"] = GroupCost(compute_s=comm)
        kernels = kernels_per_forward(self.model, self.gpu)
        parts["overhead"] = kernels * self.overheads.kernel_overhead_s + self.overheads.step_overhead_s
        groups["overhead"] = GroupCost(compute_s=parts["overhead"], factors={
            "kernels": kernels, "per_kernel_us": self.overheads.kernel_overhead_s * 1e6,
            "per_step_us": self.overheads.step_overhead_s * 1e6})
        return Breakdown(parts, tokens=tokens, groups=groups)

    # --- the questions the services ask ---------------------------------------------------------------------------------
    def decode_step_time(self, context_lens: list[int], tokens_per_seq: int = 1) -> Breakdown:
        """One decode step: every running sequence adds ``tokens_per_seq`` tokens (more than one when a speculative
        draft is verified) after ``context_len`` cached ones."""
        if not context_lens:
            return Breakdown()
        return self.forward([(tokens_per_seq, c) for c in context_lens], head_rows=len(context_lens) * tokens_per_seq,
                            decode=True)

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

    def draft_layer_overhead_s(self) -> float:
        """The per-kernel overhead of one more decoder layer (a multi-token-prediction draft layer): the kernels of
        the model's last layer."""
        k = layer_kernels(self.model, self.gpu)
        return (k.attention + (k.moe_ffn or k.dense_ffn)) * self.overheads.kernel_overhead_s

    def ttft(self, prompt_len: int, cached: int = 0) -> float:
        """Time to first token of a lone request: request overhead + its prefill."""
        return self.overheads.request_overhead_s + self.prefill_time([prompt_len], [cached]).seconds

    def kv_bytes(self, tokens: int) -> float:
        return tokens * self.model.kv_bytes_per_token

    def kv_transfer_time(self, tokens: int, link: str = "nvlink") -> float:
        """Moving ``tokens`` tokens of KV from a prefill instance of this deployment to a decode instance of it, the
        wire alone (no handshake): ``nvlink`` inside one node, ``rdma`` over the NICs, ``pcie`` staged through host
        memory. perfmodel/handoff.py owns the hand-off; this is its transfer."""
        return HandOff.between(self, self).wire_seconds(tokens, link)


def _split_in_two(seqs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Two micro-batches of about equal tokens (one long prompt is cut in two consecutive halves)."""
    if len(seqs) == 1:
        n, c = seqs[0]
        return [[(n // 2, c)], [(n - n // 2, c + n // 2)]]
    return [seqs[0::2], seqs[1::2]]
