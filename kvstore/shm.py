"""The same-host fast path: a call's block bytes in shared memory instead of data messages on the socket.

The client owns the memory: anonymous files (``memfd_create``: no name in /dev/shm, nothing anyone else can open,
nothing left behind when its processes die). It hands each file to the kvstore once, as a file descriptor over the
kvstore's Unix socket (SCM_RIGHTS), and gets back a random handle that its Put and Get calls name (``shm_name``). The
kvstore never opens a file by name: it reads and writes only descriptors a client passed it, and takes only regular
files with no link (an anonymous file). Both ends check the other's user id on the socket (SO_PEERCRED): the kvstore
takes files only from its own user, and a client hands its files only to a kvstore run by its own user (not to one
squatting the socket's name). A kvstore closes a client's descriptors when that client's connection ends (it exited
or was killed), and the memory goes with the last descriptor. Checksums and MACs are computed and verified exactly
as on the socket path.

Copies per block: Put, one into the file (client) and one out of it into the store (kvstore); Get, one into the file
(kvstore) and one out of it (client), where the socket path has one encode on the sending side and gRPC's own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import stat
import struct
import sys
import threading
from collections.abc import Iterator

from pdserve.common.private_dir import private_dir

log = logging.getLogger("pdserve.kvstore.shm")

MAX_FILES_PER_CLIENT = 64  # descriptors one client connection may have registered at once
MAX_CLIENTS = 256  # client connections a kvstore serves at once
TIMEOUT_S = 5.0


class ShmUnavailable(Exception):
    """Shared memory cannot be used for this call (another host, no such handle, the kvstore refused)."""


def available() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "memfd_create") and hasattr(socket, "send_fds")


def socket_address(port: int) -> str:
    """The kvstore's Unix socket, named by its gRPC port, in this user's private directory (``common/private_dir.py``):
    another local user can neither take the name first (as one could in the abstract namespace) nor connect."""
    return str(private_dir() / f"kv-shm-{port}.sock")


def peer_uid(sock: socket.socket) -> int:
    _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid


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


# --- the kvstore's side ------------------------------------------------------------------------------------------------
class ShmRegistry:
    """The descriptors clients registered, by handle; a thread per client connection serves the socket."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        path = socket_address(port)
        with contextlib.suppress(FileNotFoundError):  # left by a kvstore of this user that died on this port
            os.unlink(path)
        self.sock.bind(path)
        self.sock.listen(16)
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()
        self._clients = 0
        threading.Thread(target=self._accept, name="kv-shm-accept", daemon=True).start()

    @property
    def files(self) -> int:
        return len(self._fds)

    def open(self, handle: str) -> int:
        """A descriptor of the file registered under ``handle`` (a duplicate: the caller closes it, and a client
        going away meanwhile cannot close it under the call)."""
        with self._lock:
            fd = self._fds.get(handle)
            if fd is None:
                raise ShmUnavailable("shm_name: no shared-memory file is registered under this handle")
            return os.dup(fd)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with self._lock:
                admitted = peer_uid(conn) == os.geteuid() and self._clients < MAX_CLIENTS
                self._clients += admitted
            if not admitted:
                log.warning("shm: refused a client connection (another user, or %d clients already)", MAX_CLIENTS)
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), name="kv-shm-client", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        mine: set[str] = set()
        try:
            while True:
                message, fds, _, _ = socket.recv_fds(conn, 256, 1)
                if not message:
                    return  # the client closed or died
                if message == b"R":  # register: answered with a handle, or "-" (refused)
                    if len(fds) == 1 and len(mine) < MAX_FILES_PER_CLIENT and _anonymous(fds[0]):
                        handle = f"pdserve-kv-{secrets.token_hex(16)}"
                        with self._lock:
                            self._fds[handle] = fds.pop()
                        mine.add(handle)
                        conn.send(handle.encode())
                    else:
                        conn.send(b"-")
                elif message[:1] == b"U" and message[1:].decode(errors="replace") in mine:  # unregister: no answer
                    handle = message[1:].decode()
                    mine.discard(handle)
                    self._forget(handle)
                for fd in fds:
                    os.close(fd)
        except OSError:
            return
        finally:
            for handle in mine:
                self._forget(handle)
            conn.close()
            with self._lock:
                self._clients -= 1

    def _forget(self, handle: str) -> None:
        with self._lock:
            fd = self._fds.pop(handle, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        self.sock.close()


def _anonymous(fd: int) -> bool:
    """A regular file with no name anywhere (memfd_create), owned by this user."""
    st = os.fstat(fd)
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 0 and st.st_uid == os.geteuid()


# --- the client's side -------------------------------------------------------------------------------------------------
class Registrar:
    """A client's connection to one kvstore's socket: registers its files there, and unregisters them."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.broken = False

    def _connect(self) -> socket.socket:
        if self.broken:
            raise ShmUnavailable("shm: the kvstore's socket went away")
        if self.sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
            sock.settimeout(TIMEOUT_S)
            try:
                sock.connect(socket_address(self.port))
            except OSError as exc:
                sock.close()
                self.broken = True
                raise ShmUnavailable(f"shm: no kvstore socket on this host ({exc.strerror})") from None
            if peer_uid(sock) != os.geteuid():  # someone else holds the name: never hand it our memory
                sock.close()
                self.broken = True
                raise ShmUnavailable("shm: the kvstore socket belongs to another user")
            self.sock = sock
        return self.sock

    def register(self, fd: int) -> str:
        sock = self._connect()
        try:
            socket.send_fds(sock, [b"R"], [fd])
            handle = sock.recv(64).decode()
        except OSError as exc:
            self.broken = True
            raise ShmUnavailable(f"shm: registering a file failed ({exc})") from None
        if not handle.startswith("pdserve-kv-"):
            raise ShmUnavailable("shm: the kvstore refused the file")
        return handle

    def unregister(self, handle: str) -> None:
        if self.sock is not None and not self.broken:
            with contextlib.suppress(OSError):
                self.sock.send(b"U" + handle.encode())

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class ShmFile:
    """A client's anonymous file, registered with each kvstore it is used with; :meth:`close` frees it."""

    def __init__(self) -> None:
        self.fd = os.memfd_create("pdserve-kv", os.MFD_CLOEXEC)
        self.handles: dict[Registrar, str] = {}

    def handle(self, registrar: Registrar) -> str:
        """Its handle at that kvstore (registered on first use)."""
        if registrar not in self.handles:
            self.handles[registrar] = registrar.register(self.fd)
        return self.handles[registrar]

    def close(self) -> None:
        for registrar, handle in self.handles.items():
            registrar.unregister(handle)
        os.close(self.fd)

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
