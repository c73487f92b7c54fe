"""The compiled pieces of the forward pass against float64."""

import numpy as np

from pdserve.engine.model.kernels.fast_exp import exp_nonpositive


def test_exp_of_nonpositive_values_within_two_ulps_and_exact_zero_below_range():
    rng = np.random.default_rng(8)
    x = (-np.abs(rng.standard_normal((300, 257))) * 30).astype(np.float32)  # odd sizes: the vector loop's tail too
    x[0, :6] = [0.0, -0.0, -1e-9, -87.0, -90.0, -np.inf]
    want = np.exp(x.astype(np.float64))
    got = x.copy()
    exp_nonpositive(got)

    assert got.dtype == np.float32
    normal = want >= np.finfo(np.float32).tiny * 2
    np.testing.assert_allclose(got[normal], want[normal], rtol=2 * 2.0**-23)
    assert got[0, 0] == 1.0 and got[0, 1] == 1.0
    assert got[0, 4] == 0.0 and got[0, 5] == 0.0  # underflow and -inf (masked scores) are exactly zero
    assert np.all((got[~normal] >= 0) & (got[~normal] <= 2 * np.finfo(np.float32).tiny))


def test_kernels_compile_without_a_writable_cache(monkeypatch):
    """Where numba finds nowhere to write its cache (it raises at decoration), the kernel is compiled without one."""
    import numba

    from pdserve.engine.model.kernels.compiled import compiled

    real_njit = numba.njit

    def njit(*args, cache=False, **options):
        if cache:
            raise RuntimeError("cannot cache function 'f': no locator available for file 'f.py'")
        return real_njit(*args, **options)

    monkeypatch.setattr(numba, "njit", njit)

    @compiled()
    def double(x):
        return 2 * x

    assert double(21) == 42


def test_attention_splits_only_within_the_blas_threads_the_process_was_given():
    """A worker the launcher gave one BLAS thread (other workers share the cores) runs attention on one thread."""
    from threadpoolctl import threadpool_limits

    from pdserve.engine.model.kernels.parallel import Parallel

    with threadpool_limits(limits=1, user_api="blas"):
        assert Parallel().threads == 1
    assert Parallel(2).threads == 2


def test_column_halves_on_two_threads_multiply_like_one_product():
    """Parallel.matmul (each thread half of the weight's columns, an odd count too) gives the product."""
    from pdserve.engine.model.kernels.parallel import Parallel

    rng = np.random.default_rng(9)
    a = rng.standard_normal((33, 70)).astype(np.float32)
    b = rng.standard_normal((70, 131)).astype(np.float32)
    parallel = Parallel(2)
    with parallel.single_threaded_blas():
        got = parallel.matmul(a, b)
    assert got.dtype == np.float32 and got.shape == (33, 131)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_a_forward_of_many_rows_runs_every_product_on_both_threads(tiny_runtime, monkeypatch):
    """From MIN_SPLIT_ROWS rows on, a two-thread model runs each layer's products and the output head as column
    halves on its own threads, with BLAS on one thread for the pass and back to its setting after; fewer rows leave
    the products to BLAS. The logits match the one-thread model's up to summation order."""
    from threadpoolctl import ThreadpoolController, threadpool_limits

    from pdserve.engine.model.decode_attention import DecodeAttention
    from pdserve.engine.model.kernels.parallel import Parallel
    from pdserve.engine.model.llama import MIN_SPLIT_ROWS

    model = tiny_runtime.model
    prompt = [[(7 * i) % 200 + 3 for i in range(MIN_SPLIT_ROWS + 9)]]
    monkeypatch.setattr(model, "parallel", Parallel(1))
    monkeypatch.setattr(model, "decode_attention", DecodeAttention(model.parallel))
    want = model.prefill([model.new_kv()], prompt)

    def blas_threads() -> list[int]:
        return [lib.num_threads for lib in ThreadpoolController().select(user_api="blas").lib_controllers]

    with threadpool_limits(limits=2, user_api="blas"):  # as a process given two cores has
        two = Parallel(2)
        monkeypatch.setattr(model, "parallel", two)
        monkeypatch.setattr(model, "decode_attention", DecodeAttention(two))
        products, threads_inside = [], []
        real_matmul = two.matmul

        def counted(a, b):
            threads_inside.append(blas_threads())
            products.append(a.shape[0])
            return real_matmul(a, b)

        monkeypatch.setattr(two, "matmul", counted)
        before = blas_threads()
        assert before and before != [1] * len(before)
        got = model.prefill([model.new_kv()], prompt)
        assert len(products) == 4 * model.config.n_layers + 1  # qkv, wo, gate_up, down per layer; the head
        assert all(threads == [1] * len(before) for threads in threads_inside)
        assert blas_threads() == before
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

        products.clear()
        model.prefill([model.new_kv()], [prompt[0][:MIN_SPLIT_ROWS - 1]])
        assert products == []


