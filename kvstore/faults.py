"""The test-only fault injection service (pdserve.testing.v1.KVStoreFaults), registered only with
``--enable-fault-injection``."""

from __future__ import annotations

import grpc

from pdserve.kvstore.store import BlockStore
from pdserve.kvstore.stored import UnknownBlock, checksum
from pdserve.testing.v1 import kvstore_faults_pb2, kvstore_faults_pb2_grpc


def corrupt_block(store: BlockStore, key: str, keep_checksum_valid: bool = False) -> None:
    """Flip one byte of a stored block; ``keep_checksum_valid``: and rewrite its CRC32 to match, as an attacker who
    can write the bytes would (only the MAC tells then)."""
    block = store.blocks.get(key)
    if block is None:
        raise UnknownBlock(key)
    data = bytearray(block.data.tobytes() if hasattr(block.data, "tobytes") else block.data)
    data[len(data) // 2] ^= 0xFF
    block.data = bytes(data)
    if keep_checksum_valid:
        block.crc32 = checksum(block.data)


class KVStoreFaultsService(kvstore_faults_pb2_grpc.KVStoreFaultsServicer):
    """The test-only pdserve.testing.v1.KVStoreFaults service: registered only with --enable-fault-injection."""

    def __init__(self, store: BlockStore) -> None:
        self.store = store

    async def Corrupt(self, request, context):
        try:
            corrupt_block(self.store, request.key, request.keep_checksum_valid)
        except UnknownBlock:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"key: block {request.key} is not stored")
        return kvstore_faults_pb2.CorruptResponse()
