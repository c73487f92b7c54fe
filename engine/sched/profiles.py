"""Scheduling profiles: how each modeled serving software schedules, with its own defaults for the hardware.

A profile is chosen by the deployment's ``software`` (``--deployment software=sglang|vllm|...``). It resolves, for
one deployment, the limits a launch without flags gets (token budget per step, running-request limit, the share of
GPU memory for weights and KV) and the step policy (policy.py). Every default names the release and the source file
it was read from; a flag overrides each of them (engine/sched/flags.py).

- ``sglang``: SGLang v0.5.3 (python/sglang/srt/server_args.py ``_handle_gpu_memory_settings`` and
  ``_handle_data_parallelism``; managers/scheduler.py ``get_next_batch_to_run``, ``update_running_batch``;
  managers/schedule_policy.py ``PrefillAdder``; managers/schedule_batch.py ``retract_decode``;
  managers/tp_worker.py and model_executor/model_runner.py for the running-request limit; global_config.py for the
  new-token ratio). Prefill first, in steps of their own; admission reserves the running requests' expected growth;
  retraction under memory pressure. DP attention (``--dp-size N`` with ``--enable-dp-attention``; without
  ``--dp-size`` 0.5.3 turns it off) gives each rank ``chunked_prefill_size // N`` and 0.3x the conservativeness.
- ``sglang-0.4``: SGLang v0.4.3.post2 (server_args.py ``__post_init__``): memory fraction 0.81 at TP8, chunked
  prefill 8192; ``--enable-dp-attention`` sets the DP size to the TP size and halves the chunk; the same scheduler.
- ``vllm``: vLLM v0.11.0, the V1 engine (vllm/engine/arg_utils.py batch defaults for ``vllm serve``;
  vllm/v1/core/sched/scheduler.py ``schedule``; vllm/config/cache.py): one mixed step per iteration, running
  requests first; the newest running request is preempted; data parallel ranks balanced by waiting x 4 + running
  (vllm/v1/engine/core_client.py).
- ``sglang-0.5.23``: SGLang v0.5.23, its arguments resolved by hooks (python/sglang/srt/arg_groups/memory_hook.py
  ``handle_gpu_memory_settings``, parallel_hook.py ``handle_data_parallelism``; cuda_graph_hook.py;
  mem_cache/kv_cache_configurator.py ``resolve_max_num_reqs``). 0.5.3's scheduler and new-token ratios; a 4,096-token
  chunk on 20-35 GiB parts; prefill CUDA graphs on by default, whose memory (1.5 GiB with MLA, else 8 MiB per
  captured size) and DeepEP's buffers are reserved; a disaggregated prefill instance reserves no decode graphs and a
  decode instance no prefill graphs, with activations of 2,048 tokens. Not modeled: its ``length`` retraction
  order (0.5.3's is kept) and the user-set running limit now capped at half the KV tokens.
- ``vllm-0.34``: vLLM v0.34.0 (vllm/engine/arg_utils.py ``get_batch_defaults``; vllm/config/cache.py;
  vllm/config/vllm.py): 0.11's scheduler, and a 16,384-token / 1,024-request tier for GPUs of 160 GiB or more;
  0.92 of memory (its default when the extensible KV cache is off; on CUDA that cache is on by default and sizes the
  KV after warm-up from all the memory, so the profile's KV capacity is a lower bound). Asynchronous scheduling (on by
  default) is a timing difference: perfmodel/software.py.
- ``vllm-0.7``: vLLM v0.7.3, the V0 engine (vllm/engine/arg_utils.py, vllm/config.py ``VllmConfig.__post_init__``,
  vllm/core/scheduler.py ``_schedule_default``, vllm/core/block_manager.py): MLA models run without chunked
  prefill, so whole prompts go in prefill steps of their own (up to the model's context in tokens), 256 sequences,
  1% of the KV blocks kept free at admission.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pdserve.engine.sched.policy import StepPolicy

GIB = 1024  # in MiB, as the engines compare device memory

SGLANG_POLICY = StepPolicy("sglang", mixed=False, chunked=True, reserve_decode=True, preemption="retract",
                           dispatch="round_robin")
VLLM_POLICY = StepPolicy("vllm", mixed=True, chunked=True, reserve_decode=False, preemption="newest",
                         dispatch="least_loaded")
VLLM_V0_POLICY = StepPolicy("vllm-0.7", mixed=False, chunked=False, reserve_decode=False, preemption="newest",
                            watermark=0.01, dispatch="round_robin")


@dataclass(frozen=True)
class HardwareFacts:
    """What the engines read about the hardware and the launch when they pick their defaults."""

    gpu_memory_mib: float  # one GPU's memory as the driver reports it
    tp: int  # the launch's tensor-parallel size (--tp)
    attention_dp: int = 1  # data-parallel attention ranks (1: tensor-parallel attention)
    context_length: int = 163_840  # the model's longest sequence
    gpu_name: str = ""  # vLLM keeps A100s in its small batch tier whatever their memory
    role: str = "both"  # "prefill" or "decode" in a disaggregated deployment (SGLang 0.5.23 reserves per role)
    mla: bool = False  # the model's attention is MLA (SGLang 0.5.23's prefill-graph reserve)
    deepep: bool = False  # experts exchanged over DeepEP (SGLang reserves its buffers)


@dataclass(frozen=True)
class Limits:
    """A profile's resolved defaults for one deployment; ``max_num_seqs`` None: derived from the KV capacity."""

    max_num_batched_tokens: int
    max_num_seqs: int | None
    max_prefill_tokens: int | None
    mem_fraction: float  # (weights + KV cache) / GPU memory
    policy: StepPolicy


