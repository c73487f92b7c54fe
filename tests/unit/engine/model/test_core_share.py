"""Cores lent between workers of one host: a worker's second thread runs only while the others rest."""

import os
import stat
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from pdserve.engine.model.kernels import parallel as parallel_module
from pdserve.engine.model.kernels.core_share import CORE_SHARE_ENV, CoreShare, create_core_share
from pdserve.engine.model.kernels.parallel import CHUNK_FLOPS, MAX_BORROWED_CHUNKS, Parallel, borrowed_chunks


@pytest.fixture
def pair(tmp_path):
    path = tmp_path / "core-share"
    create_core_share(path, 2)
    return CoreShare(path, 0), CoreShare(path, 1)


def test_a_worker_in_a_forward_is_seen_busy_by_the_other_only(pair, tmp_path):
    prefill, decode = pair
    assert not prefill.others_busy() and not decode.others_busy()
    with decode.working():
        assert prefill.others_busy()
        assert not decode.others_busy()  # its own forward does not count
    assert not prefill.others_busy()
    assert stat.S_IMODE(os.stat(tmp_path / "core-share").st_mode) == 0o600


def test_a_restarted_worker_clears_the_byte_its_predecessor_left_set(pair, tmp_path):
    prefill, decode = pair
    stale = decode.working()
    stale.__enter__()  # a worker killed inside a forward never clears its byte
    assert prefill.others_busy()
    CoreShare(tmp_path / "core-share", 1)  # its successor, on the same slot
    assert not prefill.others_busy()


def _threads_used(parallel: Parallel) -> set[int]:
    seen: set[int] = set()
    barrier = threading.Barrier(2, timeout=0.5)

    def half(_: int) -> None:
        seen.add(threading.get_ident())
        try:  # on two threads both halves meet here; one after the other, the first times out
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
    parallel.both(half, (0,), (1,))
    return seen


def test_the_second_thread_runs_only_while_the_other_worker_rests(pair):
    prefill, decode = pair
    parallel = Parallel(2, share=prefill)
    assert len(_threads_used(parallel)) == 2  # the decode worker idle: its core is lent
    with decode.working():
        assert _threads_used(parallel) == {threading.get_ident()}  # both halves on the caller's own core
    assert len(_threads_used(parallel)) == 2
    assert (parallel.lent, parallel.own) == (2, 1)


def test_a_forward_marks_its_worker_busy_and_keeps_its_products_to_one_core_while_the_other_is(pair, tiny_runtime,
                                                                                             monkeypatch):
    prefill, decode = pair
    model = tiny_runtime.model
    monkeypatch.setattr(model, "parallel", Parallel(2, share=prefill))
    monkeypatch.setattr(model, "quant_threads", 2)
    seen = []
    layers = model._layers
    two_tiles = SimpleNamespace(splits=True)  # a quantized matrix of more than one tile
    monkeypatch.setattr(model, "_layers", lambda *args: seen.append(
        (decode.others_busy(), model._quant_threads_now(two_tiles))) or layers(*args))
    kv = model.new_kv()
    model.prefill([kv], [[1, 2, 3]])
    with decode.working():
        model.prefill([model.new_kv()], [[1, 2, 3]])
    assert seen == [(True, 2), (True, 1)]  # the prefill worker busy in both; its products split only while decode rests
    assert not decode.others_busy()  # and idle again after


def test_a_worker_the_launcher_gave_one_blas_thread_splits_when_it_shares_the_cores(pair):
    from threadpoolctl import threadpool_limits

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: nothing to lend")
    with threadpool_limits(limits=1, user_api="blas"):
        assert Parallel().threads == 1
        assert Parallel(share=pair[0]).threads == 2


