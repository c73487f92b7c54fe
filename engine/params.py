"""Per-request generation parameters and their validation.

Validation raises :class:`InvalidParameter` naming the field and the limit; the services turn it into
INVALID_ARGUMENT. Each hop validates once where a request enters it (router, workers, LLMEngine.add_request) with
:func:`validate_request`; the runtime assumes valid parameters. Defaults follow vLLM's SamplingParams where one exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from pdserve.engine.text.structured import GrammarError, check_spec

MAX_STOP_STRINGS = 16
MAX_STOP_STRING_CHARS = 256
MAX_STOP_TOKEN_IDS = 64
MAX_LOGPROBS = 20  # top alternatives per token, as vLLM's default max_logprobs
MAX_SAMPLES = 16  # n: samples of one prompt
MAX_CHECK_INTERVAL = 4096  # stop_when_complete_interval, in tokens
MAX_SPEC_CHARS = 65536  # a structured output's schema, regex or grammar
MAX_CHOICES = 256
MAX_BAD_WORDS = 64
MAX_ALLOWED_TOKEN_IDS = 65536


class InvalidParameter(ValueError):
    """A request field is out of range; ``field`` names it."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


@dataclass
class SamplingParams:
    max_tokens: int | None = 256  # None: the rest of the context (vLLM's server rule), resolved by validate_request
    min_tokens: int = 0
    temperature: float = 1.0
    top_k: int = 0  # 0 or -1: no top-k
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    # Finish with reason "repetition" when the output ends in the same loop of 1..repetition_max_period tokens
    # repeated more than repetition_max_repeats times in a row. 0 turns the check off.
    repetition_max_repeats: int = 0
    repetition_max_period: int = 32
    # Finish with reason "complete" when the model itself, asked at a sentence boundary on a fork of the sequence,
    # gives P(yes) >= stop_when_complete that the answer covers the question (engine/text/completion.py); checks at
    # least stop_when_complete_interval tokens apart. 0 turns the check off.
    stop_when_complete: float = 0.0
    stop_when_complete_interval: int = 16
    # Samples of the prompt, sharing its prefill (n > 1: sample i uses seed + i; see sample_params).
    n: int = 1
    # None: no log-probabilities. k >= 0: each token's log-probability and the k most likely alternatives
    # (engine/text/logprobs.py says of which distribution).
    logprobs: int | None = None
    # Structured outputs (engine/text/structured.py), at most one: a JSON schema (as JSON text), a regex, the
    # choices, a grammar (Lark or GBNF), or any JSON object. Empty: free text.
    guided_json: str = ""
    guided_regex: str = ""
    guided_choice: list[str] = field(default_factory=list)
    guided_grammar: str = ""
    guided_json_object: bool = False
    # vLLM's token masks: sample only among these ids (empty: all); never finish one of these words.
    allowed_token_ids: list[int] = field(default_factory=list)
    bad_words: list[str] = field(default_factory=list)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self, vocab_size: int | None = None) -> "SamplingParams":
        def check(ok: bool, name: str, message: str) -> None:
            if not ok:
                raise InvalidParameter(name, message)

        def finite(name: str) -> float:
            value = getattr(self, name)
            check(isinstance(value, (int, float)) and math.isfinite(value), name, f"must be a finite number, got {value!r}")
            return float(value)

        check(isinstance(self.max_tokens, int) and self.max_tokens >= 1, "max_tokens",
              f"must be at least 1, got {self.max_tokens}")
        check(0 <= self.min_tokens <= self.max_tokens, "min_tokens",
              f"must be in 0..max_tokens ({self.max_tokens}), got {self.min_tokens}")
        check(0.0 <= finite("temperature") <= 100.0, "temperature", f"must be in [0, 100], got {self.temperature}")
        check(self.top_k == -1 or self.top_k >= 0, "top_k", f"must be -1, 0 (off) or positive, got {self.top_k}")
        check(0.0 < finite("top_p") <= 1.0, "top_p", f"must be in (0, 1], got {self.top_p}")
        check(0.0 <= finite("min_p") <= 1.0, "min_p", f"must be in [0, 1], got {self.min_p}")
        check(0.0 < finite("repetition_penalty") <= 10.0, "repetition_penalty",
              f"must be in (0, 10], got {self.repetition_penalty}")
        check(-2.0 <= finite("presence_penalty") <= 2.0, "presence_penalty",
              f"must be in [-2, 2], got {self.presence_penalty}")
        check(-2.0 <= finite("frequency_penalty") <= 2.0, "frequency_penalty",
              f"must be in [-2, 2], got {self.frequency_penalty}")
        check(self.seed is None or 0 <= self.seed < 2**63, "seed", f"must be in [0, 2^63), got {self.seed}")
        check(len(self.stop) <= MAX_STOP_STRINGS, "stop", f"at most {MAX_STOP_STRINGS} stop strings, got {len(self.stop)}")
        for s in self.stop:
            check(0 < len(s) <= MAX_STOP_STRING_CHARS, "stop",
                  f"each stop string must have 1..{MAX_STOP_STRING_CHARS} characters, got {len(s)}")
        check(len(self.stop_token_ids) <= MAX_STOP_TOKEN_IDS, "stop_token_ids",
              f"at most {MAX_STOP_TOKEN_IDS} ids, got {len(self.stop_token_ids)}")
        if vocab_size is not None:
            for t in self.stop_token_ids:
                check(0 <= t < vocab_size, "stop_token_ids", f"id {t} is outside 0..{vocab_size - 1}")
        check(0 <= self.repetition_max_repeats <= 1000, "repetition_max_repeats",
              f"must be in 0..1000, got {self.repetition_max_repeats}")
        check(1 <= self.repetition_max_period <= 256, "repetition_max_period",
              f"must be in 1..256, got {self.repetition_max_period}")
        check(0.0 <= finite("stop_when_complete") <= 1.0, "stop_when_complete",
              f"must be in [0, 1] (0: off), got {self.stop_when_complete}")
        check(1 <= self.stop_when_complete_interval <= MAX_CHECK_INTERVAL, "stop_when_complete_interval",
              f"must be in 1..{MAX_CHECK_INTERVAL}, got {self.stop_when_complete_interval}")
        check(isinstance(self.n, int) and 1 <= self.n <= MAX_SAMPLES, "n", f"must be in 1..{MAX_SAMPLES}, got {self.n}")
        check(self.logprobs is None or 0 <= self.logprobs <= MAX_LOGPROBS, "logprobs",
              f"must be in 0..{MAX_LOGPROBS}, got {self.logprobs}")
        self._validate_masks(check, vocab_size)
        return self

    def _validate_masks(self, check, vocab_size: int | None) -> None:
        for name in ("guided_json", "guided_regex", "guided_grammar"):
            check(len(getattr(self, name)) <= MAX_SPEC_CHARS, name, f"at most {MAX_SPEC_CHARS} characters")
        check(len(self.guided_choice) <= MAX_CHOICES, "guided_choice", f"at most {MAX_CHOICES} choices")
        check(all(0 < len(c) <= MAX_STOP_STRING_CHARS for c in self.guided_choice), "guided_choice",
              f"each choice must have 1..{MAX_STOP_STRING_CHARS} characters")
        check(len(self.bad_words) <= MAX_BAD_WORDS, "bad_words", f"at most {MAX_BAD_WORDS} words")
        check(all(0 < len(w.strip()) <= MAX_STOP_STRING_CHARS for w in self.bad_words), "bad_words",
              f"each word must have 1..{MAX_STOP_STRING_CHARS} characters")
        check(len(self.allowed_token_ids) <= MAX_ALLOWED_TOKEN_IDS, "allowed_token_ids",
              f"at most {MAX_ALLOWED_TOKEN_IDS} ids")
        if vocab_size is not None:
            bad = next((t for t in self.allowed_token_ids if not 0 <= t < vocab_size), None)
            check(bad is None, "allowed_token_ids", f"id {bad} is outside 0..{vocab_size - 1}")
        try:
            check_spec(self)
        except GrammarError as err:
            raise InvalidParameter(err.field, str(err).removeprefix(err.field + ": ")) from None


