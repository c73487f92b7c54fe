"""Calling the workers: prefill on the policy's worker, decode relayed from another, each retried where it is safe.

A prefill that fails with UNAVAILABLE (worker down) or RESOURCE_EXHAUSTED (queue full) moves to another worker. A
decode worker that is UNAVAILABLE before it streamed anything is replaced by another (the KV still waits, leased, in
the kvstore). A decode worker that goes away after streaming (UNAVAILABLE: it died; CANCELLED: it stopped) raises
:class:`StreamInterrupted`, and the service resumes the request elsewhere by recomputation. A prefill whose kvstore no
longer knows the request's lease (it restarted, empty) raises :class:`LeaseLost`, and the service makes a new lease and
prefills again. How often, after what pauses, and how long a worker that answered UNAVAILABLE is skipped is the
pool's retry policy (``common/retry.py``). Every move is counted in ``pdserve_router_retries_total{phase}`` (phase
prefill, lease, decode or resume). What a client is told of a failure names the role, never a worker's address
(``common/redact.py``); the router's log has the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import grpc

from pdserve.common.redact import public_message, without_addresses
from pdserve.common.server import request_metadata
from pdserve.kvstore.contract import lease_unknown
from pdserve.router.metrics import RETRIES, ROUTED
from pdserve.router.policy import PrefillPolicy, choose_decode
from pdserve.router.request_state import RequestState
from pdserve.router.workers import WorkerPool
from pdserve.v1 import decode_pb2, prefill_pb2

log = logging.getLogger("pdserve.router")


# A decode stream that ends with one of these after streaming means the worker went away, not that the request is bad.
WORKER_GONE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


class UpstreamError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str, overloaded: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.overloaded = overloaded  # the workers are full now: worth retrying later


class LeaseLost(UpstreamError):
    """Prefill could not store under the request's lease: a kvstore does not know it (restarted since it was made)."""

    def __init__(self) -> None:  # the client's text: the lease id is an internal capability, never shown
        super().__init__(grpc.StatusCode.UNAVAILABLE, "kvstore: the request's KV lease was lost (a kvstore restarted)")


def _untracked(call: grpc.aio.Call) -> None:
    pass


class StreamInterrupted(Exception):
    """A decode worker went away after streaming part of a request (the request can resume elsewhere)."""

    def __init__(self, target: str, err: grpc.aio.AioRpcError) -> None:
        super().__init__(f"decode: a worker went away mid-stream ({err.code().name.lower()})")
        self.target = target  # for the router's log, never for the client


async def prefill_with_retries(pool: WorkerPool, policy: PrefillPolicy, request: prefill_pb2.PrefillRequest,
                               block_keys: list[str], attempts: int, timeout: float | None,
                               track: Callable[[grpc.aio.Call], None] = _untracked) -> prefill_pb2.PrefillReply:
    """``track`` is shown every call made, so that an Abort can cancel it (its awaiting then raises CancelledError)."""
    last_error: grpc.aio.AioRpcError | None = None
    n_tokens = len(request.token_ids)
    retry = pool.retry
    for round_ in range(retry.rounds):
        await retry.pause(round_)
        tried: set[str] = set()
        for attempt in range(min(attempts, len(pool.workers))):
            candidates = pool.available(exclude=tried)
            if not candidates:
                break
            if attempt or round_:
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
                if retry.unavailable(err):
                    pool.mark_down(worker)
                    log.warning("prefill worker %s unavailable; retrying elsewhere", worker.target)
                    continue
                if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:  # its queue is full: another's may not be
                    continue
                if lease_unknown(err):
                    log.warning("prefill worker %s: %s", worker.target, err.details())
                    raise LeaseLost() from err
                raise UpstreamError(err.code(), public_message("prefill", err.code(), err.details())) from err
            finally:
                worker.inflight -= 1
                worker.inflight_tokens -= n_tokens
        if not retry.unavailable(last_error):
            break
    if last_error is not None and last_error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
        raise UpstreamError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"all prefill workers are full ({without_addresses(last_error.details() or '')})",
                            overloaded=True)
    if last_error is not None:
        log.warning("no prefill worker could take the request: %s", last_error.details())
    raise UpstreamError(grpc.StatusCode.UNAVAILABLE, "prefill: no worker could take the request (unavailable)")


def start_prefetch(pool: WorkerPool, request: decode_pb2.PrefetchRequest, timeout: float | None,
                   track: Callable[[grpc.aio.Call], None] = _untracked) -> tuple[str, grpc.aio.Call | None]:
    """Ask the decode worker the policy would pick now to start importing a request's KV while prefill computes it;
    returns its target ("" when none is available), which the Decode call then prefers, and the call (cancelling it
    drops the worker's copy). Best effort: a refused or failed prefetch only means that the Decode call fetches the
    blocks itself."""
    candidates = pool.available()
    if not candidates:
        return "", None
    worker = choose_decode(candidates)
    call = worker.stub.Prefetch(request, timeout=timeout, metadata=request_metadata(request.request_id))
    track(call)  # cancelled with the request (its copy on the worker is dropped at once)
    report = asyncio.ensure_future(_report_prefetch(worker.target, call))
    _REPORTS.add(report)  # the event loop holds tasks weakly
    report.add_done_callback(_REPORTS.discard)
    return worker.target, call


