"""One request's generation state: its tokens, KV cache, sampler, detokenizer and stop rules."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.kv_cache import SequenceKV
from engine.params import SamplingParams
from engine.sampling import Sampler
from engine.stop import FinishReason, StepResult, StopChecker
from engine.tokenizer import IncrementalDetokenizer


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

    def append_token(self, token_id: int) -> StepResult:
        """Record a sampled token and apply the stop rules; returns the text that may be streamed now."""
        self.output_ids.append(token_id)
        result = self.stop.step(token_id, self.detokenizer.push(token_id))
        if result.finished:
            self.finish_reason, self.stop_reason = result.finish_reason, result.stop_reason
        return result

    def abort(self, reason: FinishReason = FinishReason.ABORT) -> StepResult:
        result = self.stop.finish(reason)
        self.finish_reason = reason
        return result
