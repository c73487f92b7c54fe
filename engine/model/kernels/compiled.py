"""numba's njit for the engine's kernels: cached on disk where a cache can be written, compiled in memory elsewhere.

The on-disk cache saves each process the kernels' compile time (a second or two). numba refuses ``cache=True`` with an
error at import when it finds no writable place for the cache (a read-only install run by a user without a home
directory, as in a locked-down container), so there the kernels are compiled without it.
"""

from __future__ import annotations

from collections.abc import Callable

import numba


def compiled(**options) -> Callable[[Callable], Callable]:
    """``numba.njit(nogil=True, cache=True, **options)``, without ``cache`` where no cache can be written."""
    def decorate(fn: Callable) -> Callable:
        try:
            return numba.njit(nogil=True, cache=True, **options)(fn)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return numba.njit(nogil=True, **options)(fn)
    return decorate
