"""The Decode service: fetch the KV blocks prefill left in the kvstore, release the lease, stream tokens."""

from __future__ import annotations

import asyncio
import logging
import time

import grpc
from prometheus_client import Counter, Gauge, Histogram

from common.config import add_model_flags, service_parser, split_targets
from common.convert import sampling_from_proto, token_step
from common.metrics import STEP_BUCKETS
from common.server import serve_worker, setup_logging
from common.validation import abort_invalid, check_fits_context, check_request_id, check_token_ids
from decode_server.scheduler import DecodeJob, DecodeScheduler
from engine.params import InvalidParameter
from engine.runtime import Runtime
from perfmodel.clock import add_perf_flags, clock_from_args
from kvstore.client import KVIntegrityError, KVStoreClient
from protos import common_pb2, decode_pb2, decode_pb2_grpc

log = logging.getLogger("pdserve.decode")

REQUESTS = Counter("pdserve_decode_requests_total", "Decode requests finished", ["finished_reason"])
GENERATED = Counter("pdserve_decode_generation_tokens_total", "Tokens streamed by decode")
KV_FETCH = Histogram("pdserve_decode_kv_fetch_seconds", "Wall time fetching a request's KV blocks",
                     buckets=STEP_BUCKETS)
RUNNING = Gauge("pdserve_decode_num_requests_running", "Sequences in the running batch")
WAITING = Gauge("pdserve_decode_num_requests_waiting", "Sequences waiting for admission")
KV_USAGE = Gauge("pdserve_decode_kv_cache_usage_perc", "Fraction of the KV block budget in use")
PREEMPTIONS = Gauge("pdserve_decode_num_preemptions", "Sequences preempted (KV dropped, recomputed later) so far")


