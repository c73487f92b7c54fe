"""One request's generation state: its tokens, KV cache, sampler, detokenizer and stop rules.

The sequence is the one owner of token accounting: :meth:`Sequence.append_token` records a token into the sampler
(penalties, seeded positions), the detokenizer and the stop rules, whoever sampled it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pdserve.engine.kv.cache import SequenceKV
from pdserve.engine.params import InvalidParameter, SamplingParams
from pdserve.engine.text.completion import CompletionState
from pdserve.engine.text.sampling import Sampler
from pdserve.engine.text.stop import FinishReason, StepResult, StopChecker
from pdserve.engine.text.tokenizer import IncrementalDetokenizer


@dataclass
class Sequence:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    kv: SequenceKV
    sampler: Sampler
    stop: StopChecker
    detokenizer: IncrementalDetokenizer
    output_ids: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None
    # n > 1 at prefill: samples 1..n-1 of the prompt, sharing this sequence's KV (Runtime.new_sequence); each one's
    # first_result is the StepResult of its first token
    forks: list["Sequence"] = field(default_factory=list)
    first_result: StepResult | None = None
    completion: CompletionState | None = None  # stop_when_complete's schedule (None: the rule is off)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def last_token(self) -> int:
        return self.output_ids[-1]

    @property
    def output_text(self) -> str:
        return self.stop.output_text

    @property
    def num_pending(self) -> int:
        """Tokens whose KV must be computed before the next decode step.

        Before the first token: the prompt (prefill). After it: every token but the newest, which the next decode step
        feeds (zero for a running sequence; everything after preemption dropped the KV: recomputation).
        """
        target = len(self.prompt_ids) + max(0, len(self.output_ids) - 1)
        return target - self.kv.length

    def pending_ids(self, n: int) -> list[int]:
        """The next ``n`` tokens to run through the model before decoding can (re)start."""
        start = self.kv.length
        return self.all_ids[start:start + n]

    def append_token(self, token_id: int) -> StepResult:
        """Record a token (sampled here or received from another worker) and apply the stop rules.

        Returns the text that may be streamed now.
        """
        self.output_ids.append(token_id)
        self.sampler.record(token_id)
        delta = self.detokenizer.push(token_id)
        result = self.stop.step(self.output_ids, delta)
        if result.finished:
            self.finish_reason, self.stop_reason = result.finish_reason, result.stop_reason
        if self.completion is not None:
            self.completion.observe(len(self.output_ids), delta, result.finished)
        return result

    def end(self, result: StepResult, reason: FinishReason) -> None:
        """Finish after the newest token for a reason decided outside the stop rules (the completeness check):
        ``result``, that token's, becomes the last, with whatever text was held back."""
        result.text += self.stop.finish(reason).text
        result.finish_reason = self.finish_reason = reason

    def continue_from(self, first_token: int) -> None:
        """Take over a sequence whose first token another worker sampled (and whose text it already streamed).

        The token goes through the same bookkeeping so that penalties, held-back text and stop rules continue
        exactly; a token that already ends the request leaves nothing to continue.
        """
        result = self.append_token(first_token)
        if result.finished:
            raise InvalidParameter("first_token", f"it already ends the request (finish reason "
                                                  f"{result.finish_reason.value}); there is nothing to decode")

    def resume_from(self, output_ids: list[int]) -> None:
        """Take over a sequence another worker was generating, its tokens ``output_ids`` already streamed.

        Each token goes through the same bookkeeping (sampler counts and seeded positions, detokenizer, held-back
        text), so the next token and its text continue exactly; the KV of prompt + these tokens is recomputed by the
        scheduler like a preempted sequence's. A token that would already end the request is refused.
        """
        for i, token in enumerate(output_ids):
            if self.append_token(token).finished:
                raise InvalidParameter("resume_ids", f"token {i} ({token}) already ends the request (finish reason "
                                                     f"{self.finish_reason.value}); there is nothing to resume")

    def abort(self, reason: FinishReason = FinishReason.ABORT) -> StepResult:
        result = self.stop.finish(reason)
        self.finish_reason = reason
        return result
