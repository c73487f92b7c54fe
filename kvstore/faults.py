"""The test-only fault injection service (pdserve.testing.v1.KVStoreFaults), registered only with
``--enable-fault-injection``."""

from __future__ import annotations

import grpc

from pdserve.kvstore.store import BlockStore, UnknownBlock
from pdserve.testing.v1 import kvstore_faults_pb2, kvstore_faults_pb2_grpc


class KVStoreFaultsService(kvstore_faults_pb2_grpc.KVStoreFaultsServicer):
    """The test-only pdserve.testing.v1.KVStoreFaults service: registered only with --enable-fault-injection."""

    def __init__(self, store: BlockStore) -> None:
        self.store = store

    async def Corrupt(self, request, context):
        try:
            self.store.corrupt(request.key, request.keep_checksum_valid)
        except UnknownBlock:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"key: block {request.key} is not stored")
        return kvstore_faults_pb2.CorruptResponse()
