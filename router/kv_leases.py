"""The KV leases the router holds for a request, made in the kvstore (only the router may), with kvstore failures
turned into what the client is told (the role, never an address)."""

from __future__ import annotations

import logging

import grpc

from pdserve.common.redact import public_message
from pdserve.common.retry import DEFAULT_RETRY, RetryPolicy
from pdserve.kvstore.client import KVStoreClient
from pdserve.kvstore.lease import KVLease
from pdserve.router.upstream import UpstreamError
from pdserve.v1 import common_pb2

log = logging.getLogger("pdserve.router")


async def request_lease(kv_client: KVStoreClient | None, ttl_s: float, retry: RetryPolicy = DEFAULT_RETRY) -> KVLease:
    """The request's lease, created before prefill stores under it. With every kvstore shard unavailable (one
    restarting) it is tried again after a pause, as a prefill pool is (``retry``). A kvstore at its lease quota is
    overload (the client is told to retry)."""
    def failed(err: grpc.aio.AioRpcError) -> None:
        log.warning("kvstore: lease not created: %s: %s", err.code().name, err.details())

    try:
        return await retry.call(lambda: KVLease.create(kv_client, ttl_s), on_retry=failed)
    except grpc.aio.AioRpcError as err:
        full = err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        raise UpstreamError(err.code() if full else grpc.StatusCode.UNAVAILABLE,
                            public_message("kvstore", err.code(), err.details()), overloaded=full) from err


async def sample_lease(lease: KVLease, handle: common_pb2.KVHandle, sample: int) -> KVLease:
    """Another lease on a prefilled request's blocks, for sample ``sample``'s decode to take (and release)."""
    if lease.kv_client is None:
        raise UpstreamError(grpc.StatusCode.FAILED_PRECONDITION, "sampling.n: n > 1 needs the router's --kvstore")
    try:
        copy = await lease.copy(list(handle.block_keys), sample)
    except grpc.aio.AioRpcError as err:
        raise UpstreamError(grpc.StatusCode.UNAVAILABLE, public_message("kvstore", err.code(), err.details())) \
            from err
    if copy is None:
        raise UpstreamError(grpc.StatusCode.UNAVAILABLE, "kvstore: the prefilled blocks are gone before decode")
    return copy
