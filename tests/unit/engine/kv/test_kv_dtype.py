"""The 16-bit KV cache: exact conversions, half the bytes in blocks, blocks of another dtype refused, attention in
float32 over the rounded values, and the model's outputs on it."""

import numpy as np
import pytest
from numba import njit

from pdserve.engine.kv.blocks import block_keys
from pdserve.engine.kv.cache import KVSlab, SequenceKV, block_nbytes
from pdserve.engine.kv.dtype import KV_DTYPES, kv_numpy_dtype
from pdserve.engine.model.decode_attention import DecodeAttention
from pdserve.engine.model.kernels.llvm_ops import bfloat_to_float, float_to_bfloat, float_to_half, half_to_float
from pdserve.engine.runtime import Runtime

SIXTEEN = ("float16", "bfloat16")


@njit
def _round_trip(x, halves, bfloats, back_half, back_bfloat):
    for i in range(x.size):
        halves[i] = float_to_half(x[i])
        bfloats[i] = float_to_bfloat(x[i])
        back_half[i] = half_to_float(halves[i])
        back_bfloat[i] = bfloat_to_float(bfloats[i])


def test_compiled_conversions_equal_numpys_casts_bit_for_bit():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(50_000) * 10.0 ** rng.integers(-10, 10, 50_000)).astype(np.float32)
    x = np.concatenate([x, np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65520, 6e-8, 1e-45, 3.4e38], np.float32)])
    x = np.concatenate([x, np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)])  # every half
    x = x[~np.isnan(x)]
    halves, bfloats = np.empty(x.size, np.uint16), np.empty(x.size, np.int16)  # the kernels' marks of the two
    back_half, back_bfloat = np.empty_like(x), np.empty_like(x)
    with np.errstate(over="ignore"):
        _round_trip(x, halves, bfloats, back_half, back_bfloat)
        want_half = x.astype(np.float16)
    import ml_dtypes  # here, not at collection: its import costs every xdist worker ~0.7 s

    want_bfloat = x.astype(ml_dtypes.bfloat16)
    assert (halves == want_half.view(np.uint16)).all()
    assert (bfloats == want_bfloat.view(np.int16)).all()
    assert (back_half == want_half.astype(np.float32)).all()
    assert (back_bfloat == want_bfloat.astype(np.float32)).all()


@pytest.mark.parametrize("kv_dtype", SIXTEEN)
def test_a_16_bit_cache_exports_half_the_bytes_and_imports_them_exactly(tiny_runtime, kv_dtype):
    c = tiny_runtime.config
    kv = SequenceKV(c, block_tokens=16, capacity=32, kv_dtype=kv_dtype)
    rng = np.random.default_rng(1)
    for layer in range(c.n_layers):
        kv.write(layer, 0, *(rng.standard_normal((2, 20, c.n_kv_heads, c.head_dim)).astype(np.float32)))
    kv.length = 20
    full, tail = kv.export_block(0), kv.export_block(1)
    assert len(full) == block_nbytes(c, 16, kv_dtype) == block_nbytes(c, 16) // 2
    assert len(tail) == block_nbytes(c, 4, kv_dtype)
    copy = SequenceKV(c, block_tokens=16, kv_dtype=kv_dtype)
    copy.append_block(bytes(full), 16, kv_dtype)
    copy.append_block(bytes(tail), 4, kv_dtype)
    assert copy.k.dtype == kv_numpy_dtype(kv_dtype)
    assert np.array_equal(copy.k[:, :, :20].view(np.uint16), kv.k[:, :, :20].view(np.uint16))
    assert np.array_equal(copy.v[:, :, :20].view(np.uint16), kv.v[:, :, :20].view(np.uint16))


def test_a_block_of_another_dtype_is_refused_naming_the_field(tiny_runtime):
    c = tiny_runtime.config
    half_block = bytes(block_nbytes(c, 16, "float16"))
    kv = SequenceKV(c, kv_dtype="float16")
    with pytest.raises(ValueError, match="kv_dtype: the block holds bfloat16 KV, this cache is float16"):
        kv.append_block(half_block, 16, "bfloat16")  # the same size: only the declared dtype tells them apart
    with pytest.raises(ValueError, match="kv_dtype: the block holds float32"):
        kv.append_block(half_block, 16, "")  # a writer that predates the field wrote float32
    kv.append_block(half_block, 16, "float16")
    assert kv.length == 16
    f32 = SequenceKV(c)
    f32.append_block(bytes(block_nbytes(c, 16)), 16, "")
    assert f32.length == 16


