"""Structured outputs: the output constrained to a JSON schema, a regex, a list of choices or a grammar.

The grammar library is llguidance (a Rust matcher with Python bindings; https://github.com/guidance-ai/llguidance):
per sequence, an ``LLMatcher`` says which tokens may come next (a bitmask over the vocabulary) and is advanced by
every token the sequence records, wherever it was sampled. So a sequence whose first token prefill sampled, or one
resumed on another worker, re-advances its matcher over the tokens so far and continues exactly where it stopped.

Also here, the two plain token masks vLLM offers beside grammars: ``allowed_token_ids`` and ``bad_words``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import numpy as np

# The spec's kinds, in the order of SamplingParams' fields (at most one per request).
KINDS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_json_object")
ANY_JSON_OBJECT = '{"type": "object"}'


class GrammarError(ValueError):
    """A spec the library cannot compile; ``field`` names the request field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


def chosen_kinds(params) -> list[str]:
    """The structured-output fields a request set."""
    return [k for k in KINDS if getattr(params, k)]


def grammar_of(params) -> str | None:
    """The llguidance grammar for a request's spec, or None when the output is free."""
    import llguidance

    kinds = chosen_kinds(params)
    if not kinds:
        return None
    if len(kinds) > 1:
        raise GrammarError(kinds[1], f"only one structured output per request; {kinds[0]} is set too")
    kind = kinds[0]
    try:
        if kind == "guided_json":
            return llguidance.LLMatcher.grammar_from_json_schema(params.guided_json)
        if kind == "guided_json_object":
            return llguidance.LLMatcher.grammar_from_json_schema(ANY_JSON_OBJECT)
        if kind == "guided_regex":
            return llguidance.LLMatcher.grammar_from_regex(params.guided_regex)
        if kind == "guided_choice":
            return llguidance.grammar_from("choice", json.dumps(list(params.guided_choice)))
        return llguidance.grammar_from("grammar", params.guided_grammar)  # Lark or GBNF (llama.cpp's EBNF)
    except ValueError as err:
        raise GrammarError(kind, str(err).strip()) from None


def check_spec(params) -> None:
    """Raise GrammarError naming the field when the spec does not compile (every hop checks, before any work)."""
    import llguidance

    grammar = grammar_of(params)
    if grammar is None:
        return
    message = llguidance.LLMatcher.validate_grammar(grammar)
    if message:
        raise GrammarError(chosen_kinds(params)[0], message.strip().splitlines()[0])


@dataclass
class GrammarConstraint:
    """One sequence's matcher: the mask before each sample, advanced by each recorded token."""

    matcher: object
    vocab_size: int
    eos_ids: tuple[int, ...]

    def allowed(self) -> np.ndarray:
        """A bool mask [vocab]: the tokens the grammar lets come next. A matcher in error (a token from outside the
        grammar reached it) allows only the end, so the answer stops rather than runs on unconstrained."""
        if self.matcher.is_error():
            mask = np.zeros(self.vocab_size, dtype=bool)
            mask[list(self.eos_ids)] = True
            return mask
        bits = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8)
        mask = np.unpackbits(bits, bitorder="little")[:self.vocab_size].astype(bool)
        if mask.size < self.vocab_size:
            mask = np.concatenate([mask, np.zeros(self.vocab_size - mask.size, dtype=bool)])
        return mask

    def advance(self, token: int) -> None:
        if not self.matcher.is_stopped():
            self.matcher.consume_token(token)


class Grammars:
    """A runtime's compiler: the tokenizer's llguidance form, built once (about a second) on first use."""

    def __init__(self, tokenizer, vocab_size: int) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._ll = None
        self._lock = threading.Lock()

    def _ll_tokenizer(self):
        import llguidance

        with self._lock:
            if self._ll is None:
                self._ll = llguidance.LLTokenizer(self._tokenizer._tok.to_str(), n_vocab=self._vocab_size,
                                                  eos_token=sorted(self._tokenizer.eos_ids))
            return self._ll

    def constraint(self, params) -> GrammarConstraint | None:
        import llguidance

        grammar = grammar_of(params)
        if grammar is None:
            return None
        matcher = llguidance.LLMatcher(self._ll_tokenizer(), grammar, log_level=0)
        if matcher.is_error():
            raise GrammarError(chosen_kinds(params)[0], matcher.get_error().strip().splitlines()[0])
        return GrammarConstraint(matcher, self._vocab_size, tuple(sorted(self._tokenizer.eos_ids)))

    def bad_words(self, words: list[str]) -> list[list[int]]:
        """Each bad word's token sequences, as vLLM bans them: the word alone and after a space."""
        out = []
        for word in words:
            for text in (word, " " + word.lstrip()):
                ids = self._tokenizer.encode(text, add_bos=False)
                if ids and ids not in out:
                    out.append(ids)
        return out


def ban_bad_words(logits: np.ndarray, sequences: list[list[int]], output_ids: list[int]) -> None:
    """vLLM's bad_words: a word's last token is banned where the output already ends in the tokens before it."""
    for ids in sequences:
        prefix = ids[:-1]
        if not prefix or (len(output_ids) >= len(prefix) and output_ids[-len(prefix):] == prefix):
            logits[ids[-1]] = -np.inf
