"""The shared-memory path of the kvstore client (``kvstore/shm.py``): block bytes through a file both processes map,
for shards on this host run with ``--kv-shm``. A shard that cannot (another host, no ``--kv-shm``, its socket gone)
is told apart from a failed call and gets the socket from then on."""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc

from pdserve.kvstore import shm as shm_files
from pdserve.kvstore.block_data import BlockData, KVIntegrityError
from pdserve.kvstore.stored import block_views
from pdserve.v1 import kvstore_pb2

log = logging.getLogger("pdserve.kvstore.client")
REFUSALS = (grpc.aio.AioRpcError, shm_files.ShmUnavailable)  # what a shard that cannot use shm may raise


def loopback_port(target: str) -> int | None:
    """The port of a target on this host (loopback), else None: shared memory is only tried there."""
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    local = host == "localhost" or host.startswith("127.") or host == "::1"
    return int(port) if local and port.isdigit() else None


class ShmTransfer:
    def __init__(self, targets: list[str], wanted: bool) -> None:
        """``wanted``: try shared memory with every shard on this host (where the platform has it)."""
        self.targets = targets
        self.registrars = [shm_files.Registrar(port) if wanted and port and shm_files.available() else None
                           for port in map(loopback_port, targets)]
        self.on = [r is not None for r in self.registrars]  # per shard: blocks go through shared memory
        self.pool = shm_files.ShmPool()

    def close(self) -> None:
        self.pool.close()
        for registrar in self.registrars:
            if registrar is not None:
                registrar.close()

    async def put(self, shard: int, put_call, blocks: list[BlockData], positions: list[int],
                  header_of: Callable[..., kvstore_pb2.BlockHeader], lease_id: str, lease_ttl_s: float,
                  timeout: float | None) -> int:
        """One shard's Put: the blocks' bytes into a file, their headers (with offsets) on the stream."""
        with self.pool.lend() as file:
            headers, offset = [], 0
            for i in positions:
                b = blocks[i]
                shm_files.write_block(file.fd, offset, block_views(b.data))  # the one copy
                headers.append(header_of(b, offset))
                offset += len(b.data)
            handle = file.handle(self.registrars[shard])
            first = kvstore_pb2.PutChunk(header=headers[0], lease_id=lease_id, lease_ttl_s=lease_ttl_s,
                                         shm_name=handle)
            chunks = [first] + [kvstore_pb2.PutChunk(header=h) for h in headers[1:]]
            return (await put_call(iter(chunks), timeout=timeout)).stored

    async def get(self, shard: int, get_call, request_for: Callable[[str], kvstore_pb2.GetRequest],
                  timeout: float | None) -> list[tuple[kvstore_pb2.BlockHeader, bytes]]:
        """One shard's Get: the kvstore writes the bytes into a file and streams headers; each block is read out."""
        with self.pool.lend() as file:
            headers = []
            async for chunk in get_call(request_for(file.handle(self.registrars[shard])), timeout=timeout):
                if not chunk.HasField("header"):
                    raise KVIntegrityError("kvstore sent data on a shared-memory Get")
                headers.append(chunk.header)
            return [(h, shm_files.read_block(file.fd, h.shm_offset, h.nbytes)) for h in headers]  # copies: reused

    def refused(self, shard: int, err: Exception) -> bool:
        """A shard that cannot use shared memory gets the socket from now on; True if that was the error."""
        if isinstance(err, shm_files.ShmUnavailable):
            detail = str(err)
        elif err.code() == grpc.StatusCode.FAILED_PRECONDITION and "shm" in (err.details() or ""):
            detail = err.details()
        else:
            return False
        log.warning("kvstore %s: no shared memory (%s); using the socket", self.targets[shard], detail)
        self.on[shard] = False
        return True