def sample_params(params: SamplingParams, index: int) -> SamplingParams:
    """The parameters of sample ``index`` of an n-sample request: one sample, seed + index (vLLM's rule for a seeded
    n > 1 request), so each seeded sample equals a single-sample request with that seed."""
    seed = None if params.seed is None else (params.seed + index) % 2**63
    return replace(params, n=1, seed=seed)


def check_token_ids(ids, vocab_size: int, field_name: str = "token_ids") -> list[int]:
    ids = list(ids)
    if not ids:
        raise InvalidParameter(field_name, "prompt is empty")
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise InvalidParameter(field_name, f"token id {bad} is outside the vocabulary (0..{vocab_size - 1})")
    return ids


def check_fits_context(prompt_len: int, params: SamplingParams, context_length: int) -> None:
    if prompt_len >= context_length:
        raise InvalidParameter("prompt", f"{prompt_len} tokens leave no room in the context length {context_length}")
    if prompt_len + params.max_tokens > context_length:
        raise InvalidParameter(
            "max_tokens", f"prompt ({prompt_len} tokens) + max_tokens ({params.max_tokens}) exceeds the context "
                          f"length {context_length}; at most {context_length - prompt_len} fits")


def validate_request(prompt_ids, params: SamplingParams, vocab_size: int, context_length: int,
                     ids_field: str = "token_ids") -> tuple[list[int], SamplingParams]:
    """The one check of a generation request: prompt ids, sampling parameters, and both against the context.

    Returns the ids and the parameters, with an unset ``max_tokens`` resolved to the rest of the context.
    """
    ids = check_token_ids(prompt_ids, vocab_size, ids_field)
    if params.max_tokens is None:
        params = replace(params, max_tokens=max(1, context_length - len(ids)))
    params.validate(vocab_size)
    check_fits_context(len(ids), params, context_length)
    return ids, params
