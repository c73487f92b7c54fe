"""The Decode service: fetch the KV blocks prefill left in the kvstore, release the lease, stream tokens."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

import grpc
from prometheus_client import Counter, Gauge, Histogram

from pdserve.common.convert import token_step
from pdserve.common.metrics import RPC_BUCKETS
from pdserve.common.status import abort_exhausted, abort_invalid
from pdserve.common.validation import check_worker_request
from pdserve.worker.metrics import ITL
from pdserve.worker.worker import Job, Worker, WorkerDraining, WorkerFull
from pdserve.worker.flags import build_worker, run_worker, worker_parser
from pdserve.engine.kv_budget import DEFAULT_KV_BLOCKS, KVBudgetExceeded
from pdserve.engine.kv_cache import SequenceKV
from pdserve.engine.params import InvalidParameter
from pdserve.engine.runtime import DEFAULT_SLAB_TOKENS
from pdserve.engine.scheduler import Role
from pdserve.engine.sequence import Sequence
from pdserve.engine.stop import FinishReason
from pdserve.kvstore.client import KVIntegrityError, KVStoreClient
from pdserve.kvstore.store import MAX_WAIT_S
from pdserve.perfmodel.deployment import deployment_from_args, kv_capacity_tokens
from pdserve.v1 import decode_pb2, decode_pb2_grpc

log = logging.getLogger("pdserve.decode")

REQUESTS = Counter("pdserve_decode_requests_total", "Decode requests finished", ["finished_reason"])
GENERATED = Counter("pdserve_decode_generation_tokens_total", "Tokens streamed by decode")
KV_FETCH = Histogram("pdserve_decode_kv_fetch_seconds", "Wall time fetching a request's KV blocks",
                     buckets=RPC_BUCKETS)
RUNNING = Gauge("pdserve_decode_num_requests_running", "Sequences in the running batch")
WAITING = Gauge("pdserve_decode_num_requests_waiting", "Sequences waiting for admission")
KV_USAGE = Gauge("pdserve_decode_kv_cache_usage_perc", "Fraction of the KV block budget in use")
PREEMPTIONS = Counter("pdserve_decode_num_preemptions", "Sequences preempted (KV dropped, recomputed later)")
KV_LOAD_FAILURES = Counter("pdserve_decode_kv_load_failures_total",
                           "KV fetches from the kvstore that failed, by what the worker did about it", ["policy"])
KV_LOAD_FAILURE_POLICIES = ("recompute", "fail")
PREFETCHES = Counter("pdserve_decode_kv_prefetch_total",
                     "KV prefetches (started while prefill runs), by how they ended: taken whole by the Decode call "
                     "that followed (adopted), taken with the rest fetched by that call (partial), dropped (cancelled "
                     "or expired before a Decode call took them), failed", ["outcome"])
PREFETCH_OUTCOMES = ("adopted", "partial", "dropped", "failed")
KV_ERRORS = (KVIntegrityError, ValueError, grpc.aio.AioRpcError)
DEFAULT_MAX_PREFETCHES = 16


def kv_error_detail(exc: Exception) -> str:
    return exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)


@dataclass
class Prefetch:
    """A request's KV being imported (or imported) ahead of its Decode call."""

    handle: object  # the KVHandle it fetches
    kv: SequenceKV
    task: asyncio.Task  # (wall seconds, modeled transfer seconds) of the import
    expiry: asyncio.TimerHandle | None = None
    adopted: bool = False