_REPORTS: set[asyncio.Task] = set()


async def _report_prefetch(target: str, call: grpc.aio.UnaryUnaryCall) -> None:
    """Log how a prefetch failed, once it ends (nobody awaits the call: its outcome only matters to the log). A
    call's status is read with awaits, so this is a task, not a done callback: a callback runs inside the call's own
    task, and an exception there replaces the call's outcome."""
    try:
        await call
    except asyncio.CancelledError:
        if asyncio.current_task().cancelling():  # this task itself (the router stopping), not the call
            raise
    except grpc.aio.AioRpcError as err:
        if err.code() != grpc.StatusCode.CANCELLED:  # CANCELLED: the worker dropped a copy nobody took
            log.info("prefetch on %s: %s %s", target, err.code().name, err.details())
    except Exception as exc:  # e.g. its channel closed when the worker's address was resolved anew
        log.info("prefetch on %s: %s", target, exc)


async def relay_decode(pool: WorkerPool, request: decode_pb2.DecodeRequest, timeout: float | None,
                       exclude: frozenset[str] = frozenset(),
                       track: Callable[[grpc.aio.Call], None] = _untracked,
                       prefer: str = "") -> AsyncIterator[decode_pb2.DecodeChunk]:
    """Relay a decode stream from the worker ``prefer`` names (the one that prefetched its KV) when it is available,
    else from the one the policy picks."""
    tried: set[str] = set(exclude)
    retry = pool.retry
    round_ = 0
    while True:
        candidates = pool.available(exclude=tried)
        if not candidates and round_ + 1 < retry.rounds:  # every one unavailable: pause, then try them again
            round_ += 1
            await retry.pause(round_)
            tried = set(exclude)
            candidates = pool.available(exclude=tried)
        if not candidates:
            raise UpstreamError(grpc.StatusCode.UNAVAILABLE, "decode: no decode worker could take the request")
        if len(tried) > len(exclude) or round_:
            RETRIES.labels("decode").inc()
        preferred = [w for w in candidates if w.target == prefer]
        worker = preferred[0] if preferred else choose_decode(candidates)
        ROUTED.labels("decode", "prefetched" if preferred else "least_kv_usage", worker.target).inc()
        tried.add(worker.target)
        worker.inflight += 1
        call = worker.stub.Decode(request, timeout=timeout, metadata=request_metadata(request.request_id))
        track(call)
        relayed = finished = False
        try:
            async for chunk in call:
                relayed, finished = True, bool(chunk.step.finish_reason)
                yield chunk
            return
        except grpc.aio.AioRpcError as err:
            if finished:  # the worker went away after its last chunk: the request is complete, nothing to resume
                if err.code() in WORKER_GONE:
                    pool.mark_down(worker)
                log.warning("decode worker %s went away after the request's last chunk", worker.target)
                return
            if retry.unavailable(err) and not relayed:
                pool.mark_down(worker)
                log.warning("decode worker %s unavailable; retrying elsewhere", worker.target)
                continue
            if err.code() in WORKER_GONE and relayed:
                pool.mark_down(worker)
                raise StreamInterrupted(worker.target, err) from err
            log.info("decode worker %s: %s: %s", worker.target, err.code().name, err.details())
            raise UpstreamError(err.code(), public_message("decode", err.code(), err.details())) from err
        finally:
            worker.inflight -= 1
            call.cancel()  # no-op when finished; stops the decode sequence when the client went away


async def resumable_decode(pool: WorkerPool, state: RequestState, request: decode_pb2.DecodeRequest, max_resumes: int,
                           time_remaining: Callable[[], float | None],
                           track: Callable[[grpc.aio.Call], None] = _untracked,
                           prefer: str = "") -> AsyncIterator[decode_pb2.DecodeChunk]:
    """One sample's decode stream; when its worker goes away mid-stream, resume on another one.

    The resumed request carries every token already relayed: the new worker recomputes prompt + those tokens and
    continues from the next one, so the client sees no gap and no duplicate (and with greedy or seeded sampling the
    same tokens as without the fault).
    """
    failed: set[str] = set()
    # every token of this sample the client has or will have: prefill's first token (already passed on) and what
    # this stream yields (the merge may not have counted it in the state yet)
    relayed: list[int] = list(state.output_ids)
    while True:
        try:
            async for chunk in relay_decode(pool, request, time_remaining(), frozenset(failed), track,
                                            "" if failed else prefer):
                relayed.extend(chunk.step.token_ids)
                yield chunk
            return
        except StreamInterrupted as exc:
            failed.add(exc.target)
            log.warning("decode worker %s went away mid-stream", exc.target)
            if state.resumes >= max_resumes:
                raise UpstreamError(grpc.StatusCode.UNAVAILABLE,
                                    f"{exc}; gave up after {state.resumes} resumptions") from exc
            if len(failed) >= len(pool.workers):
                raise UpstreamError(grpc.StatusCode.UNAVAILABLE,
                                    f"{exc}; no other decode worker can resume the request") from exc
            state.resumes += 1
            RETRIES.labels("resume").inc()
            log.warning("%s; resuming after %d tokens", exc, len(relayed))
            request = decode_pb2.DecodeRequest(request_id=request.request_id, prompt_ids=request.prompt_ids,
                                               sampling=request.sampling, colocated=True, resume_ids=relayed)
