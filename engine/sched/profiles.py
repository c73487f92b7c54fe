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


@dataclass(frozen=True)
class Limits:
    """A profile's resolved defaults for one deployment; ``max_num_seqs`` None: derived from the KV capacity."""

    max_num_batched_tokens: int
    max_num_seqs: int | None
    max_prefill_tokens: int | None
    mem_fraction: float  # (weights + KV cache) / GPU memory
    policy: StepPolicy


def _sglang_053(hw: HardwareFacts) -> Limits:
    mem, tp = hw.gpu_memory_mib, hw.tp
    if mem < 20 * GIB:
        chunk, graph_bs = 2048, 8
    elif mem < 35 * GIB:
        chunk, graph_bs = 2048, 16 if tp < 4 else 80
    elif mem < 60 * GIB:
        chunk, graph_bs = 4096, 32 if tp < 4 else 160
    elif mem < 160 * GIB:  # H100, H800 (< 90 GiB); H20, H200
        chunk, graph_bs = 8192, 256 if tp < 4 else 512
    else:
        chunk, graph_bs = 16384, 512
    dp_flag = hw.attention_dp > 1
    # activations of a chunk, CUDA graphs, large TP groups and DP attention's padding, in MiB; at least 10 GiB
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp / 8 * 1024
    if dp_flag:
        reserved += graph_bs * hw.attention_dp * 3 + (graph_bs * hw.attention_dp * 1.5 if graph_bs > 300 else 0)
    if mem > 60 * GIB:
        reserved = max(reserved, 10 * GIB)
    policy = SGLANG_POLICY
    if dp_flag:  # "to avoid MoE kernel issues": each rank's chunk is the node's divided by the DP size
        chunk //= hw.attention_dp
        policy = replace(policy, new_token_ratio=policy.new_token_ratio * 0.3)
    return Limits(chunk, None, 16384, round((mem - reserved) / mem, 3), policy)


def _sglang_043(hw: HardwareFacts) -> Limits:
    fraction = 0.79 if hw.tp >= 16 else 0.81 if hw.tp >= 8 else 0.85 if hw.tp >= 4 else 0.87 if hw.tp >= 2 else 0.88
    chunk = 2048 if hw.gpu_memory_mib * 1.048576 < 25_000 else 8192  # compared in MB there
    policy = SGLANG_POLICY
    if hw.attention_dp > 1:
        chunk //= 2
        policy = replace(policy, new_token_ratio=policy.new_token_ratio * 0.3)
    return Limits(chunk, None, 16384, fraction, policy)


def _vllm_011(hw: HardwareFacts) -> Limits:
    large = hw.gpu_memory_mib >= 70 * GIB  # the H100 tier (A100-80G excepted, which the model does not profile)
    return Limits(8192 if large else 2048, 1024 if large else 256, None, 0.90, VLLM_POLICY)


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
    "vllm": SchedulingProfile("vllm", "vLLM v0.11.0 (V1 engine)", _vllm_011),
    "vllm-0.7": SchedulingProfile("vllm-0.7", "vLLM v0.7.3 (V0 engine)", _vllm_073),
}
ALIASES = {"vllm-awq": "vllm"}  # timing profiles whose serving software schedules as another's


def scheduling_profile(software: str) -> SchedulingProfile:
    name = ALIASES.get(software, software)
    if name not in PROFILES:
        raise ValueError(f"software: no scheduling profile {software!r}; known: {', '.join(PROFILES)}")
    return PROFILES[name]
