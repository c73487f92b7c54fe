"""Where the quantized products stop paying: measured once per process, on this machine, at model load.

A product with the quantized weights reads 4-8x fewer bytes than one with float32 weights but does its arithmetic
in compiled loops that unpack the weights and multiply-add at about half of BLAS's GEMM rate, while BLAS reuses each
float32 weight across rows at full speed. So the quantized form wins for a few rows and loses for many; where it stops winning
depends on the machine's bandwidth and arithmetic, its threads, and the model's shapes. :func:`measure_crossover`
times one decode step's products (every layer's matrices and the head) both ways at row counts chosen by bisection and returns
the largest count at which the quantized ones were faster.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable

import numba
import numpy as np

from pdserve.engine.model.kernels.compiled import compiled
from pdserve.engine.model.quantized import QuantizedWeights

log = logging.getLogger("pdserve.engine")

ROW_COUNTS = (1, 2, 4, 8, 16, 24, 32, 48, 64)  # batch sizes, the first tried first, then bisected
REPEATS = 3  # each timing is the best of this many runs
CONFIRMATIONS = 2  # times the first row count is timed before a loss of the quantized products there counts
BUDGET_S = 5.0  # the search stops here, keeping what it found (a slow or busy machine: about a second otherwise)
# counts timed whatever the budget (the first and two bisection steps): on a busy machine one lost bisection step
# could spend the budget and leave the crossover at one row, the float32 path from batch 2
MIN_PROBES = 3
RUN_STEPS = 3  # decode steps a timed run of one weight form takes (step_crossover)
CROSSOVER_ENV = "PDSERVE_QUANT_CROSSOVER"  # a batch size here is used as it is, nothing measured
_measured: dict[tuple, int] = {}  # per process: (model fingerprint, threads) -> crossover


def product_pairs(quantized: QuantizedWeights, dense: Iterable[np.ndarray], threads: int) -> list[tuple]:
    """(quantized product, float32 product) for every matrix that has both forms, as callables of ``x``."""
    return [(lambda x, q=q: q(x, threads=threads), lambda x, w=w: np.matmul(x, w))
            for q, w in zip(step_matrices(quantized), dense) if q is not None]


def measure_crossover(pairs: list[tuple[Callable, Callable]], inputs: Callable[[int], list[np.ndarray]],
                      row_counts: tuple[int, ...] = ROW_COUNTS, timer: Callable[[], float] = time.perf_counter,
                      repeats: int = REPEATS, budget_s: float = BUDGET_S) -> int:
    """The largest row count in ``row_counts`` at which the quantized products ran faster than the float32 ones (0:
    not even the first), found by bisection after the first count: the quantized products' cost grows faster with
    the rows than BLAS's, so once they lose they lose at every larger count, and bisection reaches the batches that
    matter within the budget on a slow or busy machine, where trying every count in turn stopped at one or two.
    ``pairs``: (quantized, float32) products of one step; ``inputs(rows)``: an activation ``[rows, in]`` for each
    pair. Past ``budget_s`` no further count is tried once MIN_PROBES were.

    The two forms are timed interleaved (quantized, float32, float32, quantized, ...), each the best of ``repeats``,
    so that a burst of other work on a shared machine slows both rather than one; and a loss at the first count is
    timed once more before it counts, since a single loss to noise there would send every forward, batch 1 included,
    down the slower path for the life of the process (a bisection step lost to noise costs less: a smaller crossover,
    and timing each twice made a load on a busy machine take twice as long)."""
    def wins(rows: int, tries: int = 1) -> bool:
        xs = inputs(rows)
        return any(_quantized_wins(pairs, xs, timer, repeats) for _ in range(tries))

    start = timer()
    if not row_counts or not wins(row_counts[0], CONFIRMATIONS):
        return 0
    crossover, lo, hi = row_counts[0], 1, len(row_counts)  # row_counts[:lo] won, row_counts[hi:] lost
    probes = 1
    while lo < hi and (probes < MIN_PROBES or timer() - start <= budget_s):
        mid, probes = (lo + hi) // 2, probes + 1
        if wins(row_counts[mid]):
            crossover, lo = row_counts[mid], mid + 1
        else:
            hi = mid
    return crossover


def _quantized_wins(pairs: list[tuple[Callable, Callable]], xs: list[np.ndarray], timer: Callable[[], float],
                    repeats: int) -> bool:
    """Whether the best of ``repeats`` quantized steps beat the best of as many float32 ones, timed interleaved."""
    def step(products: list[Callable]) -> float:
        began = timer()
        for product, x in zip(products, xs):
            product(x)
        return timer() - began

    quantized, dense = [q for q, _ in pairs], [f for _, f in pairs]
    best = {"q": float("inf"), "f": float("inf")}
    for i in range(repeats):
        order = (("q", quantized), ("f", dense)) if i % 2 == 0 else (("f", dense), ("q", quantized))
        for name, products in order:
            best[name] = min(best[name], step(products))
    return best["q"] < best["f"]


def model_crossover(key: tuple, quantized: QuantizedWeights, dense: list[np.ndarray], threads: int) -> int:
    """:func:`measure_crossover` for a model's matrices (``dense``: their float32 forms, ``[in, out]``, in the order
    of :func:`product_pairs`), measured once per process and key."""
    def measure() -> int:
        pairs = product_pairs(quantized, dense, threads)
        widths = [w.shape[0] for w, q in zip(dense, step_matrices(quantized)) if q is not None]
        rng = np.random.default_rng(0)
        for (product, dense_product), width in zip(pairs, widths):  # compile, start threads, load pages: untimed
            product(np.ones((2, width), np.float32))
            dense_product(np.ones((2, width), np.float32))
        return measure_crossover(pairs, lambda rows: [rng.standard_normal((rows, n), dtype=np.float32) for n in widths])
    return cached_crossover(key, measure)


def step_crossover(key: tuple, quantized_step: Callable, float32_step: Callable,
                   batch: Callable[[int], object]) -> int:
    """:func:`measure_crossover` over runs of whole decode steps: ``quantized_step(b)`` and ``float32_step(b)`` run one
    step of the batch ``batch(rows)`` prepared (its preparation untimed), each timed in runs of RUN_STEPS steps.

    Where two threads run the products, timing them alone misleads: after float32 products BLAS's idle threads spin
    on the second core, and quantized products timed right after lose half their speed for the next few steps (on
    the 2-core machine a quantized step of 4 rows took 13 ms in a run of its own and 25-28 ms for four steps after a
    float32 run; at 8 rows 21 ms, and 45, 42, 30, 22 after one). Timed product by product, alternating, the
    crossover came out at 4 rows where steps of 16 rows are still faster quantized (37 against 44 ms). Serving runs
    one form step after step, so the crossover compares runs, the best of which follows a run of the same form."""
    def run(step: Callable) -> Callable:
        return lambda b: [step(b) for _ in range(RUN_STEPS)]

    def measure() -> int:
        warm = batch(2)
        quantized_step(warm)  # compile, start threads, load pages: untimed
        float32_step(warm)
        return measure_crossover([(run(quantized_step), run(float32_step))], lambda rows: [batch(rows)])
    return cached_crossover(key, measure)


def cached_crossover(key: tuple, measure: Callable[[], int]) -> int:
    """``measure()`` once per process and key, unless :data:`CROSSOVER_ENV` sets the crossover."""
    if os.environ.get(CROSSOVER_ENV):
        return int(os.environ[CROSSOVER_ENV])
    if key not in _measured:
        _measured[key] = measure()
        log.info("quantized weights up to a batch of %d rows (measured), float32 BLAS above", _measured[key])
    return _measured[key]


def step_matrices(quantized: QuantizedWeights) -> list:
    """Every matrix of a decode step in order (each layer's qkv, wo, gate_up, down, then the head); None where the
    file's type has no quantized kernel."""
    return [m for layer in quantized.layers for m in (layer.qkv, layer.wo, layer.gate_up, layer.down)] + [
        quantized.output]


def parallel_threads(wanted: int) -> int:
    """How many threads the quantized products may split over: ``wanted``, unless numba's threading layer is its
    fallback work queue, whose parallel region costs about 0.1 ms (measured), more than most products take."""
    if wanted < 2:
        return 1
    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel region has run yet: run an empty one to find out
        _start_threads(np.zeros(2))
        layer = numba.threading_layer()
    return wanted if layer in ("omp", "tbb") else 1


@compiled(parallel=True)
def _start_threads(a):  # pragma: no cover - compiled
    for i in numba.prange(a.size):
        a[i] += 1.0
