"""`pdserve bench engine` on a tiny model: a row per weight path and KV dtype, floors that count the bytes each
reads, and the llama.cpp peer skipped with its reason where it is not installed."""

import builtins

import pytest

from pdserve.bench.runtime import peer as peer_module
from pdserve.bench.runtime.engine import Machine, ModelCost, format_rows, run_engine_bench
from pdserve.bench.runtime.peer import compare_with_peer, format_comparison
from pdserve.engine.runtime import Runtime
from tests.tiny_model import write_tiny_model


@pytest.fixture(scope="module")
def q4_runtime(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("bench") / "tiny-q4_1.gguf", weight_type="Q4_1")
    return Runtime.load(path, slab_seqs=4, slab_tokens=64)


def test_rows_for_each_weight_path_and_kv_dtype_with_their_floors(q4_runtime, monkeypatch):
    monkeypatch.setattr("pdserve.bench.runtime.engine.measure_machine", lambda: Machine(10e9, 100e9))
    machine, rows = run_engine_bench(q4_runtime, batches=(1, 4), prompt_lens=(16,), contexts=(8,), steps=2,
                                     repeats=1, kv_dtypes=("float32", "float16"))
    decode = {(r.weights, r.kv_dtype, r.shape): r for r in rows if r.phase == "decode"}
    assert set(decode) == {(w, k, b) for w in ("float32", "quantized") for k in ("float32", "float16") for b in (1, 4)}
    assert [(r.kv_dtype, r.shape) for r in rows if r.phase == "prefill"] == [("float32", 16), ("float16", 16)]
    # the quantized floor counts Q4_1's bytes: a bytes-bound step's floor is higher than float32's
    assert decode["quantized", "float32", 1].floor_tokens_per_s > 3 * decode["float32", "float32", 1].floor_tokens_per_s
    assert q4_runtime.model.weight_path == "auto" and q4_runtime.kv_dtype == "float16"  # left as the last run set it
    text = format_rows(machine, rows, "tiny", crossover=q4_runtime.model.crossover)
    assert "quantized products up to" in text and text.count("\ndecode   quantized  float16") == 2


def test_auto_rows_are_labelled_and_floored_by_the_path_they_ran(q4_runtime, monkeypatch):
    """``auto`` runs the quantized products up to the crossover and float32 above: each row's floor is the floor of
    the path that ran (a float32 floor under a quantized step read as more than the machine can do)."""
    monkeypatch.setattr("pdserve.bench.runtime.engine.measure_machine", lambda: Machine(10e9, 100e9))
    monkeypatch.setattr(q4_runtime.model, "crossover", 2)
    _, rows = run_engine_bench(q4_runtime, batches=(1, 4), prompt_lens=(16,), contexts=(8,), steps=2, repeats=1,
                               weights=("auto", "quantized", "float32"), kv_dtypes=("float32",))
    decode = {(r.weights, r.shape): r for r in rows if r.phase == "decode"}
    assert {"auto:quant", "auto:float"} <= {w for w, _ in decode}
    assert decode["auto:quant", 1].floor_tokens_per_s == decode["quantized", 1].floor_tokens_per_s
    assert decode["auto:float", 4].floor_tokens_per_s == decode["float32", 4].floor_tokens_per_s
    (prefill,) = [r for r in rows if r.phase == "prefill"]
    assert prefill.weights == "auto:float"  # 16 rows, past the crossover


def test_the_floors_count_quantized_weight_bytes_and_16_bit_kv_bytes(q4_runtime):
    dense = ModelCost.of(q4_runtime, "float32", "float32")
    quantized = ModelCost.of(q4_runtime, "quantized", "float32")
    half_kv = ModelCost.of(q4_runtime, "float32", "float16")
    assert quantized.weight_bytes == q4_runtime.model.weights.quantized.nbytes  # every matrix has a kernel
    assert quantized.weight_bytes * 5 < dense.weight_bytes  # 20 bytes a block of 32 weights against 128
    assert half_kv.kv_bytes * 2 == dense.kv_bytes
    assert quantized.linear_flops == dense.linear_flops


def test_the_peer_is_skipped_with_the_reason_where_llama_cpp_is_missing(q4_runtime, monkeypatch):
    real_import = builtins.__import__

    def no_llama_cpp(name, *args, **kwargs):
        if name == "llama_cpp":
            raise ImportError("No module named 'llama_cpp'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_llama_cpp)
    comparison = compare_with_peer(q4_runtime, "llama-cpp", (8,), 2, 1)
    assert "llama-cpp-python is not installed" in comparison["skipped"]
    assert format_comparison(comparison).startswith("peer llama-cpp: skipped: llama-cpp-python is not installed")


def test_the_comparison_alternates_engine_and_peer_each_round(q4_runtime, monkeypatch):
    order = []

    class FakePeer:
        version = "test"

        def decode_step_s(self, batch, context, steps, vocab):
            order.append(("peer", batch, context))
            return 0.02

    monkeypatch.setattr(peer_module, "load_peer", lambda *a: FakePeer())
    monkeypatch.setattr(peer_module, "decode_step_s", lambda rt, b, c, s: order.append(("engine", b, c)) or 0.01)
    comparison = compare_with_peer(q4_runtime, "llama-cpp", (8, 16), 2, 2, batches=(1, 4))
    cells = [(b, c) for b in (1, 4) for c in (8, 16)]
    assert order == [(who, b, c) for b, c in cells for who in ("engine", "peer")] * 2
    text = format_comparison(comparison)
    assert "batch 1, context 8: pdserve/llama.cpp median 2.00 over 2 rounds" in text
    assert "batch 4, context 16: pdserve/llama.cpp median 2.00 over 2 rounds" in text
    assert "    4      16          400.0            200.0               2.00" in text  # tokens/s count the batch