class DecodeService(decode_pb2_grpc.DecodeServicer):
    def __init__(self, worker: Worker, kv: KVStoreClient | None, kv_link: str = "nvlink",
                 kv_load_failure_policy: str = "recompute",
                 max_prefetches: int = DEFAULT_MAX_PREFETCHES) -> None:
        self.worker = worker
        self.runtime = worker.runtime
        self.kv = kv
        self.kv_link = kv_link
        self.kv_load_failure_policy = kv_load_failure_policy
        self.max_prefetches = max_prefetches
        self.prefetches: dict[str, Prefetch] = {}
        for outcome in PREFETCH_OUTCOMES:
            PREFETCHES.labels(outcome)
        s = worker.scheduler
        RUNNING.set_function(lambda: len(s.running))
        WAITING.set_function(lambda: len(s.waiting))
        KV_USAGE.set_function(lambda: s.budget.usage)
        worker.on_preempted = PREEMPTIONS.inc
        ITL.touch(worker.served_name)
        for reason in FinishReason:
            REQUESTS.labels(reason.value)

    async def GetLoad(self, request, context):
        return self.worker.load()

    def _validate(self, request) -> tuple[list[int], object]:
        rt = self.runtime
        prompt, params = check_worker_request(request.request_id, request.prompt_ids, request.sampling,
                                              rt.config.vocab_size, rt.config.context_length, "prompt_ids")
        if params.n != 1:
            raise InvalidParameter("sampling.n", "decode runs one sample per request (the router sends one per sample)")
        bad = next((t for t in request.resume_ids if t >= rt.config.vocab_size), None)
        if bad is not None:
            raise InvalidParameter("resume_ids", f"token id {bad} is outside the vocabulary")
        if request.colocated:
            return prompt, params
        if request.resume_ids:
            raise InvalidParameter("resume_ids", "a resumed request recomputes its KV: set colocated=true")
        if request.first_token >= rt.config.vocab_size:
            raise InvalidParameter("first_token", f"{request.first_token} is outside the vocabulary")
        if request.kv.token_count != len(prompt):
            raise InvalidParameter("kv.token_count",
                                   f"{request.kv.token_count} does not match the {len(prompt)} prompt ids")
        self._validate_handle(request.kv)
        return prompt, params

    def _validate_handle(self, kv) -> None:
        rt = self.runtime
        if not kv.block_keys:
            raise InvalidParameter("kv.block_keys", "empty: send a KV handle from prefill, or colocated=true")
        if not 0 < kv.token_count < rt.config.context_length:
            raise InvalidParameter("kv.token_count", f"must be in [1, {rt.config.context_length - 1}], "
                                                     f"got {kv.token_count}")
        if kv.block_tokens != rt.block_tokens:
            raise InvalidParameter("kv.block_tokens", f"{kv.block_tokens}; this worker uses {rt.block_tokens}")
        if kv.model_fingerprint != rt.config.fingerprint:
            raise InvalidParameter("kv.model_fingerprint", "the KV was computed by a different model")
        if len(kv.block_keys) != -(-kv.token_count // rt.block_tokens):
            raise InvalidParameter("kv.block_keys", f"{len(kv.block_keys)} keys for {kv.token_count} tokens")
        if not math.isfinite(kv.wait_s) or not 0 <= kv.wait_s <= MAX_WAIT_S:
            raise InvalidParameter("kv.wait_s", f"must be in [0, {MAX_WAIT_S:g}], got {kv.wait_s}")
        if self.kv is None:
            raise InvalidParameter("kv", "this decode worker has no kvstore; send colocated=true")

    async def _import(self, kv: SequenceKV, handle) -> tuple[float, float]:
        """Import the handle's blocks into ``kv``; returns (wall seconds, modeled transfer seconds)."""
        start = time.perf_counter()
        async with self.kv.keep_lease(handle.lease_id, handle.lease_ttl_s):  # a slow fetch never loses the KV to expiry
            # each block is imported as it arrives, while the rest is on the wire; with wait_s, blocks prefill is
            # still storing stream in as they are stored
            if handle.block_keys:  # (none left when a prefetch brought them all)
                await self.kv.get(list(handle.block_keys), wait_s=handle.wait_s, lease_id=handle.lease_id,
                                  on_block=lambda block: kv.append_block(block.data, block.token_count))
            if kv.length != handle.token_count:
                raise KVIntegrityError(f"blocks hold {kv.length} tokens, the handle says {handle.token_count}")
            modeled = await self.worker.clock.pace_transfer(handle.token_count, self.kv_link,
                                                            time.perf_counter() - start)
        elapsed = time.perf_counter() - start
        KV_FETCH.observe(elapsed)
        return elapsed, modeled

    async def _fetch(self, seq: Sequence, handle) -> tuple[float, float]:
        """The request's KV into ``seq``: taken from a prefetch of the same handle (what it has not brought yet is
        fetched now), or imported now. Returns the wall seconds this call spent on it and the modeled transfer
        seconds."""
        prefetch = self.prefetches.get(seq.request_id)
        if prefetch is None or not _same_handle(prefetch.handle, handle):
            elapsed, modeled = await self._import(seq.kv, handle)
        else:
            elapsed, modeled = await self._adopt(seq, prefetch, handle)
        await self.kv.release_quietly(handle.lease_id)  # we have our copy: the blocks may be evicted now
        return elapsed, modeled

    async def _adopt(self, seq: Sequence, prefetch: Prefetch, handle) -> tuple[float, float]:
        """Take a prefetched copy. Prefill has returned, so every block is stored: a prefetch still running is either
        receiving the last blocks or waiting for some that were lost (a kvstore restarted empty). It is stopped,
        and the blocks it has not imported are fetched here without waiting, as a Decode call without a prefetch
        would; a failed prefetch is finished the same way."""
        start = time.perf_counter()
        del self.prefetches[seq.request_id]
        prefetch.adopted = True
        prefetch.expiry.cancel()
        seq.kv = prefetch.kv
        if not prefetch.task.done() and seq.kv.length < handle.token_count:  # (with every block here, it only paces)
            prefetch.task.cancel()
        await asyncio.wait({prefetch.task})
        whole = not prefetch.task.cancelled() and prefetch.task.exception() is None
        PREFETCHES.labels("adopted" if whole else "partial").inc()
        if whole:
            return time.perf_counter() - start, prefetch.task.result()[1]
        imported = seq.kv.length // seq.kv.block_tokens  # blocks arrive whole and in order
        rest = type(handle)()
        rest.CopyFrom(handle)
        del rest.block_keys[:]
        rest.block_keys.extend(handle.block_keys[imported:])
        _, modeled = await self._import(seq.kv, rest)
        return time.perf_counter() - start, modeled

    async def Prefetch(self, request, context):
        try:
            if not request.request_id:
                raise InvalidParameter("request_id", "must not be empty")
            self._validate_handle(request.kv)
        except InvalidParameter as exc:
            await abort_invalid(context, exc)
        if request.request_id in self.prefetches:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"request_id: {request.request_id} is being prefetched")
        if len(self.prefetches) >= self.max_prefetches:
            await abort_exhausted(context, f"decode: {self.max_prefetches} prefetches in flight (--max-prefetches)")
        handle = request.kv
        kv = self.runtime.model.new_kv(capacity=handle.token_count + 1, block_tokens=self.runtime.block_tokens)
        prefetch = Prefetch(handle, kv, asyncio.ensure_future(self._import(kv, handle)))
        self.prefetches[request.request_id] = prefetch
        # a copy nobody takes (the Decode call went to another worker) is dropped when the lease would have expired
        prefetch.expiry = asyncio.get_running_loop().call_later(max(handle.lease_ttl_s, 1.0), self._drop_prefetch,
                                                                request.request_id, prefetch)
        try:
            elapsed, _ = await asyncio.shield(prefetch.task)
        except asyncio.CancelledError:
            if prefetch.adopted and not asyncio.current_task().cancelling():  # a Decode call took it and goes on
                return decode_pb2.PrefetchResponse(token_count=kv.length)
            self._drop_prefetch(request.request_id, prefetch)  # the router gave the request up
            raise
        except KV_ERRORS as exc:
            self._drop_prefetch(request.request_id, prefetch, failed=True)
            code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else grpc.StatusCode.DATA_LOSS
            await context.abort(code, f"kv: {kv_error_detail(exc)}")
        return decode_pb2.PrefetchResponse(token_count=kv.length, fetch_wall_s=elapsed)

    def _drop_prefetch(self, request_id: str, prefetch: Prefetch, failed: bool = False) -> None:
        """Forget a prefetch nobody took (its memory goes with it); a Decode call that took it keeps it."""
        if prefetch.adopted or self.prefetches.get(request_id) is not prefetch:
            return
        del self.prefetches[request_id]
        prefetch.task.cancel()
        prefetch.expiry.cancel()
        PREFETCHES.labels("failed" if failed else "dropped").inc()

    async def Decode(self, request, context):
        try:
            prompt, params = self._validate(request)
            seq = self.runtime.new_sequence(prompt, params, request.request_id)
            if not request.colocated:
                seq.continue_from(request.first_token)
            seq.resume_from(list(request.resume_ids))
        except InvalidParameter as exc:
            await abort_invalid(context, exc)
        try:
            with self.worker.admission():
                async for chunk in self._decode(seq, request, context):
                    yield chunk
        except WorkerFull as exc:
            await abort_exhausted(context, f"decode {exc}")
        except WorkerDraining as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"decode {exc}")

    async def _decode(self, seq: Sequence, request, context):
        fetch_s = transfer_modeled_s = 0.0
        if not request.colocated:
            try:
                fetch_s, transfer_modeled_s = await self._fetch(seq, request.kv)
            except KV_ERRORS as exc:
                await self._kv_load_failed(seq, request.kv, exc, context)
            except asyncio.CancelledError:  # the caller went away while the KV was arriving
                REQUESTS.labels("abort").inc()
                raise
        try:
            job = self.worker.submit(seq)
        except KVBudgetExceeded as exc:
            await abort_exhausted(context, f"decode: {exc}")
        finished = False
        try:
            first_chunk = True
            while not finished:
                event = await job.events.get()
                if isinstance(event, BaseException):
                    REQUESTS.labels("error").inc()
                    finished = True
                    await context.abort(grpc.StatusCode.INTERNAL, f"decode failed: {event}")
                token_ids, result = event
                chunk = decode_pb2.DecodeChunk(step=token_step(token_ids, result))
                if first_chunk:
                    self._first_chunk_timings(chunk, job, fetch_s, transfer_modeled_s)
                    first_chunk = False
                finished = result.finished
                GENERATED.inc(len(token_ids))
                if finished:
                    chunk.decode_modeled_s = job.decode_modeled_s
                    REQUESTS.labels(result.finish_reason.value).inc()
                yield chunk
        finally:
            if not finished:  # the caller went away: free the sequence now, or right after the running step
                self.worker.cancel(job)
                REQUESTS.labels("abort").inc()

    async def _kv_load_failed(self, seq: Sequence, handle, exc: Exception, context) -> None:
        """The prompt's KV could not be fetched (a shard down, a block evicted or corrupted). ``recompute`` (as vLLM's
        kv_load_failure_policy) drops what arrived and lets the scheduler recompute the prompt here, like a preempted
        sequence: the output is the same. ``fail`` ends the request."""
        detail = kv_error_detail(exc)
        KV_LOAD_FAILURES.labels(self.kv_load_failure_policy).inc()
        asyncio.ensure_future(self.kv.release_quietly(handle.lease_id))
        if self.kv_load_failure_policy == "recompute":
            log.warning("kv fetch failed (%s); recomputing the prompt", detail)
            seq.kv.clear()
            return
        code = grpc.StatusCode.UNAVAILABLE if isinstance(exc, grpc.aio.AioRpcError) else grpc.StatusCode.DATA_LOSS
        await context.abort(code, f"kv: {detail}")

    @staticmethod
    def _first_chunk_timings(chunk: decode_pb2.DecodeChunk, job: Job, fetch_s: float, transfer_modeled_s: float) -> None:
        chunk.kv_fetch_wall_s = fetch_s
        chunk.kv_transfer_modeled_s = transfer_modeled_s
        chunk.queue_wall_s = job.queue_wall_s
        chunk.queue_modeled_s = job.queue_modeled_s
        chunk.prefill_modeled_s = job.prefill_modeled_s


