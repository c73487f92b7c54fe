"""Cores lent between the model workers of one host.

A host with fewer cores than its workers could use (the 2-core development machine runs a prefill and a decode
worker) gives each worker one core's BLAS thread, which splits the load statically: a long prompt's prefill runs on
one core while the decode worker idles between its steps, and the decode steps of a closed loop run on one core while
prefill waits for work. Workers launched together share a small file, one byte per worker, set while that worker runs
a forward pass. A worker runs its own second thread (the pool of kernels/parallel.py, which waits on a queue rather
than spinning) only while no other worker's byte is set; it checks before each split product, so a worker that starts
a forward has its core back within one product of the other's. BLAS stays on one thread in every worker: OpenBLAS's
idle threads spin, and a borrowed core must be free the moment its owner wants it.

The launcher makes the file (launcher/stack.py) and hands each worker ``PATH:SLOT`` in ``PDSERVE_CORE_SHARE``. A
worker killed inside a forward leaves its byte set until its successor starts on the same slot: meanwhile the others
keep to their own cores, the static split, never worse.
"""

from __future__ import annotations

import mmap
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CORE_SHARE_ENV = "PDSERVE_CORE_SHARE"


def create_core_share(path: Path, workers: int) -> None:
    """The shared file for ``workers`` workers, every one idle, readable by this user only. Made under a fresh name
    and renamed into place: a file or link already at ``path`` (a log directory shared with others) is replaced, never
    written through, and workers of a stack still running on an older file keep theirs."""
    path = Path(path)
    fresh = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, bytes(workers))
    finally:
        os.close(fd)
    os.replace(fresh, path)


class CoreShare:
    """One worker's view of the shared file: its own byte to set, the others' to read."""

    def __init__(self, path: str | Path, slot: int) -> None:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)  # a link planted in its place is refused (ELOOP)
        try:
            owner = os.fstat(fd).st_uid
            if owner != os.geteuid():
                raise ValueError(f"{CORE_SHARE_ENV}: {path} belongs to uid {owner}, not to this worker's user")
            self._map = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        if not 0 <= slot < len(self._map):
            raise ValueError(f"{CORE_SHARE_ENV}: slot {slot} outside the file's {len(self._map)} workers")
        self.slot = slot
        self._others = [i for i in range(len(self._map)) if i != slot]
        self._map[slot] = 0  # a restarted worker may find its predecessor's byte still set

    @classmethod
    def from_env(cls) -> CoreShare | None:
        """The share the launcher handed this process, or None (a worker started alone, a benchmark, a test)."""
        spec = os.environ.get(CORE_SHARE_ENV)
        if not spec:
            return None
        path, _, slot = spec.rpartition(":")
        if not path or not slot.isdigit():
            raise ValueError(f"{CORE_SHARE_ENV}={spec!r}: expected PATH:SLOT")
        return cls(path, int(slot))

    def others_busy(self) -> bool:
        """Whether any other worker is in a forward pass now."""
        return any(self._map[i] for i in self._others)

    @contextmanager
    def working(self) -> Iterator[None]:
        """This worker's byte set for the duration (one forward pass)."""
        self._map[self.slot] = 1
        try:
            yield
        finally:
            self._map[self.slot] = 0
