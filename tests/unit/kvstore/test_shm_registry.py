"""The shared-memory handshake in one process: a client registers anonymous memory with a kvstore's registry and
gets a handle; the registry reads and writes only registered descriptors, refuses named files, and forgets a
client's descriptors when its connection ends."""

import os
import time

import pytest

from pdserve.kvstore import shm
from pdserve.launcher.ports import free_port

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs Linux memfd_create and SCM_RIGHTS")


def wait(condition, timeout_s: float = 5.0) -> None:
    from pdserve.common.readiness import wait_for

    wait_for(condition, timeout_s, "the registry caught up")


def test_registered_memory_is_shared_and_forgotten_with_its_client(tmp_path):
    port = free_port()
    registry = shm.ShmRegistry(port)
    try:
        registrar, file = shm.Registrar(port), shm.ShmFile()
        handle = file.handle(registrar)
        assert handle.startswith("pdserve-kv-") and file.handle(registrar) == handle  # registered once
        shm.write_block(file.fd, 0, [b"hello"])
        fd = registry.open(handle)
        try:
            assert shm.read_block(fd, 0, 5) == b"hello"  # the same memory
            shm.write_block(fd, 5, [b" back"])
        finally:
            os.close(fd)
        assert shm.read_block(file.fd, 0, 10) == b"hello back"
        with pytest.raises(shm.ShmUnavailable, match="shm_name"):
            registry.open("pdserve-kv-" + "0" * 32)
        named = tmp_path / "named"
        named.write_bytes(b"a file with a name")
        with open(named, "rb") as f, pytest.raises(shm.ShmUnavailable, match="refused"):
            registrar.register(f.fileno())  # only anonymous memory
        registrar.close()  # the client goes away: its descriptors are closed
        wait(lambda: registry.files == 0)
        with pytest.raises(shm.ShmUnavailable):
            registry.open(handle)
        file.close()
    finally:
        registry.close()


def test_no_kvstore_socket_means_no_shared_memory():
    registrar, file = shm.Registrar(free_port()), shm.ShmFile()
    try:
        with pytest.raises(shm.ShmUnavailable, match="no kvstore socket"):
            file.handle(registrar)
        with pytest.raises(shm.ShmUnavailable):  # and it does not try again
            file.handle(registrar)
    finally:
        file.close()
        time.sleep(0)
