"""Decode attention over the KV slab as compiled loops: one query per sequence, every sequence's keys read once.

numpy can only express a decode step's attention as one small matrix product per (sequence, KV head): a [g, D] x
[D, T] product that BLAS runs far below memory speed, with a call's overhead each. These two kernels (compiled by
numba) walk each sequence's contiguous K and V rows directly, read only its own ``length`` positions (no padding
mask), and index slots in place (no gather of the batch's KV). The softmax between them runs over the whole batch's
scores at once (engine/model/kernels/fast_exp.py for its exp).

A 16-bit cache (engine/kv/dtype.py) is read as its integer bits and widened to float32 element by element (each
cache type gets its own compiled loops); everything else is float32.

Summation order differs from a BLAS product (the sums over D and over T run in the loops' order), which is why
tests compare against a float64 reference instead of bit for bit.
"""

from __future__ import annotations

import numba
import numpy as np

from pdserve.engine.kv.dtype import kernel_view
from pdserve.engine.model.kernels.compiled import compiled
from pdserve.engine.model.kernels.fast_exp import exp_le0
from pdserve.engine.model.kernels.llvm_ops import widen
from pdserve.engine.model.kernels.parallel import Parallel

F32 = np.float32
# reassociation lets the compiler vectorize the dot products; no flag that assumes away inf (masked scores are -inf)
_FASTMATH = {"reassoc", "contract"}
# keys per step (summed over sequences and heads) below which one thread does it all; a pure decode step below it
# also leaves its products to BLAS's threads (LlamaModel._split_pays): with SmolLM2's 3 KV heads, batch 32 splits
# from a context of about 341 tokens, batch 16 from about 683
_MIN_SPLIT_KEYS = 1 << 15
# keys per step (summed as above) from which a step whose products run quantized on numba's threads, and that does
# not split on ours, runs its attention on numba's two as well, each (sequence, head) pair on one of them: a parallel
# region costs microseconds while numba's threads still spin after the products, a Python thread's hand-off tens
MIN_NUMBA_SPLIT_KEYS = 1 << 10


@compiled(fastmath=_FASTMATH)
def _scores(q, keys, slots, lengths, lo, hi, t0, t1, out):  # pragma: no cover - compiled
    """out[b, j, i, t] = q[b, j, i] . keys[slots[b], j, t] for t < lengths[b], -inf after; tasks (b, j) in lo..hi,
    positions t in t0..t1."""
    n_kv, group, dim = q.shape[1], q.shape[2], q.shape[3]
    for task in range(lo, hi):
        b, j = task // n_kv, task % n_kv
        n = min(lengths[b], t1)
        kb, qb, ob = keys[slots[b], j], q[b, j], out[b, j]
        for t in range(t0, n):
            row = kb[t]
            for i in range(group):
                qi = qb[i]
                acc = np.float32(0.0)
                for d in range(dim):
                    acc += qi[d] * widen(row[d])
                ob[i, t] = acc
        for i in range(group):
            for t in range(max(n, t0), t1):
                ob[i, t] = -np.inf


@compiled(fastmath=_FASTMATH)
def _weighted_values(probs, values, slots, lengths, lo, hi, t0, t1, out):  # pragma: no cover - compiled
    """out[b, j, i] = sum over t in t0..min(t1, lengths[b]) of probs[b, j, i, t] * values[slots[b], j, t]; tasks (b, j)
    in lo..hi. Two value rows per pass over the outputs: half the loads and stores of ``out`` (alone, 30 layers at
    batch 32 and context 512: 45.2 -> 35.8 ms)."""
    n_kv, group, dim = probs.shape[1], probs.shape[2], out.shape[3]
    for task in range(lo, hi):
        b, j = task // n_kv, task % n_kv
        vb, pb, ob = values[slots[b], j], probs[b, j], out[b, j]
        n = min(lengths[b], t1)
        for i in range(group):
            for d in range(dim):
                ob[i, d] = 0.0
        t = t0
        while t + 1 < n:
            row, next_row = vb[t], vb[t + 1]
            for i in range(group):
                w, next_w, oi = pb[i, t], pb[i, t + 1], ob[i]
                for d in range(dim):
                    oi[d] += w * widen(row[d]) + next_w * widen(next_row[d])
            t += 2
        if t < n:
            row = vb[t]
            for i in range(group):
                w, oi = pb[i, t], ob[i]
                for d in range(dim):
                    oi[d] += w * widen(row[d])


