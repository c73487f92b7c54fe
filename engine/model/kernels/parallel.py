"""Two-way work splitting for a forward pass, on a machine with few cores.

BLAS spreads a large matrix product over the cores itself. Attention is many smaller products, compiled loops and
elementwise passes: BLAS's own threads gain little there (measured slower than one thread on a busy 2-core machine),
and the loops and numpy's elementwise passes use one core. So attention splits its work in two halves run by two
Python threads (numpy, BLAS and the compiled kernels release the GIL), with BLAS held to one thread meanwhile.

For a batch of many rows the forward pass goes further and runs every product on these two threads too, each on half
of the weight's columns, with BLAS on one thread for the whole pass. The reason is OpenBLAS's idle workers: after a
product they spin on their core for a while before they sleep, so a compiled attention loop started on that core
right after a product shares it with a spinning thread. Measured on the 2-core machine (30 layers of SmolLM2's
matrices, 32 rows): OpenBLAS's two threads 100 ms, the column halves 92 ms; with every product split, the decode
attention's two halves stop losing to the spin (the README's Benchmarks section has the step times).

A worker that shares its host's cores with other workers (kernels/core_share.py) keeps BLAS on one thread and runs
its second thread only while no other worker is in a forward pass. The borrowed thread's half of each product goes in
column chunks of about CHUNK_FLOPS, taken one by one: it checks before each chunk and stops once the other worker
starts a forward, so the core goes back within a chunk (a millisecond or so) instead of half a product (half of a
512-row feed-forward product is 0.9 GFLOP, several milliseconds on one core, a large part of a decode step), and the
calling thread, once done with its own half in one call, finishes the chunks left rather than waiting on a half that
now shares a core with the other worker's step.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager, nullcontext

import numpy as np  # (loads BLAS, whose thread count sets the default split)
from threadpoolctl import ThreadpoolController

from pdserve.engine.model.kernels.core_share import CoreShare

CHUNK_FLOPS = 150e6  # a column chunk's work when sharing the cores: about a millisecond on one core, wide enough for BLAS
MAX_BORROWED_CHUNKS = 8  # the most chunks the borrowed half of one product goes in


def borrowed_chunks(flops: float) -> int:
    """How many column chunks the borrowed half of a shared-out product of ``flops`` goes in: about CHUNK_FLOPS
    each, at least one, at most MAX_BORROWED_CHUNKS."""
    return int(min(MAX_BORROWED_CHUNKS, max(1, math.ceil(flops / 2 / CHUNK_FLOPS))))


class Parallel:
    """``threads`` workers (the calling thread and a pool of threads - 1). By default two where the process may use
    two cores: as many as BLAS was given (a worker the launcher gave one BLAS thread, because other workers share the
    cores, splits nothing) and the machine has; a worker given a core share (``share``, by default the one the
    launcher handed it) two where the machine has them, the second used only while the other workers rest."""

    def __init__(self, threads: int | None = None, share: CoreShare | None = None) -> None:
        blas = ThreadpoolController().select(user_api="blas").lib_controllers
        if threads is None:
            share = share or CoreShare.from_env()
            threads = min([2, os.cpu_count() or 1, *([] if share else [lib.num_threads for lib in blas])])
        self.threads = max(1, threads)
        self._pool = ThreadPoolExecutor(self.threads - 1) if self.threads > 1 else None
        self._blas = blas if self._pool else []
        self._share = share if self._pool else None
        self.lent = 0  # splits that ran on a second core while sharing the host's cores
        self.own = 0  # splits kept to this worker's core because another worker was busy

    @property
    def shares_cores(self) -> bool:
        """Whether this worker's second thread is a core it shares with other workers (kernels/core_share.py)."""
        return self._share is not None

    def split_now(self) -> bool:
        """Whether a split about to run may take the second thread now (counted as lent or kept to one's own core)."""
        if self._pool is None:
            return False
        if self._share is None:
            return True
        if self._share.others_busy():
            self.own += 1
            return False
        self.lent += 1
        return True

    def working(self) -> AbstractContextManager:
        """Context of one forward pass: the other workers sharing the cores see this one busy."""
        return self._share.working() if self._share else nullcontext()

    def both(self, fn: Callable, first: tuple, second: tuple) -> None:
        """fn(*first) and fn(*second) at once (the first on the pool), or one after the other on one worker."""
        if not self.split_now():
            fn(*first)
            fn(*second)
            return
        other = self._pool.submit(fn, *first)
        try:
            fn(*second)
        finally:
            other.result()

    def share_out(self, fn: Callable, items: Sequence) -> None:
        """fn(item) for every item, taken in order by the calling thread and the pool's thread together. The pool's
        thread joins only if a split may run now, and while sharing the host's cores takes no further item once
        another worker is in a forward pass; the calling thread takes whatever is left."""
        if len(items) < 2 or not self.split_now():
            for item in items:
                fn(item)
            return
        self._take_together(fn, items)

    def _take_together(self, fn: Callable, items: Sequence, first: tuple[int, int] | None = None) -> None:
        """fn(item) for every item, the pool's thread taking items in order until the other workers want their core
        back, the calling thread too once it has run fn(first) (where given: work only it does). If the calling
        thread fails, the pool's thread takes no further item, and the calling thread's error is the one raised."""
        taken = itertools.count()  # next() on it is one step under the GIL: each index goes to one thread
        failed = threading.Event()

        def take(borrowed: bool) -> None:
            while not (failed.is_set() or borrowed and self._share is not None and self._share.others_busy()):
                i = next(taken)
                if i >= len(items):
                    return
                fn(items[i])

        other = self._pool.submit(take, True)
        try:
            if first is not None:
                fn(first)
            take(False)
        except BaseException:
            failed.set()
            wait([other])
            raise
        other.result()

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a @ b by column ranges of b (strided views: no copy), one BLAS call per range. With cores of its own: halves,
        one per thread. Sharing the host's cores: the calling thread, whose core is its own, takes the first half
        whole; the second half goes in chunks of about CHUNK_FLOPS that the borrowed thread takes one by one (it
        stops once another worker starts a forward) and the calling thread joins once its half is done. Each call
        packs all of ``a`` again, so chunking only the borrowed half halves what chunks cost. Run it with BLAS held
        to one thread (:meth:`single_threaded_blas`), or each range would start BLAS's own threads as well."""
        out = np.empty((a.shape[0], b.shape[1]), dtype=np.result_type(a, b))
        columns = b.shape[1]

        def product(span: tuple[int, int]) -> None:
            np.matmul(a, b[:, span[0]:span[1]], out=out[:, span[0]:span[1]])
        half = columns // 2
        if self._share is None:
            self.both(product, ((0, half),), ((half, columns),))
        elif not self.split_now():
            product((0, columns))
        else:
            chunks = borrowed_chunks(2 * a.shape[0] * b.shape[0] * columns)
            bounds = [half + (columns - half) * i // chunks for i in range(chunks + 1)]
            self._take_together(product, list(zip(bounds[:-1], bounds[1:])), first=(0, half))
        return out

    @contextmanager
    def single_threaded_blas(self) -> Iterator[None]:
        """BLAS on one thread inside (each of our threads runs its own products), back to its setting after."""
        before = [lib.num_threads for lib in self._blas]
        for lib in self._blas:
            lib.set_num_threads(1)
        try:
            yield
        finally:
            for lib, n in zip(self._blas, before):
                lib.set_num_threads(n)

