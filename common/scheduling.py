"""The scheduler a modeled deployment runs: its software's scheduling profile resolved for its hardware, the user's
overrides on top, one scheduler per attention rank. The workers (worker/flags.py), the simulator (sim/cluster.py)
and ``pdserve perf`` build it here, so all of them schedule and size the KV cache alike."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pdserve.engine.sched.flags import SchedulerOverrides, scheduler_config
from pdserve.engine.sched.profiles import HardwareFacts, SchedulingProfile, scheduling_profile
from pdserve.engine.sched.ranks import AttentionRanks
from pdserve.engine.sched.scheduler import Scheduler, SchedulerConfig, SchedulerRole
from pdserve.engine.sequence import Sequence
from pdserve.perfmodel.deployment import Deployment, check_deployment
from pdserve.perfmodel.hardware import MIB


@dataclass(frozen=True)
class ModeledScheduling:
    deployment: Deployment  # with the memory fraction the software leaves for weights + KV
    config: SchedulerConfig  # one attention rank's
    ranks: int
    profile: SchedulingProfile
    kv_tokens_per_rank: int

    def build(self, free_kv: Callable[[Sequence], None]) -> Scheduler | AttentionRanks:
        if self.ranks > 1:
            return AttentionRanks(self.config, self.ranks, free_kv)
        return Scheduler(self.config, free_kv)

    def describe(self) -> str:
        """One line: the profile, and what it resolved to (what ``pdserve simulate`` prints)."""
        c, p = self.config, self.config.policy
        steps = "mixed steps, decodes first" if p.mixed else "prefill first, in steps of their own"
        chunk = f"{c.max_num_batched_tokens} tokens per step" + ("" if p.chunked else " (whole prompts)")
        more = [f"max running {c.max_num_seqs}", chunk]
        if c.max_prefill_tokens:
            more.append(f"max prefill {c.max_prefill_tokens}")
        more.append(f"mem fraction {self.deployment.mem_fraction:.3f} ({self.kv_tokens_per_rank:,} KV tokens"
                    f"{' per rank' if self.ranks > 1 else ''})")
        if p.reserve_decode:
            more.append(f"decode reserve ratio {p.new_token_ratio:.2f}")
        more.append(f"preemption {p.preemption}")
        if self.ranks > 1:
            more.append(f"{self.ranks} attention ranks, {p.dispatch} dispatch")
        return f"{self.profile.release} ({self.profile.name}): {steps}; " + ", ".join(more)


def hardware_facts(d: Deployment, role: SchedulerRole = SchedulerRole.BOTH) -> HardwareFacts:
    p = d.parallel()
    m = d.profile()
    return HardwareFacts(d.gpu().hbm_bytes / MIB, d.tp, p.attention_replicas if d.dp_attention else 1,
                         m.max_context or 163_840, gpu_name=d.gpu().name, role=role.value, mla=m.attention == "mla",
                         deepep=d.ep > 1 and d.dp_attention)


def modeled_scheduling(d: Deployment, role: SchedulerRole, overrides: SchedulerOverrides | None = None,
                       kv_blocks: int | None = None, block_tokens: int = 16, local: bool = False,
                       kv_budget: bool | None = None) -> ModeledScheduling:
    """``kv_blocks``: the instance's KV budget in blocks (split over its ranks); None: the modeled capacity.
    ``kv_budget``: whether the scheduler keeps one (default: not on prefill, whose KV leaves with each request).
    ``local``: the worker computes on this machine's CPU (its limits, not the modeled ones). Raises ValueError
    naming the field for a deployment or an override that cannot run."""
    o = overrides or SchedulerOverrides()
    profile = scheduling_profile(d.software)
    hw = hardware_facts(d, role)
    limits = profile.limits(hw)
    # the memory fraction changes the memory fit, not the timing: keep a timing model already built (a sensitivity
    # variant's, sim/sensitivity.py, is changed in place and would otherwise be rebuilt from the defaults)
    kept = {k: v for k, v in d._cache.items() if k == "timing"}
    d = replace(d, mem_fraction=o.mem_fraction or d.mem_fraction or limits.mem_fraction, _cache=kept)
    fit = check_deployment(d)
    ranks = hw.attention_dp
    per_rank = fit.kv_tokens_per_replica
    if kv_budget is None:
        kv_budget = role is not SchedulerRole.PREFILL
    blocks = None
    if kv_budget:
        blocks = kv_blocks // ranks if kv_blocks else per_rank // block_tokens
        if blocks < 1:
            raise ValueError(f"kv_blocks: {kv_blocks} blocks do not give each of {ranks} attention ranks one")
    config = scheduler_config(profile, limits, hw, o, role, per_rank, blocks, block_tokens, local)
    return ModeledScheduling(d, config, ranks, profile, per_rank)
