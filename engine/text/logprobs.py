"""Log-probabilities of generated tokens, computed in float32 only for requests that ask for them.

Of which distribution: the raw model output, i.e. the log-softmax of the logits before penalties, temperature,
top-k / top-p / min-p truncation and min_tokens masking. That is vLLM's default (``logprobs_mode=raw_logprobs``)
and what OpenAI's API reports: a token's log-probability does not change with the sampling settings, and greedy
requests (temperature 0) still get a real distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TokenLogprobs:
    token_id: int
    logprob: float
    rank: int  # 1 = the most likely token
    top: list[tuple[int, float]]  # (token id, logprob) of the most likely tokens, most likely first


def token_logprobs(logits: np.ndarray, token_id: int, k: int) -> TokenLogprobs:
    """``token_id``'s log-probability under log_softmax(logits) (one row, float32) and the ``k`` most likely tokens."""
    row = np.asarray(logits, dtype=np.float32)
    top_logit = row.max()
    log_z = top_logit + np.log(np.exp(row - top_logit).sum(dtype=np.float32))
    chosen = row[token_id]
    rank = 1 + int(np.count_nonzero(row > chosen))
    top: list[tuple[int, float]] = []
    if k > 0:
        best = np.argpartition(-row, k - 1)[:k] if k < row.size else np.arange(row.size)
        best = best[np.argsort(-row[best], kind="stable")]
        top = [(int(t), float(row[t] - log_z)) for t in best]
    return TokenLogprobs(token_id, float(chosen - log_z), rank, top)
