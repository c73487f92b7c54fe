"""One Put of the kvstore client: its blocks signed and checksummed, each shard's group sent through shared memory
where that shard allows it and through the socket otherwise, and the new blocks counted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdserve.kvstore import socket_transfer
from pdserve.kvstore.block_data import BlockData
from pdserve.kvstore.shm_transfer import REFUSALS
from pdserve.kvstore.stored import checksum
from pdserve.v1 import kvstore_pb2

if TYPE_CHECKING:
    from pdserve.kvstore.client import KVStoreClient


class BlockPut:
    def __init__(self, client: KVStoreClient, blocks: list[BlockData], lease_id: str, lease_ttl_s: float,
                 timeout: float | None) -> None:
        self.client = client
        self.blocks = blocks
        self.lease_id = lease_id
        self.lease_ttl_s = lease_ttl_s
        self.timeout = timeout
        self.stored = 0  # blocks that were new to their shard

    def header(self, b: BlockData, offset: int = 0) -> kvstore_pb2.BlockHeader:
        mac = self.client.mac
        return kvstore_pb2.BlockHeader(key=b.key, token_count=b.token_count, nbytes=len(b.data), crc32=checksum(b.data),
                                       shm_offset=offset, kv_dtype=b.kv_dtype,
                                       mac=mac.sign(b.key, b.token_count, b.data) if mac else b"")

    async def group(self, shard: int, positions: list[int]) -> None:
        """Put the blocks at ``positions`` on ``shard`` (the client's failover calls this per shard)."""
        client = self.client
        if client.shm_transfer.on[shard]:
            try:
                self.stored += await client.shm_transfer.put(shard, client.puts[shard], self.blocks, positions,
                                                             self.header, self.lease_id, self.lease_ttl_s,
                                                             self.timeout)
                return
            except REFUSALS as err:
                if not client.shm_transfer.refused(shard, err):
                    raise
        messages = socket_transfer.put_messages(self.blocks, positions, self.header, self.lease_id, self.lease_ttl_s)
        self.stored += (await client.puts[shard](messages, timeout=self.timeout)).stored
