"""The Decode service: fetch the KV blocks prefill left in the kvstore, release the lease, stream tokens."""

from __future__ import annotations

import asyncio
import logging
from functools import partial

import grpc

from pdserve.common.convert import token_step
from pdserve.common.status import abort_exhausted, abort_invalid
from pdserve.common.validation import check_worker_request
from pdserve.decode_server.kv_imports import (
    DEFAULT_MAX_PREFETCHES,
    DEFAULT_PREFETCH_HOLD_S,
    KV_ERRORS,
    ImportExists,
    ImportsFull,
    KVImports,
    kv_error_detail,
)
from pdserve.decode_server.metrics import (
    COMPLETION_CHECK_TOKENS,
    COMPLETION_CHECKS,
    COMPLETION_TOKENS_LEFT,
    GENERATED,
    KV_LOAD_FAILURES,
    KV_USAGE,
    PREEMPTIONS,
    REQUESTS,
    RUNNING,
    WAITING,
)
from pdserve.engine.kv.budget import DEFAULT_KV_BLOCKS, KVBudgetExceeded
from pdserve.engine.params import InvalidParameter
from pdserve.engine.runtime import DEFAULT_SLAB_TOKENS
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.engine.sequence import Sequence
from pdserve.engine.text.stop import FinishReason, StepResult
from pdserve.kvstore.client import KVStoreClient
from pdserve.kvstore.contract import check_handle
from pdserve.v1 import decode_pb2, decode_pb2_grpc
from pdserve.worker.flags import build_worker, run_worker, worker_config, worker_parser
from pdserve.worker.job import Job
from pdserve.worker.metrics import ITL
from pdserve.worker.worker import Worker, WorkerDraining, WorkerFull

log = logging.getLogger("pdserve.decode")
KV_LOAD_FAILURE_POLICIES = ("recompute", "fail")


