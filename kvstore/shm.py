"""The same-host fast path: a call's block bytes in one file of /dev/shm instead of data messages on the socket.

The client owns the files on both paths: it creates them (mode 0600, random names), writes the blocks into one for a
Put or hands its name to a Get for the kvstore to fill, keeps a few for its next calls and removes them when it
closes. The kvstore only opens
files that already exist under /dev/shm with this module's name pattern, never following a link, and only when it runs
with ``--kv-shm``. Checksums are computed and verified exactly as on the socket path.

Copies per block: Put, one into the file (client) and one out of it into the store (kvstore); Get, one into the file
(kvstore) and one out of it (client), where the socket path has one encode on the sending side and gRPC's own.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import uuid
from collections.abc import Iterator

SHM_DIR = "/dev/shm"
_NAME = re.compile(r"pdserve-kv-[0-9a-f]{32}")


class ShmUnavailable(Exception):
    """The named file cannot be used (not on this host, wrong name, not a regular file)."""


def available() -> bool:
    return os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)


def _path(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ShmUnavailable(f"shm_name: {name!r} is not a pdserve KV file name")
    return os.path.join(SHM_DIR, name)


def open_existing(name: str, writable: bool) -> int:
    """A descriptor of an existing regular file of /dev/shm named by :class:`ShmFile` (the kvstore's side)."""
    flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(_path(name), flags)
    except OSError as exc:
        raise ShmUnavailable(f"shm_name: {name}: {exc.strerror} (is the kvstore on this host?)") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ShmUnavailable(f"shm_name: {name} is not a regular file")
    return fd


def read_block(fd: int, offset: int, nbytes: int) -> bytes:
    """One block's bytes from the file (one copy); short if the file is."""
    return os.pread(fd, nbytes, offset)


def write_block(fd: int, offset: int, views) -> None:
    """Write a block (its bytes-like pieces) at ``offset``; the file grows as needed."""
    for view in views:
        view = memoryview(view).cast("B")
        while len(view):
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written


class ShmFile:
    """A client's file: created empty (mode 0600, a random name), removed by :meth:`close`."""

    def __init__(self) -> None:
        self.name = f"pdserve-kv-{uuid.uuid4().hex}"
        self.fd = os.open(_path(self.name), os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)

    def close(self) -> None:
        os.close(self.fd)
        try:
            os.unlink(_path(self.name))
        except FileNotFoundError:
            pass

    @property
    def size(self) -> int:
        return os.fstat(self.fd).st_size


class ShmPool:
    """A client's files, kept between calls: the kernel gives a file its pages once, not on every call. A file is
    lent to one call at a time; the bytes read back out of it are copies, since the next call overwrites it."""

    def __init__(self, keep_files: int = 8, keep_bytes: int = 256 << 20) -> None:
        self.keep_files, self.keep_bytes = keep_files, keep_bytes
        self.idle: list[ShmFile] = []

    @contextlib.contextmanager
    def lend(self) -> Iterator[ShmFile]:
        file = self.idle.pop() if self.idle else ShmFile()
        try:
            yield file
        except BaseException:
            file.close()  # in an unknown state (e.g. a call cancelled while the kvstore may still write it)
            raise
        if len(self.idle) < self.keep_files and file.size <= self.keep_bytes:
            self.idle.append(file)
        else:
            file.close()

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()
