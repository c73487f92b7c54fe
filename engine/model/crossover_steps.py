"""The whole decode steps the quantized/float32 crossover is timed on (crossover.step_crossover), for a model with two
threads of its own: decode steps of ``rows`` sequences that have CROSSOVER_CONTEXT tokens cached in a slab (zeros:
timing does not depend on the values), one token each, on either weight form. Short contexts: the attention, the
same work on both forms, stays small."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pdserve.engine.kv.cache import KVSlab, SequenceKV
from pdserve.engine.model.crossover import CONFIRMATIONS, REPEATS, ROW_COUNTS, RUN_STEPS

if TYPE_CHECKING:
    from pdserve.engine.model.llama import LlamaModel

CROSSOVER_CONTEXT = 64  # tokens cached by the sequences of the decode steps that time the crossover
STEPS_TIMED_PER_BATCH = CONFIRMATIONS * REPEATS * 2 * RUN_STEPS  # the most steps one prepared batch runs


def decode_step_runs(model: "LlamaModel") -> tuple[Callable, Callable, Callable[[int], list[SequenceKV]]]:
    """(quantized step, float32 step, batch): ``batch(rows)`` prepares a batch in a slab of its own, each step runs
    one decode step of it with the model's weight path forced to that form (and restored after)."""
    room = CROSSOVER_CONTEXT + STEPS_TIMED_PER_BATCH  # every step adds a token to each sequence
    slab = KVSlab(model.config, max(ROW_COUNTS), room, kv_dtype=model.kv_dtype)

    def batch(rows: int) -> list[SequenceKV]:
        for kv in list(slab.members):
            slab.remove(kv)
        caches = [model.new_kv(capacity=CROSSOVER_CONTEXT) for _ in range(rows)]
        for kv in caches:
            kv.length = CROSSOVER_CONTEXT
            slab.add(kv, room)
        return caches

    def step(path: str) -> Callable[[list[SequenceKV]], None]:
        def run(caches: list[SequenceKV]) -> None:
            auto, model.weight_path = model.weight_path, path
            try:
                model.decode_step(caches, [1] * len(caches), slab)
            finally:
                model.weight_path = auto
        return run
    return step("quantized"), step("float32"), batch
