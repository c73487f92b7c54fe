"""One scheduler for every worker: waiting and running sequences, a token budget per step, an optional KV budget,
and the step policy of the modeled serving software (engine/sched/policy.py).

``schedule()`` returns a :class:`Step`: which sequences compute how many pending tokens (prefill in chunks, and
recomputation after preemption) and which running sequences decode one token. The runtime runs it, and
``postprocess(step, output)`` moves sequences along and returns what each one produced. Three roles, one code path:

- ``prefill`` (prefill worker): a sequence leaves the scheduler once its first token is sampled; its KV stays with
  it, for the worker to store in the kvstore;
- ``decode`` (decode worker): sequences arrive with their KV imported (or with a bare prompt, colocated) and decode
  under the KV budget; when it runs out, running sequences give way (their KV freed) and are recomputed later;
- ``both`` (the in-process engine): prompts in, finished sequences out.

How prompts and decodes share steps is the policy's: mixed (vLLM V1: every running decode takes one token of the
step's budget, prompt chunks fill the rest) or separate (SGLang, vLLM V0: a step that can take prompt work is a
prefill step, and decodes run in the steps between). First come, first served: the head of the queue always gets
tokens, so a long prompt cannot starve.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from pdserve.engine.kv.blocks import DEFAULT_BLOCK_TOKENS
from pdserve.engine.kv.budget import KVBudget, KVBudgetExceeded
from pdserve.engine.sched.policy import StepPolicy
from pdserve.engine.sequence import Sequence
from pdserve.engine.text.stop import FinishReason, StepResult

log = logging.getLogger("pdserve.scheduler")


class SchedulerRole(str, Enum):
    PREFILL = "prefill"
    DECODE = "decode"
    BOTH = "both"


@dataclass
class SchedulerConfig:
    role: SchedulerRole = SchedulerRole.BOTH
    max_num_seqs: int = 64  # running sequences at most (SGLang's max_running_requests)
    max_num_batched_tokens: int = 2048  # tokens in one step (SGLang's chunked_prefill_size); longer prompts chunk
    kv_blocks: int | None = None  # KV budget in blocks; None: unbounded
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    max_prefill_tokens: int | None = None  # new prompt tokens in one step (SGLang's); None: the step's budget
    policy: StepPolicy = field(default_factory=StepPolicy)

    def __post_init__(self) -> None:
        self.role = SchedulerRole(self.role)
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")
        if self.kv_blocks is not None and self.kv_blocks < 1:
            raise ValueError(f"kv_blocks: must be at least 1, got {self.kv_blocks}")
        if self.max_prefill_tokens is not None and self.max_prefill_tokens < 1:
            raise ValueError(f"max_prefill_tokens: must be at least 1, got {self.max_prefill_tokens}")


@dataclass
class Step:
    prefills: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, pending tokens to run now)
    decodes: list[Sequence] = field(default_factory=list)  # one new token each
    ranks: list["Step"] | None = None  # data-parallel attention: each rank's share (prefills and decodes are theirs)

    def __bool__(self) -> bool:
        return bool(self.prefills or self.decodes)

    def rank_batches(self) -> list[tuple[list[tuple[int, int]], list[int]]]:
        """Per attention rank, (new tokens, cached tokens) of each prompt chunk and the context of each decode (the
        cached tokens plus the one being decoded): what the timing model prices."""
        return [([(n, seq.kv.length) for seq, n in r.prefills], [seq.kv.length + 1 for seq in r.decodes])
                for r in (self.ranks or [self])]


@dataclass
class StepOutput:
    prefills: list[StepResult | None] = field(default_factory=list)  # None: no token sampled (more prompt, recompute)
    decodes: list[StepResult] = field(default_factory=list)


class Scheduler:
    def __init__(self, config: SchedulerConfig, free_kv: Callable[[Sequence], None]) -> None:
        """``free_kv`` releases a sequence's KV memory (Runtime.free) when it finishes, aborts or is preempted."""
        self.config = config
        self.policy = config.policy
        self.free_kv = free_kv
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.budget = KVBudget(config.kv_blocks, config.block_tokens) if config.kv_blocks else None
        self.num_preemptions = 0
        self.new_token_ratio = self.policy.new_token_ratio

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
        if not self.has_work():
            self.new_token_ratio = self.policy.new_token_ratio  # idle: admission starts from the initial estimate
            return Step()
        if self.config.role is SchedulerRole.PREFILL:
            return Step(prefills=self._admit(self.config.max_num_batched_tokens))
        if self.policy.mixed:  # running requests first, one token each; prompt chunks fill the rest of the budget
            self._admit(0)  # those whose KV is complete (imported) join the running batch
            preempted = self._make_room_for_decodes()
            decodes = self.running[:self.config.max_num_batched_tokens]
            tokens_left = self.config.max_num_batched_tokens - len(decodes)
            return Step(prefills=self._admit(tokens_left, admit_new=not preempted), decodes=decodes)
        prefills = self._admit(self.config.max_num_batched_tokens)  # prefill first, in a step of its own
        if prefills:
            return Step(prefills=prefills)
        self._make_room_for_decodes()
        return Step(decodes=list(self.running))

    def postprocess(self, step: Step, output: StepOutput) -> list[tuple[Sequence, StepResult]]:
        """Move sequences after ``step`` ran; returns (sequence, result) for every token produced."""
        events: list[tuple[Sequence, StepResult]] = []
        for (seq, _), result in zip(step.prefills, output.prefills):
            if seq.num_pending:
                continue  # more prompt to go: stays first in line
            self.waiting.remove(seq)
            if result is not None:
                events.append((seq, result))
            if self.config.role is SchedulerRole.PREFILL:
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

    # --- admission --------------------------------------------------------------------------------------------------
    def _admit(self, tokens_left: int, admit_new: bool = True) -> list[tuple[Sequence, int]]:
        """Waiting sequences in order while the running limit, the step's token budget and the KV budget allow.

        One whose KV is already complete (imported from the kvstore) joins the running batch directly; the others
        get a chunk of their pending tokens (the whole of them when the policy does not chunk). ``admit_new=False``
        continues a prompt already under way but starts no new one.
        """
        cfg, policy = self.config, self.policy
        chunks: list[tuple[Sequence, int]] = []
        prefill_left = cfg.max_prefill_tokens
        reserved = self._running_reserve() if policy.reserve_decode and self.budget else 0.0
        # a prompt under way continues first (vLLM keeps it running; SGLang's chunked request leads each batch)
        queue = sorted(self.waiting, key=lambda s: not (s.kv.length and s.num_pending))
        for seq in queue:
            if len(self.running) + len(chunks) >= cfg.max_num_seqs:
                break
            pending = seq.num_pending
            started = pending and seq.kv.length > 0  # a prompt under way (its earlier chunks hold KV)
            if not admit_new and not started:
                break
            if pending == 0:  # KV complete: after admission it holds every token but the newest, which decode writes
                if not self._hold(seq, len(seq.prompt_ids) + max(1, len(seq.output_ids))):
                    break
                self.waiting.remove(seq)
                self.running.append(seq)
                continue
            if tokens_left <= 0 or (prefill_left is not None and chunks and not started and pending >= prefill_left):
                break
            n = min(pending, tokens_left) if policy.chunked else pending
            if not policy.chunked and chunks and pending > tokens_left:
                break  # whole prompts only: this one waits for the next step
            if policy.reserve_decode and self.budget is not None and not started:
                future = min(seq.params.max_tokens - len(seq.output_ids), policy.clip_new_tokens)
                if pending + future >= self.budget.free * self.budget.block_tokens - reserved:
                    break
                reserved += n + (future if n == pending else 0)
            if not self._hold(seq, seq.kv.length + n, watermark=not started):
                break
            chunks.append((seq, n))
            tokens_left -= n
            if prefill_left is not None:
                prefill_left -= n
                if prefill_left <= 0:
                    break
        return chunks

    def _running_reserve(self) -> float:
        """KV tokens the running requests are expected to still need (SGLang's new-token-ratio reservation)."""
        clip, ratio = self.policy.clip_new_tokens, self.new_token_ratio
        return sum(min(seq.params.max_tokens - len(seq.output_ids), clip) * ratio for seq in self.running)

    def _hold(self, seq: Sequence, tokens: int, watermark: bool = False) -> bool:
        """Hold KV blocks for ``tokens`` tokens of ``seq`` (with ``watermark``, only if the policy's share of the
        blocks stays free); False, and nothing more held, if the budget cannot."""
        budget = self.budget
        if budget is None:
            return True
        if watermark and self.policy.watermark:
            need = budget.blocks_for(tokens) - budget.held.get(id(seq), 0)
            if budget.free - need < int(self.policy.watermark * budget.total_blocks):
                return False
        return budget.grow(id(seq), tokens)

    # --- memory pressure --------------------------------------------------------------------------------------------
    def _make_room_for_decodes(self) -> bool:
        """Give every running sequence KV room for its next token; returns whether any had to give way."""
        if self.budget is None:
            return False
        if self.policy.preemption == "retract":
            return self._retract()
        preempted = False
        i = 0
        while i < len(self.running):
            seq = self.running[i]
            if self.budget.grow(id(seq), seq.kv.length + 1):
                i += 1
            else:
                self._preempt(self.running.pop(), to_head=True)  # the newest; may be seq itself, and the loop ends
                preempted = True
        return preempted

    def _retract(self) -> bool:
        """SGLang: while the next tokens do not fit, the request with the fewest generated tokens (then the longest
        prompt) goes back to the tail of the queue; the ratio then restarts from what the survivors need. One is
        always kept."""
        budget, policy = self.budget, self.policy
        need = {id(s): max(0, budget.blocks_for(s.kv.length + 1) - budget.held.get(id(s), 0)) for s in self.running}
        short = sum(need.values()) - budget.free
        retracted = False
        if short > 0:
            order = sorted(self.running, key=lambda s: (len(s.output_ids), -len(s.prompt_ids)), reverse=True)
            while len(order) > 1 and short > 0:
                seq = order.pop()
                short -= need[id(seq)] + budget.held.get(id(seq), 0)  # its next block and every block it held
                self.running.remove(seq)
                self._preempt(seq, to_head=False)
                retracted = True
        if retracted:
            remaining = sum(len(s.output_ids) for s in self.running) + policy.retract_steps * len(self.running)
            self.new_token_ratio = min(1.0, remaining / (sum(s.params.max_tokens for s in self.running) + 1))
        else:
            floor = policy.new_token_ratio * policy.min_ratio_factor
            decay = (policy.new_token_ratio - floor) / policy.ratio_decay_steps
            self.new_token_ratio = max(self.new_token_ratio - decay, floor)
        for seq in list(self.running):
            if not budget.grow(id(seq), seq.kv.length + 1):  # the last one alone does not fit: it waits, whole
                self.running.remove(seq)
                self._preempt(seq, to_head=True)
                retracted = True
        return retracted

    def _preempt(self, seq: Sequence, to_head: bool) -> None:
        self._free(seq)
        self.num_preemptions += 1
        if to_head:
            self.waiting.appendleft(seq)
        else:
            self.waiting.append(seq)
        log.info("preempted %s (KV budget exhausted); it will be recomputed", seq.request_id)

    def _free(self, seq: Sequence) -> None:
        if self.budget is not None:
            self.budget.release(id(seq))
        self.free_kv(seq)