def _same_handle(a, b) -> bool:
    return (list(a.block_keys) == list(b.block_keys) and a.lease_id == b.lease_id and a.token_count == b.token_count
            and a.model_fingerprint == b.model_fingerprint)


def modeled_kv_blocks(args) -> int:
    """The modeled deployment's KV capacity, in this worker's blocks."""
    try:
        return kv_capacity_tokens(deployment_from_args(args)) // args.block_tokens
    except ValueError as exc:
        raise SystemExit(f"modeled deployment: {exc}") from None


def build_parser():
    parser = worker_parser("decode_server", 50071, max_queue=512)
    parser.add_argument("--kv-blocks", type=int, default=DEFAULT_KV_BLOCKS, help="KV cache budget in blocks")
    parser.add_argument("--kv-budget", default="blocks", choices=("blocks", "modeled"),
                        help="modeled: take the KV budget from the modeled deployment's capacity instead of "
                             "--kv-blocks, so an emulated stack (--model synthetic --pace realtime) queues and "
                             "preempts where the real cluster would")
    parser.add_argument("--slab-tokens", type=int, default=DEFAULT_SLAB_TOKENS,
                        help="sequences up to this length share the batched-attention slab")
    parser.add_argument("--max-prefetches", type=int, default=DEFAULT_MAX_PREFETCHES,
                        help="KV prefetches (requests still in prefill) held at once; more are refused")
    parser.add_argument("--kv-load-failure-policy", default="recompute", choices=KV_LOAD_FAILURE_POLICIES,
                        help="when the prompt's KV cannot be fetched: recompute it here, or fail the request")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    kv_blocks = args.kv_blocks
    if args.kv_budget == "modeled":
        kv_blocks = modeled_kv_blocks(args)
    worker = build_worker(args, Role.DECODE, kv_blocks=kv_blocks, slab_tokens=args.slab_tokens)

    def register(server: grpc.aio.Server, kv: KVStoreClient | None) -> list[str]:
        service = DecodeService(worker, kv, args.kv_link, args.kv_load_failure_policy, args.max_prefetches)
        decode_pb2_grpc.add_DecodeServicer_to_server(service, server)
        return [decode_pb2.DESCRIPTOR.services_by_name["Decode"].full_name]

    asyncio.run(run_worker("decode", args, worker, register))
