"""The kvstore's test-only fault call, beside the test protos it uses (``protos/pdserve/testing``): never part of the
production client."""

from __future__ import annotations

from pdserve.kvstore.client import KVStoreClient
from pdserve.testing.v1 import kvstore_faults_pb2, kvstore_faults_pb2_grpc


async def corrupt(client: KVStoreClient, key: str, keep_checksum_valid: bool = False) -> None:
    """Flip a byte of a stored block on the shard ``client`` places it on (the kvstore must run with
    --enable-fault-injection, the client call as the test identity); ``keep_checksum_valid``: rewrite its CRC32 to
    match (only the MAC tells then)."""
    faults = kvstore_faults_pb2_grpc.KVStoreFaultsStub(client.channels[client.shard_of(key)])
    await faults.Corrupt(kvstore_faults_pb2.CorruptRequest(key=key, keep_checksum_valid=keep_checksum_valid))
