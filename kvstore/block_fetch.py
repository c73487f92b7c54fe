"""One Get of the kvstore client: each shard's group fetched through shared memory or the socket, every block checked
(CRC32 and MAC) as it arrives, and handed on in key order as soon as it and every block before it are here."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc

from pdserve.kvstore import socket_transfer
from pdserve.kvstore.block_data import BlockData, KVIntegrityError
from pdserve.kvstore.mac import MacMismatch
from pdserve.kvstore.shm_transfer import REFUSALS
from pdserve.kvstore.stored import checksum
from pdserve.v1 import kvstore_pb2

if TYPE_CHECKING:
    from pdserve.kvstore.client import KVStoreClient


class BlockFetch:
    def __init__(self, client: KVStoreClient, keys: list[str], timeout: float | None, wait_s: float, lease_id: str,
                 on_block: Callable[[BlockData], object] | None) -> None:
        self.client = client
        self.keys = keys
        self.timeout = timeout
        self.wait_s = wait_s
        self.lease_id = lease_id
        self.on_block = on_block
        self.out: list[BlockData | None] = [None] * len(keys)
        self.delivered = 0  # blocks handed to ``on_block``: every one before the first still missing

    def request(self, positions: list[int], shm_name: str = "") -> kvstore_pb2.GetRequest:
        return kvstore_pb2.GetRequest(keys=[self.keys[i] for i in positions], wait_s=self.wait_s,
                                      lease_id=self.lease_id, shm_name=shm_name)

    def arrived(self, i: int, block: BlockData) -> None:
        self.out[i] = block
        out = self.out
        while self.on_block is not None and self.delivered < len(out) and out[self.delivered] is not None:
            self.on_block(out[self.delivered])
            self.delivered += 1

    def checked(self, header: kvstore_pb2.BlockHeader, crc32: int, complete: bool, data) -> BlockData:
        if not complete or crc32 != header.crc32:
            raise KVIntegrityError(f"block {header.key} arrived corrupted")
        mac = self.client.mac
        if mac is not None:
            try:
                mac.verify(header.key, header.token_count, data, header.mac)
            except MacMismatch as exc:
                raise KVIntegrityError(str(exc)) from None
        return BlockData(header.key, header.token_count, data, header.kv_dtype)

    async def group(self, shard: int, positions: list[int]) -> None:
        """Fetch the blocks at ``positions`` from ``shard`` (the client's failover calls this per shard)."""
        try:
            if self.client.shm_transfer.on[shard]:
                try:
                    return await self._shm(shard, positions)
                except REFUSALS as err:
                    if not self.client.shm_transfer.refused(shard, err):
                        raise
            await self._socket(shard, positions)
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.DATA_LOSS:
                raise KVIntegrityError(err.details()) from err
            raise

    async def _socket(self, shard: int, positions: list[int]) -> None:
        it = iter(positions)
        call = self.client.gets[shard](self.request(positions), timeout=self.timeout)
        async for header, crc32, complete, data in socket_transfer.received_blocks(call):
            self.arrived(next(it), self.checked(header, crc32, complete, data))

    async def _shm(self, shard: int, positions: list[int]) -> None:
        got = await self.client.shm_transfer.get(shard, self.client.gets[shard],
                                                 lambda name: self.request(positions, name), self.timeout)
        for i, (h, data) in zip(positions, got):
            self.arrived(i, self.checked(h, checksum(data), len(data) == h.nbytes, data))

    def blocks(self) -> list[BlockData]:
        """Every block, in the order asked for; KVIntegrityError if some never came."""
        if any(b is None for b in self.out):
            raise KVIntegrityError("kvstore returned fewer blocks than asked for")
        return self.out  # type: ignore[return-value]
