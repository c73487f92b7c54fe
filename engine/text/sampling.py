"""Turning one sequence's logits into its next token: token masks (structured outputs, allowed_token_ids, bad_words),
penalties, temperature, top-k, top-p, min-p, seeded RNG."""

from __future__ import annotations

import numpy as np

from pdserve.engine.params import SamplingParams
from pdserve.engine.text.structured import GrammarConstraint, ban_bad_words


class Sampler:
    """Sampling state of one sequence (its RNG and the counts the penalties need)."""

    def __init__(self, params: SamplingParams, vocab_size: int, prompt_ids: list[int],
                 eos_ids: frozenset[int] = frozenset(), grammar: GrammarConstraint | None = None,
                 bad_words: list[list[int]] | None = None) -> None:
        self.params = params
        self.grammar = grammar
        self.bad_words = bad_words or []
        self.output_ids: list[int] = []  # only kept for bad_words
        self.allowed_ids = np.asarray(sorted(set(params.allowed_token_ids)), dtype=np.int64)
        self.rng = np.random.default_rng()  # unseeded requests
        self.output_counts = np.zeros(vocab_size, dtype=np.int32)
        self.prompt_mask = np.zeros(vocab_size, dtype=bool)
        self.prompt_mask[np.asarray(prompt_ids, dtype=np.int64)] = True
        # ids that min_tokens keeps from being sampled too early
        gated = set(params.stop_token_ids) | (set() if params.ignore_eos else set(eos_ids))
        self.min_tokens_gated = np.asarray(sorted(gated), dtype=np.int64)
        self.generated = 0
        self._uses_penalties = (params.repetition_penalty != 1.0 or params.presence_penalty != 0.0
                                or params.frequency_penalty != 0.0)
        self._masked = grammar is not None or bool(self.bad_words) or self.allowed_ids.size > 0

    @property
    def plain_greedy(self) -> bool:
        """True when the next token is simply the argmax (lets the runtime take it from one batched argmax)."""
        p = self.params
        gating = self.generated < p.min_tokens and self.min_tokens_gated.size
        return p.greedy and not self._uses_penalties and not self._masked and not gating

    def sample(self, logits: np.ndarray) -> int:
        """Pick the next token from logits [vocab] (float32). The sequence records it (Sequence.append_token)."""
        p = self.params
        gating = self.generated < p.min_tokens and self.min_tokens_gated.size
        if self._uses_penalties or self._masked or gating:
            logits = logits.copy()
        if self._masked:
            self._apply_masks(logits)
        if self._uses_penalties:
            self._apply_penalties(logits)
        if gating:
            gated = logits[self.min_tokens_gated].copy()
            logits[self.min_tokens_gated] = -np.inf
            if self._masked and not np.isfinite(logits).any():  # the masks leave only the end: the end wins
                logits[self.min_tokens_gated] = gated
        return int(np.argmax(logits)) if p.greedy else self._draw(logits)

    def record(self, token: int) -> None:
        """Count a token of this sequence's output (also one sampled in another process, e.g. by prefill)."""
        self.output_counts[token] += 1
        self.generated += 1
        if self.grammar is not None:
            self.grammar.advance(token)
        if self.bad_words:
            self.output_ids.append(token)

    def _apply_masks(self, logits: np.ndarray) -> None:
        """Tokens the request rules out get -inf: those outside allowed_token_ids, a bad word's last token, and
        those the grammar does not allow next (the end of the text included, until the grammar is complete)."""
        if self.allowed_ids.size:
            keep = np.zeros(logits.shape[0], dtype=bool)
            keep[self.allowed_ids] = True
            logits[~keep] = -np.inf
        if self.bad_words:
            ban_bad_words(logits, self.bad_words, self.output_ids)
        if self.grammar is not None:
            logits[~self.grammar.allowed()] = -np.inf

    def _generator(self) -> np.random.Generator:
        """Seeded: a generator derived from (seed, position), so the token at position i is the same whether one
        process samples the whole sequence or prefill samples the first token and decode the rest."""
        if self.params.seed is None:
            return self.rng
        return np.random.default_rng([self.params.seed, self.generated])

    def _apply_penalties(self, logits: np.ndarray) -> None:
        p = self.params
        if p.repetition_penalty != 1.0:
            seen = self.prompt_mask | (self.output_counts > 0)
            penalty = np.float32(p.repetition_penalty)
            logits[seen] = np.where(logits[seen] > 0, logits[seen] / penalty, logits[seen] * penalty)
        if p.frequency_penalty:
            logits -= np.float32(p.frequency_penalty) * self.output_counts.astype(np.float32)
        if p.presence_penalty:
            logits -= np.float32(p.presence_penalty) * (self.output_counts > 0).astype(np.float32)

    def _draw(self, logits: np.ndarray) -> int:
        p = self.params
        scaled = logits.astype(np.float64) / p.temperature
        if p.top_k > 0 and p.top_k < scaled.size:
            candidates = np.argpartition(scaled, -p.top_k)[-p.top_k:]
        else:
            candidates = np.flatnonzero(np.isfinite(scaled))
        order = candidates[np.argsort(-scaled[candidates], kind="stable")]  # best first
        probs = np.exp(scaled[order] - scaled[order[0]])
        probs /= probs.sum()
        keep = probs.size
        if p.top_p < 1.0:
            # smallest prefix whose mass reaches top_p (the top token always stays)
            keep = min(keep, int(np.searchsorted(np.cumsum(probs), p.top_p)) + 1)
        if p.min_p > 0.0:
            keep = min(keep, int(np.count_nonzero(probs >= p.min_p * probs[0])))
        probs = probs[:keep] / probs[:keep].sum()
        return int(order[self._generator().choice(keep, p=probs)])
