"""The shared-memory path against another local user. The kvstore used to open any /dev/shm file matching its name
pattern, so a Put's checksum check told an attacker whether a guess matched the bytes of another user's file, and a Get
wrote into whatever file was named; pool files outlived a killed worker. Now a client hands the kvstore anonymous
memory as file descriptors over a Unix socket, both ends check the other's user id, a call names only a registered
handle, and the memory goes when the client does."""

import asyncio
import os
import secrets
import shutil
import signal
import subprocess
import zlib

import grpc
import pytest

from pdserve.client.client import PdserveClient
from pdserve.kvstore import shm
from pdserve.kvstore.mac import BlockMAC
from pdserve.launcher.ports import free_port
from pdserve.v1 import kvstore_pb2, kvstore_pb2_grpc
from tests.helpers import router_lease, start_stack, wait_until

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs Linux memfd_create and SCM_RIGHTS")
OTHER_USER = "65534"  # nobody
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")
SETPRIV = shutil.which("setpriv")


def as_other_user(code: str) -> subprocess.Popen:
    """A plain Python of the system, run as another user (needs root and util-linux's setpriv: skipped otherwise).
    setpriv changes the user after the exec, so this process (with gRPC's threads) forks nothing but a plain exec."""
    if os.geteuid() != 0 or SYSTEM_PYTHON is None or SETPRIV is None:
        pytest.skip("another user's process needs root, /usr/bin/python3 and setpriv")
    return subprocess.Popen([SETPRIV, f"--reuid={OTHER_USER}", f"--regid={OTHER_USER}", "--clear-groups",
                             SYSTEM_PYTHON, "-c", code], cwd="/tmp", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.fixture(scope="module")
def stack(tiny_model_path):
    stack = start_stack(model=str(tiny_model_path), kv_shm=True, fault_injection=True)
    yield stack
    stack.stop()


def shm_files(stack) -> int:
    async def get():
        kv = stack.kv_client("admin")
        try:
            return (await kv.stats())[0].shm_files
        finally:
            await kv.close()
    return asyncio.run(get())


def test_a_call_cannot_name_another_users_file(stack, tmp_path):
    """A file of /dev/shm with the old pool name and secret bytes: Put naming it is refused whatever checksum is
    guessed (no oracle), and a Get naming it writes nothing."""
    secret = b"root's KV bytes " * 64
    name = f"pdserve-kv-{secrets.token_hex(16)}"
    path = os.path.join("/dev/shm", name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secret)
        lease = router_lease(stack)
        mac = BlockMAC(stack.identities.identity("prefill").kv_key)
        answers = []
        with stack.channel(stack.kvstores[0], "prefill") as ch:
            stub = kvstore_pb2_grpc.KVStoreStub(ch)
            for guess in (secret, b"x" * len(secret)):  # the right bytes and wrong ones
                header = kvstore_pb2.BlockHeader(key=f"oracle-{len(answers)}", token_count=1, nbytes=len(secret),
                                                 crc32=zlib.crc32(guess), mac=mac.sign("k", 1, guess))
                with pytest.raises(grpc.RpcError) as err:
                    stub.Put(iter([kvstore_pb2.PutChunk(header=header, shm_name=name, lease_id=lease, lease_ttl_s=30)]))
                answers.append((err.value.code(), err.value.details()))
            with pytest.raises(grpc.RpcError) as err:
                list(stub.Get(kvstore_pb2.GetRequest(keys=["oracle-0"], shm_name=name, lease_id=lease)))
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert answers[0] == answers[1] and answers[0][0] == grpc.StatusCode.FAILED_PRECONDITION
        assert os.pread(fd, len(secret) + 16, 0) == secret  # untouched
    finally:
        os.close(fd)
        os.unlink(path)


REGISTER = """
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(5)
fd = os.memfd_create("mine")
try:
    s.connect({path!r})  # the socket is in the kvstore user's 0700 directory: refused here now
    socket.send_fds(s, [b"R"], [fd])
    print(repr(s.recv(64)))
except OSError as exc:
    print("refused", exc)
"""


def test_the_kvstore_takes_files_only_from_its_own_user(stack):
    before = shm_files(stack)
    other = as_other_user(REGISTER.format(path=shm.socket_address(stack.kvstores[0].port)))
    out, err = other.communicate(timeout=30)
    assert out.strip() == "b''" or out.startswith("refused"), (out, err)  # the connection closed: no handle
    assert shm_files(stack) == before


SQUAT = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind("\\0pdserve-kv-shm-{port}")
s.listen(1)
print("listening", flush=True)
conn, _ = s.accept()
try:
    msg, fds, _, _ = socket.recv_fds(conn, 64, 4)
    print("got", len(fds), flush=True)
except OSError:
    print("got nothing", flush=True)
"""


def test_a_client_gives_its_memory_only_to_a_kvstore_of_its_own_user():
    """Another user listening on the name the socket once had (the abstract namespace) gets nothing: the socket now
    lives in this user's private directory, and a client checks its peer's user anyway."""
    port = free_port()
    squatter = as_other_user(SQUAT.format(port=port))
    try:
        assert squatter.stdout.readline().strip() == "listening"
        registrar, file = shm.Registrar(port), shm.ShmFile()
        try:
            with pytest.raises(shm.ShmUnavailable):  # the squatted name is not where a client looks
                file.handle(registrar)
        finally:
            file.close()
            registrar.close()
    finally:
        squatter.kill()
        out, _ = squatter.communicate(timeout=30)
    assert "got 1" not in out


def test_a_killed_worker_leaves_no_memory_behind(stack):
    with PdserveClient(stack.router_target) as c:  # prefill and decode move blocks through shared memory
        assert c.complete(token_ids=list(range(3, 60)), max_tokens=3, temperature=0).usage.completion_tokens == 3
    assert shm_files(stack) > 0
    before = {n for n in os.listdir("/dev/shm") if n.startswith("pdserve-kv")}
    for p in stack.prefills + stack.decodes:
        stack.kill(p, signal.SIGKILL)
    wait_until(lambda: shm_files(stack) == 0, 30, "the kvstore closed the killed workers' files")
    assert {n for n in os.listdir("/dev/shm") if n.startswith("pdserve-kv")} == before  # no file ever existed
    for p in stack.prefills + stack.decodes:
        stack.restart(p)
