"""OpenBLAS's idle threads keep spinning on their core for a while after a product. Where the next work on that core
is not BLAS (a compiled loop, the quantized products' own threads), it shares the core with a spinning thread: on
the 2-core machine a quantized decode step taken right after float32 products ran 2-3x slower for the next two to
four steps (4 rows: 25-28 ms against 13; 8 rows: 45, 41, 29 ms against 21), the pattern of every prompt chunk
(float32) followed by decode steps (quantized) in one process. With OPENBLAS_THREAD_TIMEOUT=4 (spin 2^4 cycles before
sleeping) the penalty was gone and float32 steps took as long as before. OpenBLAS reads the variable when it loads,
so it is set before numpy is imported: at the command line's start and in the environment of the processes the
launcher starts."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

SPIN_ENV = "OPENBLAS_THREAD_TIMEOUT"
SHORT_SPIN = "4"  # OpenBLAS's smallest: 2^4 cycles


def short_blas_spin(env: MutableMapping[str, str] = os.environ) -> None:
    """Let BLAS's idle threads sleep almost at once, unless the user set the variable."""
    env.setdefault(SPIN_ENV, SHORT_SPIN)