class DecodeAttention:
    """Runs the kernels over a batch; given a two-way ``parallel`` (engine/model/kernels/parallel.py), split in two halves when
    asked and there is enough work. The model asks when its products run on the same two threads: beside BLAS's
    own threads (which spin on the second core after each product) the split measured slower."""

    def __init__(self, parallel: Parallel | None = None, min_split_keys: int = _MIN_SPLIT_KEYS) -> None:
        self.parallel = parallel or Parallel(1)
        self.min_split_keys = min_split_keys

    def __call__(self, q: np.ndarray, keys: np.ndarray, values: np.ndarray, slots: np.ndarray,
                 lengths: np.ndarray, split: bool = True, numba_threads: int = 1) -> np.ndarray:
        """q: [B, KVH, g, D] (pre-scaled); keys, values: [slots, KVH, capacity, D] (float32, float16 or bfloat16);
        slots, lengths: [B] int64. ``numba_threads`` 2: where it does not split on ``parallel``'s threads, the
        attention runs on numba's two, each (sequence, head) pair whole on one of them, so the result is the one
        thread's to the bit.

        Returns [B, KVH, g, D]: each query's softmax-weighted values over its sequence's first ``lengths`` keys.
        """
        keys, values = kernel_view(keys), kernel_view(values)
        if not split or not self.splits(lengths, q.shape[1]):
            if numba_threads >= 2 and self.numba_splits(lengths, q.shape[1]):
                return _attend_two_threads(q, keys, values, slots, lengths, _balanced_cut(lengths, q.shape[1]))
            return _attend_one_thread(q, keys, values, slots, lengths)
        b, n_kv, group, dim = q.shape
        scores = np.empty((b, n_kv, group, int(lengths.max())), dtype=F32)
        out = np.empty((b, n_kv, group, dim), dtype=F32)
        with self.parallel.single_threaded_blas():
            self._split(q, keys, values, slots, lengths, scores, out)
        return out

    def splits(self, lengths: np.ndarray, n_kv: int) -> bool:
        """Whether a batch of these lengths is enough work to split in two (on a two-way ``parallel``)."""
        return self.parallel.threads > 1 and int(lengths.sum()) * n_kv >= self.min_split_keys

    @staticmethod
    def numba_splits(lengths: np.ndarray, n_kv: int) -> bool:
        """Whether a batch of these lengths, not split on ``parallel``'s threads, is worth numba's two: two (sequence,
        head) pairs at least and MIN_NUMBA_SPLIT_KEYS keys."""
        return lengths.size * n_kv >= 2 and int(lengths.sum()) * n_kv >= MIN_NUMBA_SPLIT_KEYS

    def _split(self, q: np.ndarray, keys: np.ndarray, values: np.ndarray, slots: np.ndarray, lengths: np.ndarray,
               scores: np.ndarray, out: np.ndarray) -> None:
        """The two kernels with their work in two halves, by (sequence, head) pair or, for few pairs, by position."""
        b, n_kv = q.shape[:2]
        tasks, width = b * n_kv, scores.shape[-1]
        both = self.parallel.both
        if tasks >= 8:  # enough (sequence, head) pairs to share out evenly: half of them each
            mid = tasks // 2
            both(_scores, (q, keys, slots, lengths, 0, mid, 0, width, scores),
                 (q, keys, slots, lengths, mid, tasks, 0, width, scores))
            _softmax(scores)
            both(_weighted_values, (scores, values, slots, lengths, 0, mid, 0, width, out),
                 (scores, values, slots, lengths, mid, tasks, 0, width, out))
        else:  # few sequences, long contexts: half of the positions each, the two partial outputs summed
            mid = width // 2
            both(_scores, (q, keys, slots, lengths, 0, tasks, 0, mid, scores),
                 (q, keys, slots, lengths, 0, tasks, mid, width, scores))
            _softmax(scores)
            second = np.empty_like(out)
            both(_weighted_values, (scores, values, slots, lengths, 0, tasks, 0, mid, out),
                 (scores, values, slots, lengths, 0, tasks, mid, width, second))
            out += second


def _balanced_cut(lengths: np.ndarray, n_kv: int) -> int:
    """The (sequence, head) pair at which the first half ends: the pairs before it hold about half of the keys."""
    keys = np.repeat(lengths, n_kv).cumsum()
    return int(min(max(1, np.searchsorted(keys, keys[-1] / 2) + 1), keys.size - 1))


@compiled(parallel=True)
def _attend_two_threads(q, keys, values, slots, lengths, cut):  # pragma: no cover - compiled
    """:func:`_attend_one_thread` with pairs 0..cut on one of numba's threads and the rest on the other."""
    b, n_kv, group, dim = q.shape
    width = lengths.max()
    scores = np.empty((b, n_kv, group, width), dtype=F32)
    out = np.empty((b, n_kv, group, dim), dtype=F32)
    rows = scores.reshape(-1, width)
    for half in numba.prange(2):
        lo, hi = (0, cut) if half == 0 else (cut, b * n_kv)
        _scores(q, keys, slots, lengths, lo, hi, 0, width, scores)
        _softmax_rows(rows[lo * group:hi * group])
        _weighted_values(scores, values, slots, lengths, lo, hi, 0, width, out)
    return out


@compiled()
def _attend_one_thread(q, keys, values, slots, lengths):  # pragma: no cover - compiled
    """The two passes and the softmax between them in one call (a step at a small batch makes 30 of these)."""
    b, n_kv, group, dim = q.shape
    width = lengths.max()
    scores = np.empty((b, n_kv, group, width), dtype=F32)
    out = np.empty((b, n_kv, group, dim), dtype=F32)
    _scores(q, keys, slots, lengths, 0, b * n_kv, 0, width, scores)
    _softmax_rows(scores.reshape(-1, width))
    _weighted_values(scores, values, slots, lengths, 0, b * n_kv, 0, width, out)
    return out


def _softmax(scores: np.ndarray) -> None:
    _softmax_rows(scores.reshape(-1, scores.shape[-1]))


@compiled(fastmath=_FASTMATH)
def _softmax_rows(scores):  # pragma: no cover - compiled
    """Each row of ``scores`` [rows, width] (masked entries -inf) replaced by its softmax, in one compiled pass."""
    for i in range(scores.shape[0]):
        row = scores[i]
        top = row[0]
        for t in range(row.size):
            top = max(top, row[t])
        total = F32(0.0)
        for t in range(row.size):
            row[t] = exp_le0(row[t] - top)
            total += row[t]
        inv = F32(1.0) / total
        for t in range(row.size):
            row[t] *= inv
