"""Products with GGUF's quantized blocks (engine/model/quantized.py) against float64, per type; the model's choice of path
by the measured crossover; and the crossover search itself with scripted timings."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

from pdserve.engine.model import quantized as quantized_module
from pdserve.engine.model.crossover import measure_crossover
from pdserve.engine.model.crossover_steps import decode_step_runs
from pdserve.engine.model.quantized import QuantizedMatrix, stacked, tile_rows
from pdserve.engine.runtime import Runtime
from tests.tiny_model import write_tiny_model

TYPES = (Q.Q4_0, Q.Q4_1, Q.Q8_0)
# the stated tolerance: a quantized product is within this much of the float64 product of the dequantized matrix,
# relative to its largest entry (float32 sums in another order; the dense float32 path is held to the same)
PRODUCT_RTOL = 1e-5
# the model's logits on the quantized path against its float32 path, relative to the largest logit
LOGITS_RTOL = 1e-4


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [1, 3, 9])
def test_quantized_product_equals_the_dequantized_matrix_in_float64(qtype, rows):
    rng = np.random.default_rng(rows)
    out, inputs = 200, 96  # 200 rows: padded to 208, one odd tile; 96 inputs: 3 blocks a row
    weights = rng.standard_normal((out, inputs)).astype(np.float32)
    blocks = quants.quantize(weights, qtype)
    dense = quants.dequantize(blocks, qtype).reshape(out, inputs).astype(np.float64)
    matrix = QuantizedMatrix(blocks, qtype, inputs)
    x = rng.standard_normal((rows, inputs)).astype(np.float32)
    want = x.astype(np.float64) @ dense.T
    scale = np.abs(want).max()
    for threads in (1, 2):
        got = matrix(x, threads=threads)
        assert got.dtype == np.float32 and got.shape == (rows, out)
        np.testing.assert_allclose(got, want, atol=PRODUCT_RTOL * scale, rtol=0)
        residual = rng.standard_normal((rows, out)).astype(np.float32)
        added = residual.copy()
        assert matrix(x, into=added, threads=threads) is added
        np.testing.assert_allclose(added, residual + want, atol=PRODUCT_RTOL * scale, rtol=0)


def test_each_weight_byte_is_kept_once_in_its_quantized_size():
    """The repacked matrix holds GGUF's bytes (no float copy): what a product reads is the file's size."""
    weights = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
    for qtype, block_bytes in ((Q.Q4_0, 18), (Q.Q4_1, 20), (Q.Q8_0, 34)):
        matrix = QuantizedMatrix(quants.quantize(weights, qtype), qtype, 64)
        assert matrix.nbytes == 256 * 2 * block_bytes


def test_tiles_split_rows_evenly_in_two_where_they_can():
    assert tile_rows(3072) == 512 and tile_rows(576) == 288 and tile_rows(960) == 480
    assert tile_rows(49152) == 512
    assert tile_rows(200) == 208  # padded to 208 rows, which no multiple of 16 divides in an even count


def test_matrices_of_mixed_types_are_not_fused():
    w = np.ones((32, 32), np.float32)
    parts = [(quants.quantize(w, Q.Q4_1), Q.Q4_1, 32), (quants.quantize(w, Q.Q8_0), Q.Q8_0, 32)]
    assert stacked(parts) is None
    assert stacked(parts[:1]).out == 32
    assert stacked([(w.view(np.uint8), Q.F32, 32)]) is None  # no kernel for F32: the float32 form is used


@pytest.fixture(scope="module", params=TYPES, ids=lambda t: t.name)
def quantized_runtime(request, tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("q") / f"tiny-{request.param.name}.gguf",
                            weight_type=request.param.name)
    return Runtime.load(path)


def test_the_model_on_quantized_weights_matches_its_float32_path(quantized_runtime):
    """Per type: prefill and decode logits on the quantized path against the float32 path of the same file."""
    model = quantized_runtime.model
    assert model.weights.quantized is not None and all(layer.qkv for layer in model.weights.quantized.layers)
    prompt = [5, 17, 33, 41, 8, 9, 100, 3]

    def run(path):
        model.weight_path = path
        kv = model.new_kv()
        logits = [model.prefill([kv], [prompt])[0]]
        for token in (12, 60, 7):
            logits.append(model.decode_step([kv], [token])[0])
        return np.array(logits)

    try:
        dense, quantized = run("float32"), run("quantized")
    finally:
        model.weight_path = "auto"
    np.testing.assert_allclose(quantized, dense, atol=LOGITS_RTOL * np.abs(dense).max(), rtol=0)
    assert (quantized.argmax(axis=1) == dense.argmax(axis=1)).all()


@pytest.fixture
def quantized_calls(monkeypatch) -> list[int]:
    """The row count of every quantized product run while the test runs."""
    calls = []
    real_call = quantized_module.QuantizedMatrix.__call__

    def counting(self, x, *args, **kwargs):
        calls.append(x.shape[0])
        return real_call(self, x, *args, **kwargs)

    monkeypatch.setattr(quantized_module.QuantizedMatrix, "__call__", counting)
    return calls


def test_forwards_up_to_the_crossover_use_the_quantized_matrices(quantized_runtime, quantized_calls, monkeypatch):
    model, calls = quantized_runtime.model, quantized_calls
    monkeypatch.setattr(model, "crossover", 2)
    caches = [model.new_kv() for _ in range(3)]
    model.prefill(caches, [[5, 6, 7], [8], [9, 10]])  # 6 rows: float32
    assert calls == []
    model.decode_step(caches[:2], [11, 12])  # 2 rows: quantized, every matrix and the head
    assert calls and set(calls) == {2} and len(calls) == 4 * model.config.n_layers + 1
    calls.clear()
    model.decode_step(caches, [13, 14, 15])  # 3 rows: float32 again
    assert calls == []


def test_the_crossover_times_whole_decode_steps_in_runs_of_one_form(quantized_runtime, quantized_calls, monkeypatch):
    """A model with two threads of its own times whole decode steps, each form in runs of RUN_STEPS steps: timed
    product by product and alternating, BLAS's spinning threads slowed the quantized products taken right after
    float32 ones, and the crossover came out at 4 rows where steps of 16 rows were still faster quantized."""
    from pdserve.engine.model import crossover

    model, calls = quantized_runtime.model, quantized_calls
    quantized_step, float32_step, batch = decode_step_runs(model)
    caches = batch(3)
    quantized_step(caches)
    assert len(calls) == 4 * model.config.n_layers + 1 and set(calls) == {3}  # every matrix and the head, 3 rows
    calls.clear()
    float32_step(caches)
    assert calls == [] and model.weight_path == "auto" and {kv.length for kv in caches} == {crossover_context() + 2}
    timed = []
    monkeypatch.setattr(crossover, "_measured", {})  # measured once per process and key: a fresh record here
    monkeypatch.setattr(crossover, "measure_crossover", lambda pairs, inputs: timed.append(pairs) or 12)
    assert crossover.step_crossover(("test", "steps"), quantized_step, float32_step, batch) == 12
    ((run_quantized, _),) = timed[0]
    calls.clear()
    run_quantized(batch(2))
    assert len(calls) == crossover.RUN_STEPS * (4 * model.config.n_layers + 1)
    assert crossover.step_crossover(("test", "steps"), quantized_step, float32_step, batch) == 12 and len(timed) == 1


def crossover_context() -> int:
    from pdserve.engine.model.crossover_steps import CROSSOVER_CONTEXT

    return CROSSOVER_CONTEXT


def test_auto_runs_float32_where_the_forward_splits_whatever_the_crossover(quantized_runtime, quantized_calls,
                                                                           monkeypatch):
    """A forward whose attention runs on our two threads takes float32 on ``auto`` (numba's spinning threads measured
    3.3-3.8x slower steps there); the same forward unsplit takes the quantized matrices; ``quantized`` forces them."""
    model, calls = quantized_runtime.model, quantized_calls
    monkeypatch.setattr(model, "crossover", 64)
    caches = [model.new_kv() for _ in range(3)]
    model.prefill(caches, [[5, 6, 7], [8], [9, 10]])
    assert calls, "unsplit: quantized"
    calls.clear()
    monkeypatch.setattr(model, "_split_pays", lambda plan, rows: True)
    model.decode_step(caches, [11, 12, 13])
    assert calls == []
    assert model.quantized_rows(3, split=True) is False and model.quantized_rows(3) is True
    try:
        model.weight_path = "quantized"
        model.decode_step(caches, [14, 15, 16])
        assert calls
    finally:
        model.weight_path = "auto"


def simulated_products(cost: dict, clock: list[float]):
    """One (quantized, float32) product pair whose runs advance ``clock`` by ``cost[kind](rows)`` instead of
    computing (``cost`` is read at each run: a test may change it), and the inputs ``measure_crossover`` gives them."""
    def product(kind):
        def run(x):
            clock[0] += cost[kind](x.shape[0])
        return run

    return [(product("q"), product("f"))], lambda rows: [np.zeros((rows, 4), np.float32)]


def test_the_crossover_is_the_last_row_count_before_the_quantized_products_lose():
    clock = [0.0]
    cost = {"q": lambda rows: 1.0 + rows, "f": lambda rows: 6.0 + 0.1 * rows}  # the quantized lose from 6 rows
    pairs, inputs = simulated_products(cost, clock)
    timer = lambda: clock[0]  # noqa: E731
    assert measure_crossover(pairs, inputs, (1, 2, 4, 8, 16), timer, budget_s=1e9) == 4
    cost["q"] = lambda rows: 100.0  # slower even for one row: never quantized
    assert measure_crossover(pairs, inputs, (1, 2, 4), timer, budget_s=1e9) == 0
    cost["q"] = lambda rows: 1.0
    assert measure_crossover(pairs, inputs, (1, 2, 4, 8), timer, budget_s=1e9) == 8
    # the budget ends the search after MIN_PROBES counts: 1, then 16 and 64 of the bisection
    assert measure_crossover(pairs, inputs, (1, 2, 4, 8, 16, 32, 64, 128), timer, budget_s=0.0) == 64


def test_a_burst_of_other_work_during_the_quantized_timings_does_not_end_the_search():
    """A burst that slows the next three products run (another process on a shared core) hits both forms when they
    are timed interleaved; timed one form after the other it made all three quantized timings of one row lose, and
    every forward of the process ran the slower float32 path."""
    clock, burst = [0.0], [0]
    cost = {"q": lambda rows: 1.0, "f": lambda rows: 4.0}

    def product(kind):
        def run(x):
            clock[0] += cost[kind](x.shape[0]) + (100.0 if burst[0] > 0 else 0.0)
            burst[0] -= 1
        return run

    pairs = [(product("q"), product("f"))]
    inputs = lambda rows: [np.zeros((rows, 4), np.float32)]  # noqa: E731
    burst[0] = 3  # the first three products of the search are slowed
    assert measure_crossover(pairs, inputs, (1, 2, 4), lambda: clock[0], budget_s=1e9) == 4
    burst[0] = 5  # all but the last product of the first timing of one row: that timing loses, its second one decides
    assert measure_crossover(pairs, inputs, (1, 2, 4), lambda: clock[0], repeats=3, budget_s=1e9) == 4


def test_the_search_bisects_so_that_a_small_budget_still_reaches_the_large_batches():
    """Trying 1, 2, 4, ... in turn spent this budget by 4 rows and kept 4, though the quantized products win up to 24
    (of ROW_COUNTS); bisecting after the first count reaches 24 within it."""
    clock = [0.0]
    cost = {"q": lambda rows: 1.0 + 0.1 * rows, "f": lambda rows: 4.0}  # the quantized lose from 30 rows
    pairs, inputs = simulated_products(cost, clock)
    assert measure_crossover(pairs, inputs, timer=lambda: clock[0], budget_s=40.0) == 24
    assert measure_crossover(pairs, inputs, timer=lambda: clock[0], budget_s=1e9) == 24


def test_a_bisection_step_lost_past_the_budget_does_not_leave_one_row():
    """Losing the first bisection step (24 rows) spent the budget, and the search kept 1 row: float32 from batch 2
    although the quantized products win up to 8; two bisection steps are timed whatever the budget."""
    clock = [0.0]
    cost = {"q": lambda rows: 1.0 + rows, "f": lambda rows: 12.0}  # the quantized lose from 11 rows
    pairs, inputs = simulated_products(cost, clock)
    assert measure_crossover(pairs, inputs, timer=lambda: clock[0], budget_s=100.0) == 8


def test_a_crossover_given_in_the_environment_is_used_as_it_is(tiny_model_path, monkeypatch):
    from pdserve.engine.model import crossover

    monkeypatch.setenv(crossover.CROSSOVER_ENV, "7")
    monkeypatch.setattr(crossover, "measure_crossover", lambda *a, **k: pytest.fail("measured"))
    assert Runtime.load(tiny_model_path).model.crossover == 7