def test_a_decode_step_takes_both_threads_only_when_its_attention_is_worth_splitting(tiny_runtime, monkeypatch):
    """A decode step of MIN_SPLIT_ROWS sequences in the slab runs its products and its attention on our two threads
    only when the attention has enough keys to split (at short contexts BLAS's own threads are faster); fewer
    sequences, or single-token sequences outside the slab, never do."""
    from pdserve.bench.runtime.engine import _decoding_sequences
    from pdserve.engine.model.decode_attention import DecodeAttention
    from pdserve.engine.model.kernels.parallel import Parallel
    from pdserve.engine.model.llama import MIN_SPLIT_ROWS

    model, two = tiny_runtime.model, Parallel(2)
    monkeypatch.setattr(model, "parallel", two)
    products, attention_splits = [], []
    real_matmul = two.matmul
    monkeypatch.setattr(two, "matmul", lambda a, b: products.append(a.shape[0]) or real_matmul(a, b))
    real_split = DecodeAttention._split
    monkeypatch.setattr(DecodeAttention, "_split",
                        lambda self, q, *rest: attention_splits.append(q.shape[0]) or real_split(self, q, *rest))
    layers = model.config.n_layers

    def step(batch: int, min_split_keys: int) -> None:
        monkeypatch.setattr(model, "decode_attention", DecodeAttention(two, min_split_keys=min_split_keys))
        seqs = _decoding_sequences(tiny_runtime, batch, 40, 4)
        try:
            tiny_runtime.decode_step(seqs)  # the batch joins the slab
            products.clear()
            attention_splits.clear()
            tiny_runtime.decode_step(seqs)
        finally:
            for seq in seqs:
                tiny_runtime.free(seq)

    step(MIN_SPLIT_ROWS, min_split_keys=10**9)
    assert products == [] and attention_splits == []
    step(MIN_SPLIT_ROWS, min_split_keys=1)
    assert products == [MIN_SPLIT_ROWS] * (4 * layers + 1) and attention_splits == [MIN_SPLIT_ROWS] * layers
    step(MIN_SPLIT_ROWS - 1, min_split_keys=1)
    assert products == [] and attention_splits == []

    caches = [model.new_kv() for _ in range(MIN_SPLIT_ROWS)]  # outside any slab: each attends on its own
    model.prefill(caches, [[5, 6, 7]] * MIN_SPLIT_ROWS)
    products.clear()
    model.decode_step(caches, [9] * MIN_SPLIT_ROWS)
    assert products == []


def test_compiled_layer_passes_equal_their_float64_formulas():
    """RMSNorm (with and without a gain), RoPE on interleaved pairs and SwiGLU's gate, as compiled, against float64."""
    from pdserve.engine.model.kernels.layer import rms_norm_rows, rope_in_place, silu_mul_rows

    rng = np.random.default_rng(11)
    x = rng.standard_normal((5, 72)).astype(np.float32)
    gain = rng.standard_normal(72).astype(np.float32)
    x64 = x.astype(np.float64)
    normed = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + 1e-5)
    for g, want in ((gain, normed * gain), (np.zeros(0, np.float32), normed)):
        out = np.empty_like(x)
        rms_norm_rows(x, g, np.float32(1e-5), out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)

    heads, dim = 3, 8
    qkv = rng.standard_normal((4, heads * dim + 5)).astype(np.float32)  # 5 trailing columns (V) stay as they are
    angles = rng.uniform(0, 6, (10, dim // 2))
    positions = np.array([0, 9, 3, 3])
    rotated = qkv.copy()
    rope_in_place(rotated, np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32), positions, heads, dim)
    pairs = qkv[:, :heads * dim].astype(np.float64).reshape(4, heads, dim // 2, 2)
    c, s = np.cos(angles[positions])[:, None], np.sin(angles[positions])[:, None]
    want = np.stack([pairs[..., 0] * c - pairs[..., 1] * s, pairs[..., 0] * s + pairs[..., 1] * c], -1)
    np.testing.assert_allclose(rotated[:, :heads * dim], want.reshape(4, -1), rtol=1e-5, atol=1e-6)
    assert np.array_equal(rotated[:, heads * dim:], qkv[:, heads * dim:])

    gate_up = (rng.standard_normal((3, 40)) * 30).astype(np.float32)  # large gates: the exp's clamp at both ends
    gate_up[0, :2] = [-200.0, 200.0]
    out = np.empty((3, 20), np.float32)
    silu_mul_rows(gate_up, 20, out)
    g, up = gate_up[:, :20].astype(np.float64), gate_up[:, 20:].astype(np.float64)
    np.testing.assert_allclose(out, g / (1 + np.exp(-g)) * up, rtol=1e-5, atol=1e-30)
