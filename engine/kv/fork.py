"""A fork of a sequence's KV cache, for a forward that must not change the sequence (the completeness check).

The fork reads the sequence's cached positions where they are (its slab slot or its private arrays), without a copy,
and never writes them: its own new tokens get K and V in arrays of their own, sized to those tokens, dropped with the
fork. Attention over the two parts is exact: the scores of the shared prefix and of the fork's own tokens are
normalized together (one running maximum and one sum over both), as in shared-prefix ("cascade") attention.
"""

from __future__ import annotations

import numpy as np

from pdserve.engine.kv.cache import SequenceKV

F32 = np.float32


class ForkKV:
    """The parent's first ``base`` positions, read only, followed by the fork's own tokens.

    It offers what a forward needs of a cache (``length``, ``reserve``, ``write``; never a slab member), so a fork runs
    through the same forward as any sequence; only attention (:func:`attend_fork`) reads the two parts apart.
    """

    slot = None  # never in the slab: the forward attends to a fork on its own

    def __init__(self, parent: SequenceKV) -> None:
        self.parent = parent
        self.base = parent.length
        self.config = parent.config
        self.block_tokens = parent.block_tokens
        self.own = SequenceKV(parent.config, parent.block_tokens)

    @property
    def length(self) -> int:
        return self.base + self.own.length

    @length.setter
    def length(self, value: int) -> None:
        if value < self.base:
            raise ValueError(f"a fork cannot drop its parent's {self.base} positions")
        self.own.length = value - self.base

    def reserve(self, tokens: int) -> None:
        self.own.reserve(max(0, tokens - self.base))

    def write(self, layer: int, start: int, k_new: np.ndarray, v_new: np.ndarray) -> None:
        if start < self.base:
            raise ValueError(f"a fork never writes its parent's positions (start {start} < {self.base})")
        self.own.write(layer, start - self.base, k_new, v_new)


def attend_fork(qg: np.ndarray, fork: ForkKV, layer: int, start: int, group_size: int) -> np.ndarray:
    """Causal attention of a fork's new queries over the parent's prefix and the fork's own keys.

    ``qg``: the scaled queries, [kv_heads, n * group_size, head_dim], a query's heads adjacent (as ``LlamaModel._attend``
    lays them out); the n queries sit at positions start..start + n - 1. Returns [kv_heads, n * group_size, head_dim].
    """
    kvh, rows, _ = qg.shape
    n = rows // group_size
    own_start = start - fork.base
    own_end = own_start + n
    # views [kv_heads, base, head_dim]; a 16-bit cache is widened (a copy of the prefix, dropped with the forward)
    prefix_k = fork.parent.k[layer][:, :fork.base].astype(F32, copy=False)
    prefix_v = fork.parent.v[layer][:, :fork.base].astype(F32, copy=False)
    own_k, own_v = fork.own.k[layer][:, :own_end], fork.own.v[layer][:, :own_end]
    prefix_scores = np.matmul(qg, prefix_k.transpose(0, 2, 1))  # [kv_heads, rows, base]: every prefix key is visible
    own_scores = np.matmul(qg, own_k.transpose(0, 2, 1))  # [kv_heads, rows, own_end]
    later = np.arange(own_end)[None, :] > (own_start + np.arange(n))[:, None]  # [n, own_end]: keys after the query
    own_scores.reshape(kvh, n, group_size, own_end)[...] += np.where(later, F32(-np.inf), F32(0))[None, :, None, :]
    peak = np.maximum(prefix_scores.max(axis=-1, initial=-np.inf), own_scores.max(axis=-1))[..., None]
    prefix_w = np.exp(prefix_scores - peak)
    own_w = np.exp(own_scores - peak)
    out = np.matmul(prefix_w, prefix_v)
    out += np.matmul(own_w, own_v)
    out /= (prefix_w.sum(axis=-1) + own_w.sum(axis=-1))[..., None]
    return out.astype(F32, copy=False)
