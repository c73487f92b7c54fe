"""Calling the workers: prefill on the policy's worker, decode relayed from another, each retried where it is safe.

A prefill that fails with UNAVAILABLE (worker down) or RESOURCE_EXHAUSTED (queue full) moves to another worker. A
decode worker that is UNAVAILABLE before it streamed anything is replaced by another (the KV still waits, leased, in
the kvstore); after the first chunk a failure ends the request. Every move is counted in
``pdserve_router_retries_total{phase}``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import grpc

from common.server import request_metadata
from protos import decode_pb2, prefill_pb2
from router.metrics import RETRIES, ROUTED
from router.policy import PrefillPolicy, choose_decode
from router.workers import WorkerPool

log = logging.getLogger("pdserve.router")


class UpstreamError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _untracked(call: grpc.aio.Call) -> None:
    pass


async def prefill_with_retries(pool: WorkerPool, policy: PrefillPolicy, request: prefill_pb2.PrefillRequest,
                               block_keys: list[str], attempts: int, timeout: float | None,
                               track: Callable[[grpc.aio.Call], None] = _untracked) -> prefill_pb2.PrefillReply:
    """``track`` is shown every call made, so that an Abort can cancel it (its awaiting then raises CancelledError)."""
    tried: set[str] = set()
    last_error: grpc.aio.AioRpcError | None = None
    n_tokens = len(request.token_ids)
    for attempt in range(min(attempts, len(pool.workers))):
        candidates = pool.available(exclude=tried)
        if not candidates:
            break
        if attempt:
            RETRIES.labels("prefill").inc()
        worker = policy.choose(candidates, block_keys)
        ROUTED.labels("prefill", policy.name, worker.target).inc()
        tried.add(worker.target)
        worker.inflight += 1
        worker.inflight_tokens += n_tokens
        try:
            call = worker.stub.Prefill(request, timeout=timeout, metadata=request_metadata(request.request_id))
            track(call)
            reply = await call
            worker.remember(block_keys)
            return reply
        except grpc.aio.AioRpcError as err:
            last_error = err
            if err.code() == grpc.StatusCode.UNAVAILABLE:
                worker.mark_down()
                log.warning("prefill worker %s unavailable; retrying elsewhere", worker.target)
                continue
            if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                continue
            raise UpstreamError(err.code(), f"prefill: {err.details()}") from err
        finally:
            worker.inflight -= 1
            worker.inflight_tokens -= n_tokens
    if last_error is not None and last_error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
        raise UpstreamError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"all prefill workers are full ({last_error.details()}); retry later")
    raise UpstreamError(grpc.StatusCode.UNAVAILABLE,
                        f"no prefill worker could take the request ({last_error.details() if last_error else ''})")


async def relay_decode(pool: WorkerPool, request: decode_pb2.DecodeRequest, timeout: float | None,
                       track: Callable[[grpc.aio.Call], None] = _untracked) -> AsyncIterator[decode_pb2.DecodeChunk]:
    tried: set[str] = set()
    while True:
        candidates = pool.available(exclude=tried)
        if not candidates:
            raise UpstreamError(grpc.StatusCode.UNAVAILABLE, "decode: no decode worker could take the request")
        if tried:
            RETRIES.labels("decode").inc()
        worker = choose_decode(candidates)
        ROUTED.labels("decode", "least_kv_usage", worker.target).inc()
        tried.add(worker.target)
        worker.inflight += 1
        call = worker.stub.Decode(request, timeout=timeout, metadata=request_metadata(request.request_id))
        track(call)
        relayed = False
        try:
            async for chunk in call:
                relayed = True
                yield chunk
            return
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.UNAVAILABLE:
                worker.mark_down()
                if not relayed:
                    log.warning("decode worker %s unavailable; retrying elsewhere", worker.target)
                    continue
            raise UpstreamError(err.code(), f"decode: {err.details()}") from err
        finally:
            worker.inflight -= 1
            call.cancel()  # no-op when finished; stops the decode sequence when the client went away
