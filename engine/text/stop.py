"""Stop rules: when a sequence ends and which text is safe to stream.

The sequence calls :meth:`StopChecker.step` once per new token with its output ids so far (the new token last) and
that token's text delta. The checker

- ends on EOS / end-of-turn (unless ``ignore_eos``) and on ``stop_token_ids``; their text is not emitted;
- reports vLLM's ``stop_reason``: the stop string or ``stop_token_ids`` entry that matched, None for EOS / end of turn;
- matches stop strings across token boundaries, searching only the new tail plus an overlap window;
- holds back exactly the suffix that could still grow into a stop string, and releases it as soon as it cannot;
- ends on ``max_tokens``, the model's context length, and on a repeating token loop (``repetition``);
- lets ``min_tokens`` gate EOS, stop ids and stop strings alike.

The last rule, completeness (``complete``), needs a forward of the model: engine/text/completion.py.

The concatenation of every ``StepResult.text`` is always the final output text.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from pdserve.engine.params import SamplingParams
from pdserve.engine.text.logprobs import TokenLogprobs

if TYPE_CHECKING:
    from pdserve.engine.text.completion import CompletionCheck


class FinishReason(str, Enum):
    STOP = "stop"
    LENGTH = "length"
    REPETITION = "repetition"
    COMPLETE = "complete"  # the model's own check said the answer covers the question (engine/text/completion.py)
    ABORT = "abort"
    ERROR = "error"


@dataclass
class StepResult:
    text: str  # text that may be streamed now
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None  # the matched stop string or stop_token_ids entry; None for EOS
    logprobs: TokenLogprobs | None = None  # of the token just generated, when the request asks for them
    check: CompletionCheck | None = None  # the completeness check run after this token, if one was

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class StopChecker:
    def __init__(self, params: SamplingParams, eos_ids: frozenset[int], prompt_len: int,
                 context_length: int) -> None:
        self.params = params
        self.eos_ids = frozenset() if params.ignore_eos else eos_ids
        self.stop_ids = frozenset(params.stop_token_ids)
        self.stops = [s for s in params.stop if s]
        self.max_stop_len = max((len(s) for s in self.stops), default=0)
        self.prompt_len = prompt_len
        self.context_length = context_length
        self.text = ""  # all generated text so far (held-back part included)
        self.emitted = 0  # characters of self.text already streamed
        self._runs = [0] * (params.repetition_max_period + 1)  # the repetition check's state (_repeats_loop)
        self._seen = 0

    @property
    def output_text(self) -> str:
        """What has been streamed so far (the final text once finished)."""
        return self.text[:self.emitted]

    def _emit(self, upto: int) -> str:
        chunk = self.text[self.emitted:upto]
        self.emitted = max(self.emitted, upto)
        return chunk

    def _finish(self, reason: FinishReason, stop_reason: str | int | None = None,
                text_end: int | None = None) -> StepResult:
        end = len(self.text) if text_end is None else text_end
        self.text = self.text[:end]
        return StepResult(self._emit(end), reason, stop_reason)

    def step(self, output_ids: list[int], text_delta: str) -> StepResult:
        """Apply the rules to the newest token, ``output_ids[-1]`` (the sequence's own list: read, never copied)."""
        p = self.params
        token_id = output_ids[-1]
        generated = len(output_ids)
        past_min = generated > p.min_tokens
        if past_min and token_id in self.stop_ids:
            return self._finish(FinishReason.STOP, token_id)
        if past_min and token_id in self.eos_ids:
            return self._finish(FinishReason.STOP)  # vLLM: no stop_reason for EOS / end of turn

        previous_len = len(self.text)
        self.text += text_delta
        if past_min and self.stops:
            match = self._find_stop(previous_len)
            if match is not None:
                position, stop = match
                end = position + len(stop) if p.include_stop_str_in_output else position
                return self._finish(FinishReason.STOP, stop, end)
        if generated >= p.max_tokens or self.prompt_len + generated >= self.context_length:
            return self._finish(FinishReason.LENGTH)
        if p.repetition_max_repeats and self._repeats_loop(output_ids):
            return self._finish(FinishReason.REPETITION)
        return StepResult(self._emit(len(self.text) - self._holdback()))

    def finish(self, reason: FinishReason) -> StepResult:
        """End from outside (abort, error): flush whatever was held back."""
        return self._finish(reason)

    def _find_stop(self, previous_len: int) -> tuple[int, str] | None:
        """Earliest stop string that ends inside the new text (longest on a tie)."""
        window_start = max(0, previous_len - self.max_stop_len + 1)
        best: tuple[int, str] | None = None
        for stop in self.stops:
            pos = self.text.find(stop, window_start)
            if pos != -1 and (best is None or pos < best[0] or (pos == best[0] and len(stop) > len(best[1]))):
                best = (pos, stop)
        return best

    def _holdback(self) -> int:
        """Length of the longest suffix of the text that is a proper prefix of some stop string."""
        if not self.stops:
            return 0
        tail = self.text[max(self.emitted, len(self.text) - self.max_stop_len + 1):]
        for start in range(len(tail)):
            suffix = tail[start:]
            if any(stop.startswith(suffix) for stop in self.stops):
                return len(suffix)
        return 0

    def _repeats_loop(self, ids: list[int]) -> bool:
        """Whether the output ends in more than ``repetition_max_repeats`` repeats of a loop of at most
        ``repetition_max_period`` tokens. Incremental: per period, how many tokens in a row so far equal the one that
        period earlier (``ids`` ends in N + 1 copies of a loop of period p when that run reaches p x N). One pass over
        the periods per new token, whatever the settings: ~15-26 us a token at period 256 on the development machine,
        where comparing the tail anew at each period took 8.7 ms at period 256, 31 repeats and 8,192 tokens. Ids not
        seen yet (a checker made for a resumed sequence) are caught up."""
        period_max, repeats = self.params.repetition_max_period, self.params.repetition_max_repeats
        runs = self._runs
        found = False
        for i in range(self._seen, len(ids)):
            token = ids[i]
            found = False
            for period in range(1, min(period_max, i) + 1):
                if ids[i - period] == token:
                    runs[period] += 1
                    found = found or runs[period] >= period * repeats
                else:
                    runs[period] = 0
        self._seen = len(ids)
        return found