def test_the_shared_file_replaces_a_planted_link_and_a_worker_refuses_one(tmp_path):
    """A log directory others can write to: a link named like the file is replaced, not written through."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    path = tmp_path / "core-share"
    path.symlink_to(victim)
    create_core_share(path, 2)
    assert victim.read_bytes() == b"keep me"
    assert not path.is_symlink() and path.read_bytes() == bytes(2)
    path.unlink()
    path.symlink_to(victim)
    with pytest.raises(OSError):
        CoreShare(path, 0)
    assert victim.read_bytes() == b"keep me"


def test_the_shared_file_from_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "core-share"
    create_core_share(path, 3)
    monkeypatch.setenv(CORE_SHARE_ENV, f"{path}:2")
    share = CoreShare.from_env()
    assert share.slot == 2
    for bad, why in ((f"{path}", "PATH:SLOT"), (f"{path}:x", "PATH:SLOT"), (f"{path}:3", "slot 3")):
        monkeypatch.setenv(CORE_SHARE_ENV, bad)
        with pytest.raises(ValueError, match=why):
            CoreShare.from_env()
    monkeypatch.delenv(CORE_SHARE_ENV)
    assert CoreShare.from_env() is None


def test_column_halves_run_one_after_the_other_give_the_same_product(pair):
    prefill, decode = pair
    parallel = Parallel(2, share=prefill)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((20, 30)).astype(np.float32), rng.standard_normal((30, 41)).astype(np.float32)
    with decode.working(), parallel.single_threaded_blas():
        got = parallel.matmul(a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    assert (parallel.lent, parallel.own) == (0, 1)  # one product, kept to this worker's core


def test_a_worker_sharing_the_cores_measures_its_crossover_on_one_thread(pair, tmp_path, tiny_model_path, monkeypatch):
    """The load-time crossover (engine/model/crossover.py) of a worker that shares the host's cores is timed with one
    quantized thread, the one it always has: timed with two while the other worker loads too, the quantized products
    lost even at batch 1 in one stack start of four, and every decode step ran float32 (TPOT 138 ms against 40-58)."""
    from pdserve.engine.model import llama
    from pdserve.engine.model.gguf_model import load_gguf

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: nothing to lend")
    measured, steps = [], []
    monkeypatch.setattr(llama, "model_crossover", lambda key, q, dense, threads: measured.append(threads) or 8)
    monkeypatch.setattr(llama, "step_crossover", lambda key, *fns: steps.append(key) or 16)
    monkeypatch.setenv(CORE_SHARE_ENV, f"{tmp_path / 'core-share'}:0")
    loaded = load_gguf(str(tiny_model_path), quantized=True)
    shared = llama.LlamaModel(loaded)
    assert shared.parallel.shares_cores and measured == [1] and shared.crossover == 8
    monkeypatch.delenv(CORE_SHARE_ENV)
    alone = llama.LlamaModel(loaded)  # its own two threads: whole decode steps (engine/model/crossover.py)
    assert not alone.parallel.shares_cores
    if alone.quant_threads >= 2:
        assert measured == [1] and len(steps) == 1 and alone.crossover == 16
    else:  # numba's fallback threading layer: one quantized thread, products timed on it
        assert measured == [1, 1] and steps == []


def test_shared_out_work_goes_back_to_the_caller_once_the_other_worker_starts_a_forward(pair):
    """The borrowed thread takes no item after the other worker's byte is set; the caller does the rest, and every
    item runs exactly once."""
    prefill, decode = pair
    parallel = Parallel(2, share=prefill)
    caller = threading.get_ident()
    ran: list[tuple[int, bool]] = []
    borrowed_started = threading.Event()
    release = threading.Event()
    other_forward = decode.working()

    def item(i: int) -> None:
        mine = threading.get_ident() == caller
        ran.append((i, mine))
        if not mine and not borrowed_started.is_set():  # the borrowed thread's first item: the other worker starts
            borrowed_started.set()
            other_forward.__enter__()
            release.set()
        elif mine:
            release.wait(timeout=5)
    try:
        parallel.share_out(item, list(range(12)))
    finally:
        other_forward.__exit__(None, None, None)
    assert sorted(i for i, _ in ran) == list(range(12))
    assert sum(not mine for _, mine in ran) == 1  # the borrowed core went back after one item
    assert (parallel.lent, parallel.own) == (1, 0)


def test_a_product_in_chunks_on_a_shared_core_is_the_product(pair):
    prefill, _ = pair
    parallel = Parallel(2, share=prefill)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((300, 576)).astype(np.float32), rng.standard_normal((576, 1537)).astype(np.float32)
    with parallel.single_threaded_blas():
        got = parallel.matmul(a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_the_calling_thread_takes_its_half_in_one_call_and_the_borrowed_half_goes_in_chunks(pair, monkeypatch):
    """Each BLAS call packs the whole input again: only the borrowed half is cut into chunks (of about CHUNK_FLOPS, so
    that the borrowed core can go back between two of them)."""
    prefill, _ = pair
    parallel = Parallel(2, share=prefill)
    calls: list[tuple[int, int]] = []

    class RecordingNumpy:
        def __getattr__(self, name):
            return getattr(np, name)

        def matmul(self, a, b, out=None):
            calls.append((threading.get_ident(), b.shape[1]))
            return np.matmul(a, b, out=out)
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((512, 576)).astype(np.float32), rng.standard_normal((576, 3072)).astype(np.float32)
    monkeypatch.setattr(parallel_module, "np", RecordingNumpy())
    with parallel.single_threaded_blas():
        got = parallel.matmul(a, b)
    monkeypatch.undo()
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)
    chunks = borrowed_chunks(2 * 512 * 576 * 3072)
    assert chunks == 7  # 0.9 GFLOP in chunks of at most CHUNK_FLOPS
    assert (threading.get_ident(), 1536) in calls and len(calls) == 1 + chunks
    assert sum(width for _, width in calls) == 3072
    for flops in (1, CHUNK_FLOPS, 1e15):
        assert 1 <= borrowed_chunks(flops) <= MAX_BORROWED_CHUNKS


def test_when_the_calling_thread_fails_the_borrowed_thread_stops_and_the_callers_error_is_raised(pair):
    prefill, _ = pair
    parallel = Parallel(2, share=prefill)
    caller = threading.get_ident()
    borrowed_ran: list[int] = []
    started = threading.Event()
    work = np.ones((256, 256), dtype=np.float32)

    def item(i):
        if i == "mine":
            started.wait(timeout=5)  # the borrowed thread is under way
            raise ValueError("the caller's product failed")
        assert threading.get_ident() != caller
        borrowed_ran.append(i)
        started.set()
        work @ work  # about a millisecond, the GIL released
        if i == 150:
            raise RuntimeError("a later failure of the borrowed thread")
    with pytest.raises(ValueError, match="caller's"):
        parallel._take_together(item, list(range(200)), first="mine")
    assert len(borrowed_ran) < 150  # it took no further item once the caller had failed