class DecodeService(decode_pb2_grpc.DecodeServicer):
    def __init__(self, runtime: Runtime, scheduler: DecodeScheduler, kv: KVStoreClient | None,
                 max_queue: int, kv_link: str = "nvlink") -> None:
        self.runtime = runtime
        self.scheduler = scheduler
        self.kv_link = kv_link
        self.kv = kv
        self.max_queue = max_queue
        self.active = 0

    async def GetLoad(self, request, context):
        s = self.scheduler
        RUNNING.set(s.n_running)
        WAITING.set(s.n_waiting)
        KV_USAGE.set(s.blocks_used / s.blocks.total_blocks)
        PREEMPTIONS.set(s.preemptions)
        return common_pb2.WorkerLoad(waiting=s.n_waiting, running=s.n_running, kv_blocks_used=s.blocks_used,
                                     kv_blocks_total=s.blocks.total_blocks,
                                     model_fingerprint=self.runtime.config.fingerprint)

    def _validate(self, request):
        rt = self.runtime
        check_request_id(request.request_id)
        prompt = check_token_ids(request.prompt_ids, rt.tokenizer.vocab_size, "prompt_ids")
        params = sampling_from_proto(request.sampling).validate(rt.tokenizer.vocab_size)
        check_fits_context(len(prompt), params, rt.config.context_length)
        if request.colocated:
            return prompt, params
        if request.first_token >= rt.tokenizer.vocab_size:
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

    async def _fetch(self, seq, handle) -> tuple[float, float]:
        """Import the request's blocks; returns (wall seconds, modeled transfer seconds)."""
        start = time.perf_counter()
        blocks = await self.kv.get(list(handle.block_keys))
        for block in blocks:
            seq.kv.append_block(block.data, block.token_count)
        if seq.kv.length != handle.token_count:
            raise KVIntegrityError(f"blocks hold {seq.kv.length} tokens, the handle says {handle.token_count}")
        modeled = await self.scheduler.clock.pace_transfer(handle.token_count, self.kv_link,
                                                           time.perf_counter() - start)
        elapsed = time.perf_counter() - start
        KV_FETCH.observe(elapsed)
        try:  # we have our copy: the blocks may be evicted now
            await self.kv.release(handle.lease_id, timeout=5)
        except grpc.aio.AioRpcError as exc:
            log.warning("lease %s not released: %s (it will expire)", handle.lease_id, exc.details())
        return elapsed, modeled

    async def Decode(self, request, context):
        try:
            prompt, params = self._validate(request)
        except InvalidParameter as exc:
            await abort_invalid(context, exc)
        if self.active >= self.max_queue:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"decode worker is full ({self.active} of {self.max_queue} requests)")
        self.active += 1
        job = None
        finished = False
        try:
            seq = self.runtime.new_sequence(prompt, params, request.request_id)
            fetch_s = transfer_modeled_s = 0.0
            if not request.colocated:
                try:
                    fetch_s, transfer_modeled_s = await self._fetch(seq, request.kv)
                except (KVIntegrityError, ValueError) as exc:
                    await context.abort(grpc.StatusCode.DATA_LOSS, f"kv: {exc}")
                except grpc.aio.AioRpcError as exc:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, f"kvstore: {exc.details()}")
                seq.sampler.record(request.first_token)
                replay = seq.append_token(request.first_token)  # replays the stop rules prefill applied to it
                if replay.finished:  # nothing left to generate (the router normally finishes these itself)
                    finished = True
                    step = token_step([], replay)
                    step.text = ""  # prefill already streamed the first token's text
                    yield decode_pb2.DecodeChunk(step=step, kv_fetch_wall_s=fetch_s)
                    return
            loop = asyncio.get_running_loop()
            job = DecodeJob(seq, loop, asyncio.Queue(), needs_prefill=request.colocated)
            self.scheduler.submit(job)
            first_chunk = True
            while not finished:
                item = await job.queue.get()
                if isinstance(item, BaseException):
                    await context.abort(grpc.StatusCode.INTERNAL, f"decode failed: {item}")
                token_ids, result = item
                chunk = decode_pb2.DecodeChunk(step=token_step(token_ids, result))
                if first_chunk:
                    chunk.kv_fetch_wall_s = fetch_s
                    chunk.kv_transfer_modeled_s = transfer_modeled_s
                    chunk.queue_wall_s = (job.admitted_at or job.enqueued_at) - job.enqueued_at
                    chunk.queue_modeled_s = job.queue_modeled_s
                    chunk.prefill_modeled_s = job.prefill_modeled_s
                    first_chunk = False
                finished = result.finished
                if finished:
                    chunk.decode_modeled_s = job.decode_modeled_s
                GENERATED.inc(len(token_ids))
                if finished:
                    REQUESTS.labels(result.finish_reason.value).inc()
                yield chunk
        finally:
            self.active -= 1
            if job is not None and not finished:  # the caller went away: free the sequence within a step
                job.cancelled = True
                self.scheduler.thread.wake()
                REQUESTS.labels("abort").inc()


def main(argv: list[str] | None = None) -> None:
    parser = service_parser("decode_server", 50071)
    add_model_flags(parser)
    parser.add_argument("--kvstore", default="127.0.0.1:50051", help="kvstore address(es), comma separated")
    parser.add_argument("--kv-blocks", type=int, default=4096, help="KV cache budget in blocks")
    parser.add_argument("--max-num-seqs", type=int, default=64, help="largest running batch")
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048,
                        help="token budget for prefill/recompute done in this worker per step")
    parser.add_argument("--slab-tokens", type=int, default=2048,
                        help="sequences up to this length share the batched-attention slab")
    parser.add_argument("--max-queue", type=int, default=512, help="requests before RESOURCE_EXHAUSTED")
    add_perf_flags(parser)
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    runtime = Runtime.load(args.model, args.block_tokens)
    scheduler = DecodeScheduler(runtime, clock_from_args(args), args.kv_blocks, args.max_num_seqs,
                                args.max_num_batched_tokens, args.slab_tokens)

    async def run() -> None:
        targets = split_targets(args.kvstore)
        kv = KVStoreClient(targets) if targets else None
        service = DecodeService(runtime, scheduler, kv, args.max_queue, args.kv_link)

        def register(server):
            decode_pb2_grpc.add_DecodeServicer_to_server(service, server)
            return [decode_pb2.DESCRIPTOR.services_by_name["Decode"].full_name]

        await serve_worker("decode", args, register, scheduler, kv)

    asyncio.run(run())
