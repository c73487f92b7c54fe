"""Two-way work splitting for the attention of a forward pass, on a machine with few cores.

The linear layers are large matrix products that BLAS spreads over the cores itself. Attention is many smaller
products and elementwise passes: BLAS's own threads gain little there (measured slower than one thread on a busy
2-core machine), and numpy's elementwise passes use one core. So attention splits its work in two halves run by two
Python threads (numpy, BLAS and the compiled kernels release the GIL), with BLAS held to one thread meanwhile.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy  # noqa: F401  (loads BLAS, whose thread count sets the default split)
from threadpoolctl import ThreadpoolController


class Parallel:
    """``threads`` workers (the calling thread and a pool of threads - 1). By default two where the process may use
    two cores: as many as BLAS was given (a worker the launcher gave one BLAS thread, because other workers share the
    cores, splits nothing) and the machine has."""

    def __init__(self, threads: int | None = None) -> None:
        blas = ThreadpoolController().select(user_api="blas").lib_controllers
        if threads is None:
            threads = min([2, os.cpu_count() or 1, *(lib.num_threads for lib in blas)])
        self.threads = max(1, threads)
        self._pool = ThreadPoolExecutor(self.threads - 1) if self.threads > 1 else None
        self._blas = blas if self._pool else []

    def both(self, fn: Callable, first: tuple, second: tuple) -> None:
        """fn(*first) and fn(*second) at once (the first on the pool), or one after the other on one worker."""
        if self._pool is None:
            fn(*first)
            fn(*second)
            return
        other = self._pool.submit(fn, *first)
        try:
            fn(*second)
        finally:
            other.result()

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
