"""Who attends how in one forward (engine/model/llama.py): worked out once per forward from the caches and the slab, read
by every layer."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from pdserve.engine.kv.cache import KVSlab, SequenceKV


@dataclass
class AttentionPlan:
    """Who attends how in one forward, worked out once and read by every layer.

    ``slab_rows`` are the batch rows (one per sequence) of single-token sequences held in the slab, in slot order,
    with their ``slots`` and their ``lengths`` after this step; ``singles`` are (sequence index, first row, end row) of every
    other sequence, attended to on its own.
    """

    caches: list[SequenceKV]
    counts: list[int]
    starts: list[int]
    offsets: np.ndarray  # [n_sequences + 1]: first row of each sequence
    positions: np.ndarray  # [N]: position of every new token
    slab: KVSlab | None
    slab_rows: np.ndarray
    slots: np.ndarray
    lengths: np.ndarray
    singles: list[tuple[int, int, int]]

    @cached_property
    def all_slab(self) -> bool:
        """Every row is a slab row, in slot order: attention reads and writes the rows as they are (worked out once:
        every layer asks)."""
        return not self.singles and np.array_equal(self.slab_rows, np.arange(len(self.caches)))

    @classmethod
    def build(cls, caches: list[SequenceKV], counts: list[int], slab: KVSlab | None,
              context_length: int) -> AttentionPlan:
        starts = [kv.length for kv in caches]
        for start, n in zip(starts, counts):
            if start + n > context_length:
                raise ValueError(f"sequence of {start + n} tokens exceeds the context length {context_length}")
        offsets = np.cumsum([0] + counts)
        positions = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, counts)])
        in_slab = [slab is not None and n == 1 and slab.holds(kv) for kv, n in zip(caches, counts)]
        for kv, start, n, member in zip(caches, starts, counts, in_slab):
            if member and start + n > slab.capacity:
                raise RuntimeError("slab members must be placed (KVSlab.place) before the forward")
            if not member:
                kv.reserve(start + n)
        batched = sorted((i for i, member in enumerate(in_slab) if member), key=lambda i: caches[i].slot)
        slots = np.array([caches[i].slot for i in batched], dtype=np.int64)
        lengths = np.array([starts[i] + 1 for i in batched], dtype=np.int64)
        return cls(
            caches=caches, counts=counts, starts=starts, offsets=offsets, positions=positions, slab=slab,
            slab_rows=offsets[batched] if batched else np.zeros(0, dtype=np.int64), slots=slots, lengths=lengths,
            singles=[(i, offsets[i], offsets[i + 1]) for i, member in enumerate(in_slab) if not member])
