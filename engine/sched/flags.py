"""The scheduler's knobs as command-line flags, declared once: the workers (worker/flags.py) and the simulator
(``pdserve simulate`` and ``plan``) take the same names. Every knob defaults to the modeled serving software's own
default for the modeled hardware (engine/sched/profiles.py); a flag overrides it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace

from pdserve.engine.sched.policy import DISPATCHES, PREEMPTIONS
from pdserve.engine.sched.profiles import HardwareFacts, Limits, SchedulingProfile
from pdserve.engine.sched.scheduler import SchedulerConfig, SchedulerRole

COMPOSITIONS = ("mixed", "separate")


@dataclass(frozen=True)
class SchedulerOverrides:
    """What the user set; None keeps the profile's default."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_prefill_tokens: int | None = None
    step_composition: str | None = None
    mem_fraction: float | None = None
    schedule_conservativeness: float | None = None
    preemption: str | None = None
    dp_dispatch: str | None = None

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_prefill_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name}: must be at least 1, got {value}")
        if self.step_composition not in (None, *COMPOSITIONS):
            raise ValueError(f"step_composition: {self.step_composition!r} is not one of {', '.join(COMPOSITIONS)}")
        if self.mem_fraction is not None and not 0.0 < self.mem_fraction < 1.0:
            raise ValueError(f"mem_fraction: must be in (0, 1), got {self.mem_fraction}")
        if self.schedule_conservativeness is not None and self.schedule_conservativeness <= 0:
            raise ValueError(f"schedule_conservativeness: must be positive, got {self.schedule_conservativeness}")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "SchedulerOverrides":
        return cls(**{f.name: getattr(args, f.name, None) for f in fields(cls)})

    @classmethod
    def parse(cls, text: str) -> "SchedulerOverrides":
        """``"max_num_seqs=512,mem_fraction=0.82"`` (the validation table's spelling of a launch's flags)."""
        kinds = {f.name: f.type for f in fields(cls)}
        values: dict = {}
        for item in filter(None, (x.strip() for x in (text or "").split(","))):
            key, _, value = item.partition("=")
            if key not in kinds:
                raise ValueError(f"scheduler: {key!r} is not one of {', '.join(kinds)}")
            kind = kinds[key]
            values[key] = int(value) if "int" in kind else float(value) if "float" in kind else value
        return cls(**values)


def add_scheduler_args(group) -> None:
    group.add_argument("--max-num-seqs", type=int, default=None,
                       help="running requests per scheduler (per attention rank) at most (SGLang: "
                            "--max-running-requests); default: the software's for the modeled deployment")
    group.add_argument("--max-num-batched-tokens", type=int, default=None,
                       help="tokens in one step; longer prompts run in chunks (SGLang: --chunked-prefill-size)")
    group.add_argument("--max-prefill-tokens", type=int, default=None,
                       help="new prompt tokens in one step (SGLang's --max-prefill-tokens)")
    group.add_argument("--step-composition", default=None, choices=COMPOSITIONS,
                       help="mixed: decodes ride in the prompt chunks' steps (vLLM); separate: prefill steps of their "
                            "own, decodes between (SGLang; --enable-mixed-chunk is SGLang's 'mixed')")
    group.add_argument("--mem-fraction", type=float, default=None,
                       help="share of GPU memory for weights and KV cache (SGLang --mem-fraction-static, vLLM "
                            "--gpu-memory-utilization)")
    group.add_argument("--schedule-conservativeness", type=float, default=None,
                       help="SGLang's: scales the decode growth admission reserves for running requests")
    group.add_argument("--preemption", default=None, choices=PREEMPTIONS,
                       help="who gives way when KV runs out: the newest running request (vLLM) or the ones with the "
                            "fewest generated tokens (SGLang's retraction)")
    group.add_argument("--dp-dispatch", default=None, choices=DISPATCHES,
                       help="how data-parallel attention ranks get requests (SGLang: round_robin; vLLM: least_loaded)")


LOCAL_LIMITS = (64, 2048)  # (sequences, tokens per step) of a worker that computes on this machine's CPU


def scheduler_config(profile: SchedulingProfile, limits: Limits, hw: HardwareFacts, o: SchedulerOverrides,
                     role: SchedulerRole, kv_tokens: int, kv_blocks: int | None, block_tokens: int,
                     local: bool = False) -> SchedulerConfig:
    """One scheduler's (one attention rank's) configuration: the profile's limits and policy for the hardware, the
    user's overrides on top. ``kv_tokens``: the rank's modeled KV capacity (SGLang derives its running-request limit
    from it); ``local``: the worker computes on this machine, so the CPU-sized limits replace the modeled ones."""
    policy = limits.policy
    if o.step_composition is not None:  # prompt chunks share a mixed step's budget: mixing chunks prompts
        mixed = o.step_composition == "mixed"
        policy = replace(policy, mixed=mixed, chunked=policy.chunked or mixed)
    if o.schedule_conservativeness is not None:
        policy = replace(policy, new_token_ratio=min(1.0, policy.new_token_ratio * o.schedule_conservativeness))
    if o.preemption is not None:
        policy = replace(policy, preemption=o.preemption)
    if o.dp_dispatch is not None:
        policy = replace(policy, dispatch=o.dp_dispatch)
    if local:
        seqs, tokens, prefill_tokens = LOCAL_LIMITS[0], LOCAL_LIMITS[1], None
    else:
        seqs, tokens = profile.max_running(kv_tokens, hw, limits), limits.max_num_batched_tokens
        prefill_tokens = limits.max_prefill_tokens
    return SchedulerConfig(role, o.max_num_seqs or seqs, o.max_num_batched_tokens or tokens, kv_blocks, block_tokens,
                           o.max_prefill_tokens or prefill_tokens, policy)
