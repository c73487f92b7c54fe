"""Decode and prefill step times with and without the engine's own two threads for large batches, interleaved in one
process (the README's Benchmarks section quotes its output).

"before" is the engine as it was: products left to BLAS's threads (``MIN_SPLIT_ROWS`` out of reach), the decode
attention on one thread, and the value kernel that took one row per pass over its outputs (kept here, compiled the
same way). "after" is the engine as it is. Each figure is the best of three medians of three steps.

    .venv/bin/python scripts/ab_engine_threads.py
"""

from __future__ import annotations

import numpy as np

from pdserve.engine import decode_attention, model
from pdserve.engine.bench import _decoding_sequences, _timed
from pdserve.engine.compiled import compiled
from pdserve.engine.runtime import Runtime

ROWS = 1 << 30  # a forward never has this many rows: the products stay with BLAS


@compiled(fastmath=decode_attention._FASTMATH)
def _weighted_values_one_row(probs, values, slots, lengths, lo, hi, t0, t1, out):  # pragma: no cover - compiled
    n_kv, group, dim = probs.shape[1], probs.shape[2], out.shape[3]
    for task in range(lo, hi):
        b, j = task // n_kv, task % n_kv
        vb, pb, ob = values[slots[b], j], probs[b, j], out[b, j]
        for i in range(group):
            for d in range(dim):
                ob[i, d] = 0.0
        for t in range(t0, min(lengths[b], t1)):
            row = vb[t]
            for i in range(group):
                w = pb[i, t]
                oi = ob[i]
                for d in range(dim):
                    oi[d] += w * row[d]


def use(after: bool, min_split_rows: int, kernel) -> None:
    model.MIN_SPLIT_ROWS = min_split_rows if after else ROWS
    decode_attention._weighted_values = kernel if after else _weighted_values_one_row


def main() -> None:
    runtime = Runtime.load(None, slab_seqs=32, slab_tokens=2048 + 24)
    args = (model.MIN_SPLIT_ROWS, decode_attention._weighted_values)
    for batch, context in [(32, 512), (32, 2048), (32, 64), (8, 512), (1, 512), (1, 2048)]:
        seqs = _decoding_sequences(runtime, batch, context, 24)
        ms = {"before": [], "after": []}
        for _ in range(3):
            for name in ms:
                use(name == "after", *args)
                runtime.decode_step(seqs)
                ms[name].append(np.median([_timed(lambda s=seqs: runtime.decode_step(s)) for _ in range(3)]) * 1e3)
        for seq in seqs:
            runtime.free(seq)
        before, after = min(ms["before"]), min(ms["after"])
        print(f"decode batch {batch:2d} context {context:4d}: before {before:6.1f} ms  after {after:6.1f} ms  "
              f"{before / after:.2f}x", flush=True)
    rng = np.random.default_rng(1)
    for n in (128, 512, 2048):
        tokens = rng.integers(3, runtime.config.vocab_size, n).tolist()

        def prefill(tokens: list[int] = tokens) -> None:
            runtime.model.prefill([runtime.model.new_kv(capacity=len(tokens) + 16)], [tokens])

        ms = {"before": [], "after": []}
        for _ in range(2):
            for name in ms:
                use(name == "after", *args)
                prefill()
                ms[name].append(min(_timed(prefill) for _ in range(2)) * 1e3)
        before, after = min(ms["before"]), min(ms["after"])
        print(f"prefill {n:4d} tokens:             before {before:6.1f} ms  after {after:6.1f} ms  "
              f"{before / after:.2f}x", flush=True)


if __name__ == "__main__":
    main()
