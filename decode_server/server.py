"""The Decode service: fetch the KV blocks prefill left in the kvstore, release the lease, stream tokens."""

from __future__ import annotations

import asyncio
import logging
import time

import grpc
from prometheus_client import Counter, Gauge, Histogram

from pdserve.common.convert import token_step
from pdserve.common.metrics import RPC_BUCKETS
from pdserve.common.status import abort_exhausted, abort_invalid
from pdserve.common.validation import check_worker_request
from pdserve.common.worker import ITL, Job, Worker, WorkerDraining, WorkerFull, build_worker, run_worker, worker_parser
from pdserve.engine.kv_budget import DEFAULT_KV_BLOCKS, KVBudgetExceeded
from pdserve.engine.params import InvalidParameter
from pdserve.engine.runtime import DEFAULT_SLAB_TOKENS
from pdserve.engine.scheduler import Role
from pdserve.engine.sequence import Sequence
from pdserve.engine.stop import FinishReason
from pdserve.kvstore.client import KVIntegrityError, KVStoreClient
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


class DecodeService(decode_pb2_grpc.DecodeServicer):
    def __init__(self, worker: Worker, kv: KVStoreClient | None, kv_link: str = "nvlink",
                 kv_load_failure_policy: str = "recompute") -> None:
        self.worker = worker
        self.runtime = worker.runtime
        self.kv = kv
        self.kv_link = kv_link
        self.kv_load_failure_policy = kv_load_failure_policy
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
        kv = request.kv
        if not kv.block_keys:
            raise InvalidParameter("kv.block_keys", "empty: send a KV handle from prefill, or colocated=true")
        if kv.token_count != len(prompt):
            raise InvalidParameter("kv.token_count", f"{kv.token_count} does not match the {len(prompt)} prompt ids")
        if kv.block_tokens != rt.block_tokens:
            raise InvalidParameter("kv.block_tokens", f"{kv.block_tokens}; this worker uses {rt.block_tokens}")
        if kv.model_fingerprint != rt.config.fingerprint:
            raise InvalidParameter("kv.model_fingerprint", "the KV was computed by a different model")
        if self.kv is None:
            raise InvalidParameter("kv", "this decode worker has no kvstore; send colocated=true")
        return prompt, params

    async def _fetch(self, seq: Sequence, handle) -> tuple[float, float]:
        """Import the request's blocks; returns (wall seconds, modeled transfer seconds)."""
        start = time.perf_counter()
        async with self.kv.keep_lease(handle.lease_id, handle.lease_ttl_s):  # a slow fetch never loses the KV to expiry
            blocks = await self.kv.get(list(handle.block_keys))
            for block in blocks:
                seq.kv.append_block(block.data, block.token_count)
            if seq.kv.length != handle.token_count:
                raise KVIntegrityError(f"blocks hold {seq.kv.length} tokens, the handle says {handle.token_count}")
            modeled = await self.worker.clock.pace_transfer(handle.token_count, self.kv_link,
                                                            time.perf_counter() - start)
        elapsed = time.perf_counter() - start
        KV_FETCH.observe(elapsed)
        await self.kv.release_quietly(handle.lease_id)  # we have our copy: the blocks may be evicted now
        return elapsed, modeled

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
            except (KVIntegrityError, ValueError, grpc.aio.AioRpcError) as exc:
                await self._kv_load_failed(seq, request.kv, exc, context)
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
        detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
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
        service = DecodeService(worker, kv, args.kv_link, args.kv_load_failure_policy)
        decode_pb2_grpc.add_DecodeServicer_to_server(service, server)
        return [decode_pb2.DESCRIPTOR.services_by_name["Decode"].full_name]

    asyncio.run(run_worker("decode", args, worker, register))
