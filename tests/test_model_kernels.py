"""The compiled pieces of the forward pass against float64."""

import numpy as np

from pdserve.engine.fast_exp import exp_nonpositive


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

    from pdserve.engine.compiled import compiled

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

    from pdserve.engine.parallel import Parallel

    with threadpool_limits(limits=1, user_api="blas"):
        assert Parallel().threads == 1
    assert Parallel(2).threads == 2
