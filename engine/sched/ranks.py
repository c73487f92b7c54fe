"""Data-parallel attention: one scheduler and one KV pool per attention rank, a dispatcher in front, one step for all.

Each rank holds whole attention weights and serves its own requests; the expert (MoE) layers run on every rank's
tokens together, so all ranks step at once and a rank with nothing to do runs an idle batch (SGLang
``prepare_mlp_sync_batch``, vLLM ``execute_dummy_batch``). Each rank composes its share of the step with its own
policy: one may run a prompt chunk while another decodes. The step's :attr:`Step.ranks` keeps each rank's share,
which is what the timing model prices (the slowest rank sets the step); ``prefills`` and ``decodes`` hold all of
them, in rank order, for the runtime.

Dispatch: ``round_robin`` (SGLang's default load balancing) or ``least_loaded`` (vLLM's: the lowest waiting x 4 +
running, vllm/v1/engine/core_client.py in v0.11.0).

:class:`AttentionRanks` answers what a :class:`Scheduler` answers, so a worker and a simulated instance run either.
"""

from __future__ import annotations

from collections.abc import Callable

from pdserve.engine.sched.scheduler import Scheduler, SchedulerConfig, SchedulerRole, Step, StepOutput
from pdserve.engine.sequence import Sequence
from pdserve.engine.text.stop import FinishReason, StepResult


class PooledBudget:
    """The ranks' KV budgets read as one (what a worker's load report and the router see)."""

    def __init__(self, ranks: list[Scheduler]) -> None:
        self._ranks = ranks

    @property
    def used(self) -> int:
        return sum(r.budget.used for r in self._ranks)

    @property
    def total_blocks(self) -> int:
        return sum(r.budget.total_blocks for r in self._ranks)

    @property
    def usage(self) -> float:
        return self.used / self.total_blocks


class AttentionRanks:
    def __init__(self, config: SchedulerConfig, ranks: int, free_kv: Callable[[Sequence], None]) -> None:
        """``config`` is one rank's (its KV budget, its limits)."""
        if ranks < 1:
            raise ValueError(f"ranks: must be at least 1, got {ranks}")
        self.config = config
        self.ranks = [Scheduler(config, free_kv) for _ in range(ranks)]
        self.budget = PooledBudget(self.ranks) if config.kv_blocks else None
        self._where: dict[int, Scheduler] = {}  # id(sequence) -> its rank
        self._next = 0

    # --- what a worker asks -----------------------------------------------------------------------------------------
    def has_work(self) -> bool:
        return any(r.has_work() for r in self.ranks)

    @property
    def waiting(self) -> list[Sequence]:
        return [s for r in self.ranks for s in r.waiting]

    @property
    def running(self) -> list[Sequence]:
        return [s for r in self.ranks for s in r.running]

    @property
    def pending_tokens(self) -> int:
        return sum(r.pending_tokens for r in self.ranks)

    @property
    def num_preemptions(self) -> int:
        return sum(r.num_preemptions for r in self.ranks)

    # --- requests in and out ----------------------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        rank = self._dispatch()
        rank.add(seq)
        self._where[id(seq)] = rank

    def abort(self, seq: Sequence, reason: FinishReason = FinishReason.ABORT) -> StepResult | None:
        rank = self._where.pop(id(seq), None)
        return None if rank is None else rank.abort(seq, reason)

    def _dispatch(self) -> Scheduler:
        if self.config.policy.dispatch == "least_loaded":
            return min(self.ranks, key=lambda r: 4 * len(r.waiting) + len(r.running))
        rank = self.ranks[self._next]
        self._next = (self._next + 1) % len(self.ranks)
        return rank

    # --- the step ---------------------------------------------------------------------------------------------------
    def schedule(self) -> Step:
        parts = [r.schedule() for r in self.ranks]
        return Step([c for p in parts for c in p.prefills], [s for p in parts for s in p.decodes], parts)

    def postprocess(self, step: Step, output: StepOutput) -> list[tuple[Sequence, StepResult]]:
        events = []
        p = d = 0
        for rank, part in zip(self.ranks, step.ranks or []):
            share = StepOutput(output.prefills[p:p + len(part.prefills)], output.decodes[d:d + len(part.decodes)])
            p, d = p + len(part.prefills), d + len(part.decodes)
            events += rank.postprocess(part, share)
        for seq, result in events:
            if result.finished or self.config.role is SchedulerRole.PREFILL:
                self._where.pop(id(seq), None)
        return events