# SGLang's chunk and decode CUDA-graph batch per GPU memory: (below GiB, chunk, graph batch at TP < 4, at TP >= 4)
SGLANG_053_TIERS = ((20, 2048, 8, 8), (35, 2048, 16, 80), (60, 4096, 32, 160), (160, 8192, 256, 512),
                    (float("inf"), 16384, 512, 512))  # H100/H800 and H20/H200 in the 8,192 tier
SGLANG_0523_TIERS = ((20, 2048, 8, 8), (35, 4096, 48, 160), (60, 4096, 32, 160), (160, 8192, 256, 512),
                     (float("inf"), 16384, 512, 512))


def _sglang_tier(hw: HardwareFacts, tiers: tuple) -> tuple[int, int]:
    for below_gib, chunk, small_tp_bs, large_tp_bs in tiers:
        if hw.gpu_memory_mib < below_gib * GIB:
            return chunk, small_tp_bs if hw.tp < 4 else large_tp_bs
    raise AssertionError("the last tier is unbounded")


def _sglang_dp_attention(hw: HardwareFacts, chunk: int, policy: StepPolicy) -> tuple[int, StepPolicy]:
    """DP attention gives each rank the chunk divided by the ranks "to avoid MoE kernel issues", and 0.3x the
    schedule conservativeness."""
    if hw.attention_dp <= 1:
        return chunk, policy
    return chunk // hw.attention_dp, replace(policy, new_token_ratio=policy.new_token_ratio * 0.3)


def _sglang_053(hw: HardwareFacts) -> Limits:
    mem, tp = hw.gpu_memory_mib, hw.tp
    chunk, graph_bs = _sglang_tier(hw, SGLANG_053_TIERS)
    dp_flag = hw.attention_dp > 1
    # activations of a chunk, CUDA graphs, large TP groups and DP attention's padding, in MiB; at least 10 GiB
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp / 8 * 1024
    if dp_flag:
        reserved += graph_bs * hw.attention_dp * 3 + (graph_bs * hw.attention_dp * 1.5 if graph_bs > 300 else 0)
    if mem > 60 * GIB:
        reserved = max(reserved, 10 * GIB)
    chunk, policy = _sglang_dp_attention(hw, chunk, SGLANG_POLICY)
    return Limits(chunk, None, 16384, round((mem - reserved) / mem, 3), policy)


