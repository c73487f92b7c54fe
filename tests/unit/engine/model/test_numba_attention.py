"""A decode step's attention on numba's two threads: each (sequence, head) pair whole on one of them, so the answer is
the one thread's to the bit, and only where the step's products run there and the second core is free."""

import numpy as np
import pytest

from pdserve.engine.kv.dtype import kv_numpy_dtype
from pdserve.engine.model import decode_attention
from pdserve.engine.model.decode_attention import DecodeAttention, _balanced_cut
from pdserve.engine.model.kernels.core_share import CoreShare, create_core_share
from pdserve.engine.model.kernels.parallel import Parallel


@pytest.mark.parametrize("kv_dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("lengths", [[700], [290, 1, 137], [33, 40, 5, 64, 300]])
def test_two_numba_threads_give_the_one_threads_answer_to_the_bit(kv_dtype, lengths):
    rng = np.random.default_rng(11)
    b, n_kv, group, dim, capacity = len(lengths), 3, 3, 64, max(lengths)
    dtype = kv_numpy_dtype(kv_dtype)
    keys = rng.standard_normal((b + 1, n_kv, capacity + 8, dim)).astype(dtype)
    values = rng.standard_normal((b + 1, n_kv, capacity + 8, dim)).astype(dtype)
    q = rng.standard_normal((b, n_kv, group, dim)).astype(np.float32)
    slots = rng.permutation(b + 1)[:b].astype(np.int64)
    lengths = np.array(lengths, dtype=np.int64)
    attention = DecodeAttention()
    one = attention(q, keys, values, slots, lengths, split=False, numba_threads=1)
    two = attention(q, keys, values, slots, lengths, split=False, numba_threads=2)
    np.testing.assert_array_equal(two, one)


def test_the_halves_hold_about_half_of_the_keys_each():
    assert _balanced_cut(np.array([100, 100, 100, 100]), 1) == 2
    assert _balanced_cut(np.array([1000, 10, 10, 10]), 1) == 1  # never an empty half
    assert _balanced_cut(np.array([10, 10, 10, 1000]), 1) == 3
    assert _balanced_cut(np.array([700]), 3) == 2  # one sequence: its heads, two and one


def test_a_decode_step_gives_numba_its_attention_only_with_quantized_products_and_a_free_core(
        tiny_runtime, tmp_path, monkeypatch):
    model = tiny_runtime.model
    path = tmp_path / "core-share"
    create_core_share(path, 2)
    mine, other = CoreShare(path, 0), CoreShare(path, 1)
    monkeypatch.setattr(model, "parallel", Parallel(2, share=mine))
    monkeypatch.setattr(model, "quant_threads", 2)
    monkeypatch.setattr(decode_attention, "MIN_NUMBA_SPLIT_KEYS", 0)
    asked = []
    call = DecodeAttention.__call__
    monkeypatch.setattr(DecodeAttention, "__call__",
                        lambda self, *args, **kw: asked.append(args[6] if len(args) > 6 else kw.get("numba_threads"))
                        or call(self, *args, **kw))
    slab = tiny_runtime.slab
    caches = [model.new_kv() for _ in range(2)]
    model.prefill(caches, [[1, 2, 3], [4, 5]])
    for kv in caches:
        slab.add(kv, 16)

    def step(path: str) -> int:
        asked.clear()
        model.weight_path = path
        try:
            model.decode_step(caches, [6, 7], slab)
        finally:
            model.weight_path = "auto"
        return max(asked)
    if model.weights.quantized is None:
        pytest.skip("the tiny model has no quantized kernel")
    assert step("quantized") == 2
    assert step("float32") == 1  # beside BLAS's products numba's spinning threads would take BLAS's second core
    with other.working():
        assert step("quantized") == 1  # the other worker's core is not lent