class DecodeService(decode_pb2_grpc.DecodeServicer):
    def __init__(self, worker: Worker, kv_client: KVStoreClient | None, kv_link: str = "auto",
                 kv_load_failure_policy: str = "recompute",
                 max_prefetches: int = DEFAULT_MAX_PREFETCHES,
                 prefetch_hold_s: float = DEFAULT_PREFETCH_HOLD_S) -> None:
        self.worker = worker
        self.runtime = worker.runtime
        self.kv_client = kv_client
        self.kv_load_failure_policy = kv_load_failure_policy
        new_kv = partial(self.runtime.model.new_kv, block_tokens=self.runtime.block_tokens)
        self.imports = KVImports(kv_client, worker.clock, lambda tokens: new_kv(capacity=tokens), kv_link, max_prefetches,
                                 prefetch_hold_s)
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

    def _validate_handle(self, handle) -> None:
        rt = self.runtime
        check_handle(handle, rt.config.context_length, rt.block_tokens, rt.config.fingerprint, rt.kv_dtype)
        if self.kv_client is None:
            raise InvalidParameter("kv", "this decode worker has no kvstore; send colocated=true")

    async def Prefetch(self, request, context):
        try:
            if not request.request_id:
                raise InvalidParameter("request_id", "must not be empty")
            self._validate_handle(request.kv)
            imp = self.imports.start(request.request_id, request.kv)
        except InvalidParameter as exc:
            await abort_invalid(context, exc)
        except ImportExists as exc:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, str(exc))
        except ImportsFull as exc:
            await abort_exhausted(context, str(exc))
        try:
            elapsed, _ = await asyncio.shield(imp.task)
        except asyncio.CancelledError:
            if imp.taken and not asyncio.current_task().cancelling():  # a Decode call took it and goes on
                return decode_pb2.PrefetchResponse(token_count=imp.cache.length)
            self.imports.drop(request.request_id, imp)  # the router gave the request up
            raise
        except KV_ERRORS as exc:
            self.imports.drop(request.request_id, imp, failed=True)
            code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else grpc.StatusCode.DATA_LOSS
            await context.abort(code, f"kv: {kv_error_detail(exc)}")
        return decode_pb2.PrefetchResponse(token_count=imp.cache.length, fetch_wall_s=elapsed)

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
        fetch_s = transfer_modeled_s = frontend_s = 0.0
        if request.colocated:
            if not request.resume_ids:  # the first worker the request reaches (a resumed one passed its front end)
                frontend_s = await self.worker.clock.pace_frontend()
        else:
            try:
                fetch_s, transfer_modeled_s = await self.imports.take(seq, request.kv)
            except KV_ERRORS as exc:
                await self._kv_load_failed(seq, exc, context)
            except asyncio.CancelledError:  # the caller went away while the KV was arriving
                REQUESTS.labels("abort").inc()
                raise
        try:
            job = self.worker.submit(seq)
        except KVBudgetExceeded as exc:
            await abort_exhausted(context, f"decode: {exc}")
        finished = False
        # vLLM's P/D proxy streams the decode's own first token: the first decode step comes before the first token
        # the client sees (the simulator counts it so: perfmodel/handoff.py TransferEngine.first_token)
        first_from_decode = not request.colocated and self.worker.clock.handoff.engine.first_token == "decode_step"
        first_step_s = 0.0
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
                    self._first_chunk_timings(chunk, job, fetch_s, transfer_modeled_s, frontend_s)
                    if first_from_decode:
                        first_step_s = job.decode_modeled_s
                        chunk.queue_modeled_s += first_step_s
                    first_chunk = False
                finished = result.finished
                GENERATED.inc(len(token_ids))
                count_completion_check(seq, result)
                if finished:
                    chunk.decode_modeled_s = job.decode_modeled_s - first_step_s
                    REQUESTS.labels(result.finish_reason.value).inc()
                yield chunk
        finally:
            if not finished:  # the caller went away: free the sequence now, or right after the running step
                self.worker.cancel(job)
                REQUESTS.labels("abort").inc()

    async def _kv_load_failed(self, seq: Sequence, exc: Exception, context) -> None:
        """The prompt's KV could not be fetched (a shard down, a block evicted or corrupted). ``recompute`` (as vLLM's
        kv_load_failure_policy) drops what arrived and lets the scheduler recompute the prompt here, like a preempted
        sequence: the output is the same. ``fail`` ends the request."""
        detail = kv_error_detail(exc)
        KV_LOAD_FAILURES.labels(self.kv_load_failure_policy).inc()
        if self.kv_load_failure_policy == "recompute":
            log.warning("kv fetch failed (%s); recomputing the prompt", detail)
            seq.kv.clear()
            return
        code = grpc.StatusCode.UNAVAILABLE if isinstance(exc, grpc.aio.AioRpcError) else grpc.StatusCode.DATA_LOSS
        await context.abort(code, f"kv: {detail}")

    @staticmethod
    def _first_chunk_timings(chunk: decode_pb2.DecodeChunk, job: Job, fetch_s: float, transfer_modeled_s: float,
                             frontend_s: float) -> None:
        chunk.frontend_modeled_s = frontend_s
        chunk.kv_fetch_wall_s = fetch_s
        chunk.kv_transfer_modeled_s = transfer_modeled_s
        chunk.queue_wall_s = job.queue_wall_s
        chunk.queue_modeled_s = job.queue_modeled_s
        chunk.prefill_modeled_s = job.prefill_modeled_s


def count_completion_check(seq: Sequence, result: StepResult) -> None:
    """The completeness rule's metrics for one token's result: the check run after it, and the request it ended."""
    if result.check is not None:
        COMPLETION_CHECKS.inc()
        COMPLETION_CHECK_TOKENS.inc(result.check.tokens)
    if result.finish_reason is FinishReason.COMPLETE:
        COMPLETION_TOKENS_LEFT.inc(seq.params.max_tokens - len(seq.output_ids))


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
    parser.add_argument("--prefetch-hold-s", type=float, default=DEFAULT_PREFETCH_HOLD_S,
                        help="a prefetched copy nobody takes is dropped after its lease TTL, and after this at most")
    parser.add_argument("--kv-load-failure-policy", default="recompute", choices=KV_LOAD_FAILURE_POLICIES,
                        help="when the prompt's KV cannot be fetched: recompute it here, or fail the request")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    # modeled: the software's memory fraction of the modeled deployment, per attention rank (worker/flags.py)
    kv_blocks = None if args.kv_budget == "modeled" else args.kv_blocks
    config = worker_config(args, SchedulerRole.DECODE, "decode")
    worker = build_worker(config, kv_blocks=kv_blocks, slab_tokens=args.slab_tokens)

    def register(server: grpc.aio.Server, kv_client: KVStoreClient | None) -> list[str]:
        service = DecodeService(worker, kv_client, config.kv_link, args.kv_load_failure_policy, args.max_prefetches,
                                args.prefetch_hold_s)
        decode_pb2_grpc.add_DecodeServicer_to_server(service, server)
        return [decode_pb2.DESCRIPTOR.services_by_name["Decode"].full_name]

    asyncio.run(run_worker("decode", config, worker, register))