def _prefill_graph_sizes(max_tokens: int) -> int:
    """How many token counts SGLang 0.5.23 captures prefill CUDA graphs for, up to ``max_tokens``."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_tokens + 1, 512)]
    sizes = [n for n in sizes if n <= max_tokens]
    return len(sizes) + (max_tokens not in sizes)


def _sglang_0523(hw: HardwareFacts) -> Limits:
    mem, dp = hw.gpu_memory_mib, hw.attention_dp
    chunk, graph_bs = _sglang_tier(hw, SGLANG_0523_TIERS)
    activation_tokens = 2048 if hw.role == "decode" else max(chunk, 2048)  # a decode instance: its running batch
    reserved = 512 + activation_tokens * 1.5 + hw.tp / 8 * 1024
    if hw.role != "prefill":  # decode CUDA graphs
        reserved += graph_bs * 2
        if dp > 1:
            reserved += graph_bs * dp * 3 + (graph_bs * dp * 1.5 if graph_bs > 300 else 0)
    if hw.role != "decode":  # prefill CUDA graphs, on by default since 0.5.x: one per captured token count
        reserved += 1.5 * 1024 if hw.mla else _prefill_graph_sizes(chunk) * 8
        reserved += 1024 if hw.deepep else 0
    if mem > 60 * GIB:
        reserved = max(reserved, 10 * GIB)
    if hw.deepep and hw.role != "prefill":
        reserved += 2 * 1024  # DeepEP's low-latency buffers beside the decode graphs
    chunk, policy = _sglang_dp_attention(hw, chunk, SGLANG_POLICY)
    return Limits(chunk, None, 16384, round((mem - reserved) / mem, 3), policy)


def _sglang_043(hw: HardwareFacts) -> Limits:
    fraction = 0.79 if hw.tp >= 16 else 0.81 if hw.tp >= 8 else 0.85 if hw.tp >= 4 else 0.87 if hw.tp >= 2 else 0.88
    chunk = 2048 if hw.gpu_memory_mib * 1.048576 < 25_000 else 8192  # compared in MB there
    policy = SGLANG_POLICY
    if hw.attention_dp > 1:
        chunk //= 2
        policy = replace(policy, new_token_ratio=policy.new_token_ratio * 0.3)
    return Limits(chunk, None, 16384, fraction, policy)


def _vllm_large_tier(hw: HardwareFacts) -> bool:
    """vLLM's large batch defaults: 70 GiB or more, A100s excepted (``"a100" not in`` the device name)."""
    return hw.gpu_memory_mib >= 70 * GIB and "A100" not in hw.gpu_name.upper()


def _vllm_011(hw: HardwareFacts) -> Limits:
    large = _vllm_large_tier(hw)
    return Limits(8192 if large else 2048, 1024 if large else 256, None, 0.90, VLLM_POLICY)


def _vllm_034(hw: HardwareFacts) -> Limits:
    if hw.gpu_memory_mib >= 160 * GIB:  # B200/B300
        return Limits(16384, 1024, None, 0.92, VLLM_POLICY)
    large = _vllm_large_tier(hw)
    return Limits(8192 if large else 2048, 1024 if large else 256, None, 0.92, VLLM_POLICY)


def _vllm_073(hw: HardwareFacts) -> Limits:
    return Limits(max(hw.context_length, 2048), 256, None, 0.90, VLLM_V0_POLICY)


@dataclass(frozen=True)
class SchedulingProfile:
    name: str
    release: str
    resolve: Callable[[HardwareFacts], Limits]

    def limits(self, hw: HardwareFacts) -> Limits:
        return self.resolve(hw)

    def max_running(self, kv_tokens: int, hw: HardwareFacts, limits: Limits) -> int:
        """Running requests per scheduler when the launch sets none."""
        if limits.max_num_seqs is not None:
            return limits.max_num_seqs
        # SGLang: half the KV tokens, at most the request pool: clamp(tokens / context x 512, 2048, 4096)
        pool = min(max(int(kv_tokens / hw.context_length * 512), 2048), 4096)
        return max(1, min(kv_tokens // 2, pool))


PROFILES: dict[str, SchedulingProfile] = {
    "sglang": SchedulingProfile("sglang", "SGLang v0.5.3", _sglang_053),
    "sglang-0.4": SchedulingProfile("sglang-0.4", "SGLang v0.4.3.post2", _sglang_043),
    "sglang-0.5.23": SchedulingProfile("sglang-0.5.23", "SGLang v0.5.23", _sglang_0523),
    "vllm": SchedulingProfile("vllm", "vLLM v0.11.0 (V1 engine)", _vllm_011),
    "vllm-0.34": SchedulingProfile("vllm-0.34", "vLLM v0.34.0 (V1 engine, asynchronous scheduling)", _vllm_034),
    "vllm-0.7": SchedulingProfile("vllm-0.7", "vLLM v0.7.3 (V0 engine)", _vllm_073),
}
ALIASES = {"vllm-awq": "vllm"}  # timing profiles whose serving software schedules as another's


def scheduling_profile(software: str) -> SchedulingProfile:
    name = ALIASES.get(software, software)
    if name not in PROFILES:
        raise ValueError(f"software: no scheduling profile {software!r}; known: {', '.join(PROFILES)}")
    return PROFILES[name]
