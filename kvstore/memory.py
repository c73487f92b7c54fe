"""Keep freed memory in the process, so that KV buffers are not faulted in afresh on every block.

glibc hands allocations above 128 KiB out as fresh mappings and returns them (and a heap top over its trim threshold)
to the kernel when freed (mallopt(3): M_MMAP_THRESHOLD, M_TRIM_THRESHOLD). A KV block is a few hundred KiB, so
every buffer of the hand-off (a received message, a block being assembled, a message being sent) would start as
untouched pages: one page fault per 4 KiB, which on a virtual machine costs more than copying the bytes. With both
thresholds raised, freed buffers stay in the heap and the next block reuses them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("pdserve.kvstore.memory")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest allowed value on 64-bit
TRIM_THRESHOLD_BYTES = 256 << 20  # free heap kept for reuse before glibc gives memory back

_done = False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; False where the C library is not glibc."""
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
            libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    except (OSError, AttributeError):
        ok = False
    if not ok:
        log.debug("mallopt not available; KV buffers use the C library's defaults")
    _done = ok
    return ok