def test_block_keys_name_the_dtype():
    ids = list(range(32))
    assert block_keys(ids, "fp", 16, "float16") != block_keys(ids, "fp", 16, "float32")
    assert block_keys(ids, "fp", 16) == block_keys(ids, "fp", 16, "float32")


@pytest.mark.parametrize("kv_dtype", SIXTEEN)
def test_decode_attention_reads_16_bit_values_in_float32(kv_dtype):
    """The compiled attention over a 16-bit slab equals float64 attention over the same (rounded) values."""
    rng = np.random.default_rng(2)
    n_slots, n_kv, group, dim, capacity = 4, 3, 3, 16, 40
    dtype = kv_numpy_dtype(kv_dtype)
    keys = rng.standard_normal((n_slots, n_kv, capacity, dim)).astype(np.float32).astype(dtype)
    values = rng.standard_normal((n_slots, n_kv, capacity, dim)).astype(np.float32).astype(dtype)
    slots, lengths = np.array([2, 0, 3]), np.array([40, 7, 19])
    q = rng.standard_normal((3, n_kv, group, dim)).astype(np.float32)
    got = DecodeAttention()(q, keys, values, slots, lengths)
    k64, v64 = keys.astype(np.float64), values.astype(np.float64)
    for b, (slot, n) in enumerate(zip(slots, lengths)):
        scores = np.einsum("jgd,jtd->jgt", q[b].astype(np.float64), k64[slot, :, :n])
        p = np.exp(scores - scores.max(-1, keepdims=True))
        want = np.einsum("jgt,jtd->jgd", p / p.sum(-1, keepdims=True), v64[slot, :, :n])
        np.testing.assert_allclose(got[b], want, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def runtimes(tiny_model_path):
    return {name: Runtime.load(tiny_model_path, kv_dtype=name) for name in KV_DTYPES}


@pytest.mark.parametrize("kv_dtype", SIXTEEN)
def test_the_model_on_a_16_bit_cache_stays_close_to_float32_and_keeps_it(runtimes, kv_dtype):
    """Prefill then decode in the slab: logits within the 16-bit rounding of K and V of float32's; the slab and
    every cache hold the narrow type."""
    prompt = [5, 17, 33, 41, 8, 9, 100, 3, 77, 12]
    logits = {}
    for name in ("float32", kv_dtype):
        rt = runtimes[name]
        kv = rt.model.new_kv()
        rows = [rt.model.prefill([kv], [prompt])[0]]
        slab = KVSlab(rt.config, 2, 64, kv_dtype=name)
        for token in (12, 60, 7):
            slab.place(kv, kv.length + 1)
            rows.append(rt.model.decode_step([kv], [token], slab)[0])
        assert kv.k.dtype == slab.k.dtype == kv_numpy_dtype(name)
        logits[name] = np.array(rows)
    scale = np.abs(logits["float32"]).max()
    tolerance = {"float16": 2e-3, "bfloat16": 2e-2}[kv_dtype]  # 11 and 8 significant bits
    np.testing.assert_allclose(logits[kv_dtype], logits["float32"], atol=tolerance * scale, rtol=0)


def test_a_slab_refuses_a_cache_of_another_dtype(tiny_runtime):
    slab = KVSlab(tiny_runtime.config, 2, 64, kv_dtype="float16")
    with pytest.raises(ValueError, match="float32 cache cannot join a float16 slab"):
        slab.add(SequenceKV(tiny_runtime.config), 4)


def test_an_unknown_dtype_is_refused_naming_the_choices(tiny_model_path):
    with pytest.raises(ValueError, match="float32, float16, bfloat16"):
        Runtime.load(tiny_model_path, kv_dtype="int8")
    with pytest.raises(ValueError, match="synthetic backend"):
        Runtime.load("synthetic", kv_dtype="float16")


@pytest.mark.parametrize("kv_dtype", SIXTEEN)
def test_a_16_bit_block_with_inf_or_nan_is_refused(tiny_runtime, kv_dtype):
    c = tiny_runtime.config
    dtype = kv_numpy_dtype(kv_dtype)
    n = block_nbytes(c, 4, kv_dtype) // 2
    big = np.full(n, 60000.0 if kv_dtype == "float16" else 3e38, np.float32).astype(dtype)  # the largest finite
    SequenceKV(c, kv_dtype=kv_dtype).append_block(big.tobytes(), 4, kv_dtype)
    for bad in (np.inf, -np.inf, np.nan):
        values = np.zeros(n, np.float32)
        values[n // 2] = bad
        with pytest.raises(ValueError, match="non-finite"):
            SequenceKV(c, kv_dtype=kv_dtype).append_block(values.astype(dtype).tobytes(), 4, kv_dtype)
