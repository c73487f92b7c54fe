"""One scheduler for every worker: waiting and running sequences, a token budget per step, an optional KV budget.

``schedule()`` returns a :class:`Step`: which sequences compute how many pending tokens (prefill in chunks, and
recomputation after preemption) and which running sequences decode one token. The runtime runs it, and
``postprocess(step, output)`` moves sequences along and returns what each one produced. Three roles, one code path:

- ``prefill`` (prefill worker): a sequence leaves the scheduler once its first token is sampled; its KV stays with
  it, for the worker to store in the kvstore;
- ``decode`` (decode worker): sequences arrive with their KV imported (or with a bare prompt, colocated) and decode
  under the KV budget; when it runs out the newest running sequence is preempted, its KV freed, and it is
  recomputed later;
- ``both`` (the in-process engine): prompts in, finished sequences out.

First come, first served: the head of the queue always gets tokens, so a long prompt cannot starve.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from pdserve.engine.kv_blocks import DEFAULT_BLOCK_TOKENS
from pdserve.engine.kv_budget import KVBudget, KVBudgetExceeded
from pdserve.engine.sequence import Sequence
from pdserve.engine.stop import FinishReason, StepResult

log = logging.getLogger("pdserve.scheduler")


class Role(str, Enum):
    PREFILL = "prefill"
    DECODE = "decode"
    BOTH = "both"


@dataclass
class SchedulerConfig:
    role: Role = Role.BOTH
    max_num_seqs: int = 64  # sequences in one step
    max_num_batched_tokens: int = 2048  # pending (prompt or recomputed) tokens in one step
    kv_blocks: int | None = None  # KV budget in blocks; None: unbounded
    block_tokens: int = DEFAULT_BLOCK_TOKENS

    def __post_init__(self) -> None:
        self.role = Role(self.role)
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")
        if self.kv_blocks is not None and self.kv_blocks < 1:
            raise ValueError(f"kv_blocks: must be at least 1, got {self.kv_blocks}")


@dataclass
class Step:
    prefills: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, pending tokens to run now)
    decodes: list[Sequence] = field(default_factory=list)  # one new token each

    def __bool__(self) -> bool:
        return bool(self.prefills or self.decodes)


@dataclass
class StepOutput:
    prefills: list[StepResult | None] = field(default_factory=list)  # None: no token sampled (more prompt, recompute)
    decodes: list[StepResult] = field(default_factory=list)


class Scheduler:
    def __init__(self, config: SchedulerConfig, free_kv: Callable[[Sequence], None]) -> None:
        """``free_kv`` releases a sequence's KV memory (Runtime.free) when it finishes, aborts or is preempted."""
        self.config = config
        self.free_kv = free_kv
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.budget = KVBudget(config.kv_blocks, config.block_tokens) if config.kv_blocks else None
        self.num_preemptions = 0

    # --- what the worker asks ---------------------------------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def pending_tokens(self) -> int:
        """Tokens waiting sequences still have to compute (the prefill queue's depth in tokens)."""
        return sum(seq.num_pending for seq in self.waiting)

    # --- requests in and out ----------------------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        """Queue a sequence. Under a KV budget, one that could not run even alone is refused up front."""
        if self.budget is not None:
            most = min(len(seq.prompt_ids) + seq.params.max_tokens, seq.stop.context_length)
            need = self.budget.blocks_for(most)
            if need > self.budget.total_blocks:
                raise KVBudgetExceeded(
                    f"the request may hold up to {most} tokens of KV (prompt + max_tokens) = {need} blocks; this "
                    f"worker's KV budget is {self.budget.total_blocks} blocks")
        self.waiting.append(seq)

    def abort(self, seq: Sequence, reason: FinishReason = FinishReason.ABORT) -> StepResult | None:
        """Remove a sequence wherever it waits or runs and free its KV. None if the scheduler no longer holds it."""
        if seq in self.waiting:
            self.waiting.remove(seq)
        elif seq in self.running:
            self.running.remove(seq)
        else:
            return None
        self._free(seq)
        return seq.abort(reason)

    # --- the step ---------------------------------------------------------------------------------------------------
    def schedule(self) -> Step:
        step = Step(prefills=self._admit())
        if self.config.role is not Role.PREFILL:
            self._reserve_next_tokens()
            step.decodes = list(self.running)
        return step

    def postprocess(self, step: Step, output: StepOutput) -> list[tuple[Sequence, StepResult]]:
        """Move sequences after ``step`` ran; returns (sequence, result) for every token produced."""
        events: list[tuple[Sequence, StepResult]] = []
        for (seq, _), result in zip(step.prefills, output.prefills):
            if seq.num_pending:
                continue  # more prompt to go: stays first in line
            self.waiting.remove(seq)
            if result is not None:
                events.append((seq, result))
            if self.config.role is Role.PREFILL:
                continue  # done here: the caller takes the sequence and its KV
            if seq.finished:
                self._free(seq)
            else:
                self.running.append(seq)
        for seq, result in zip(step.decodes, output.decodes):
            events.append((seq, result))
            if result.finished:
                self.running.remove(seq)
                self._free(seq)
        return events

    # --- internals --------------------------------------------------------------------------------------------------
    def _admit(self) -> list[tuple[Sequence, int]]:
        """Waiting sequences in order while the batch, the token budget and the KV budget allow.

        One whose KV is already complete (imported from the kvstore) joins the running batch directly; the others
        get a chunk of their pending tokens.
        """
        cfg = self.config
        chunks: list[tuple[Sequence, int]] = []
        tokens_left = cfg.max_num_batched_tokens
        for seq in list(self.waiting):
            if len(self.running) + len(chunks) >= cfg.max_num_seqs:
                break
            pending = seq.num_pending
            if pending and tokens_left <= 0:
                break
            # after admission the KV holds every token but the newest, and the next decode step writes that one
            if self.budget is not None and not self.budget.grow(id(seq), len(seq.prompt_ids) + max(1, len(seq.output_ids))):
                break
            if pending == 0:
                self.waiting.remove(seq)
                self.running.append(seq)
                continue
            n = min(pending, tokens_left)
            chunks.append((seq, n))
            tokens_left -= n
        return chunks

    def _reserve_next_tokens(self) -> None:
        """Make sure every running sequence has KV room for its next token, preempting the newest when there is none."""
        if self.budget is None:
            return
        i = 0
        while i < len(self.running):
            seq = self.running[i]
            if self.budget.grow(id(seq), seq.kv.length + 1):
                i += 1
            else:
                self._preempt(self.running.pop())  # the newest; may be seq itself, and the loop then ends

    def _preempt(self, seq: Sequence) -> None:
        self._free(seq)
        self.num_preemptions += 1
        self.waiting.appendleft(seq)
        log.info("preempted %s (KV budget exhausted); it will be recomputed", seq.request_id)

    def _free(self, seq: Sequence) -> None:
        if self.budget is not None:
            self.budget.release(id(seq))
        self.free_kv(seq)
