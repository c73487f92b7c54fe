"""The Prefill service: prefix reuse from the kvstore, batched prefill, KV blocks stored and leased for decode."""

from __future__ import annotations

import asyncio
import logging
import time

import grpc
from prometheus_client import Counter, Histogram

from common.config import add_model_flags, service_parser, split_targets
from common.convert import sampling_from_proto, token_step
from common.metrics import STEP_BUCKETS, TOKEN_COUNT_BUCKETS, TTFT_BUCKETS
from common.server import serve_worker, setup_logging
from common.validation import abort_invalid, check_fits_context, check_request_id, check_token_ids
from engine.kv_cache import block_keys, tail_block_key
from engine.params import InvalidParameter
from engine.runtime import Runtime
from kvstore.client import BlockData, KVIntegrityError, KVStoreClient
from perfmodel.clock import add_perf_flags, clock_from_args
from prefill_server.prefix_cache import LocalPrefixCache
from prefill_server.scheduler import PrefillJob, PrefillScheduler
from protos import common_pb2, prefill_pb2, prefill_pb2_grpc

log = logging.getLogger("pdserve.prefill")

DEFAULT_LEASE_TTL_S = 30.0

REQUESTS = Counter("pdserve_prefill_requests_total", "Prefill requests finished", ["outcome"])
PROMPT_TOKENS = Counter("pdserve_prefill_prompt_tokens_total", "Prompt tokens received")
CACHED_TOKENS = Counter("pdserve_prefill_cached_tokens_total", "Prompt tokens whose KV was reused")
QUEUE_SECONDS = Histogram("pdserve_prefill_queue_seconds", "Wall time from arrival to the first prefill step",
                          buckets=TTFT_BUCKETS)
KV_SECONDS = Histogram("pdserve_prefill_kv_io_seconds", "Wall time fetching and storing KV blocks per request",
                       buckets=STEP_BUCKETS)
PROMPT_LEN = Histogram("pdserve_prefill_request_prompt_tokens", "Prompt length per request", buckets=TOKEN_COUNT_BUCKETS)


class PrefillService(prefill_pb2_grpc.PrefillServicer):
    def __init__(self, runtime: Runtime, scheduler: PrefillScheduler, kv: KVStoreClient, max_queue: int,
                 local_cache: LocalPrefixCache) -> None:
        self.runtime = runtime
        self.scheduler = scheduler
        self.kv = kv
        self.max_queue = max_queue
        self.cache = local_cache
        self.fingerprint = runtime.config.fingerprint

    async def GetLoad(self, request, context):
        s = self.scheduler
        return common_pb2.WorkerLoad(waiting=s.queued, waiting_tokens=max(0, s.waiting_tokens),
                                     model_fingerprint=self.fingerprint)

    async def Prefill(self, request, context):
        runtime, bt = self.runtime, self.runtime.block_tokens
        try:
            check_request_id(request.request_id)
            ids = check_token_ids(request.token_ids, runtime.tokenizer.vocab_size)
            params = sampling_from_proto(request.sampling).validate(runtime.tokenizer.vocab_size)
            check_fits_context(len(ids), params, runtime.config.context_length)
            ttl = request.lease_ttl_s or DEFAULT_LEASE_TTL_S
            if not 0 < ttl <= 3600:
                raise InvalidParameter("lease_ttl_s", f"must be in (0, 3600], got {ttl}")
        except InvalidParameter as exc:
            await abort_invalid(context, exc)
        if self.scheduler.queued >= self.max_queue:
            REQUESTS.labels("rejected").inc()
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"prefill queue is full ({self.scheduler.queued} of {self.max_queue} waiting)")
        lease_id = request.request_id
        PROMPT_TOKENS.inc(len(ids))
        PROMPT_LEN.observe(len(ids))
        seq = runtime.new_sequence(ids, params, request.request_id)
        keys = block_keys(ids, self.fingerprint, bt)
        job = None
        try:
            io_start = time.perf_counter()
            stored_prefix, reused = await self._reuse_prefix(seq, keys, lease_id, ttl)
            io_s = time.perf_counter() - io_start
            job = PrefillJob(seq, asyncio.get_running_loop(), asyncio.get_running_loop().create_future())
            self.scheduler.submit(job)
            first = await job.future
            io_start = time.perf_counter()
            handle = await self._store_blocks(seq, keys, stored_prefix, lease_id, ttl)
            io_s += time.perf_counter() - io_start
        except asyncio.CancelledError:
            if job is not None:
                job.cancelled = True
                self.scheduler.thread.wake()
            asyncio.ensure_future(self._release_quietly(lease_id))
            REQUESTS.labels("cancelled").inc()
            raise
        except KVIntegrityError as exc:
            await self._release_quietly(lease_id)
            REQUESTS.labels("error").inc()
            await context.abort(grpc.StatusCode.DATA_LOSS, f"kv: {exc}")
        except grpc.aio.AioRpcError as exc:
            await self._release_quietly(lease_id)
            REQUESTS.labels("error").inc()
            code = exc.code() if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED else grpc.StatusCode.UNAVAILABLE
            await context.abort(code, f"kvstore: {exc.details()}")
        cached = reused * bt
        CACHED_TOKENS.inc(cached)
        queue_s = (job.started_at or job.enqueued_at) - job.enqueued_at
        QUEUE_SECONDS.observe(queue_s)
        KV_SECONDS.observe(io_s)
        REQUESTS.labels("ok").inc()
        return prefill_pb2.PrefillReply(
            first=token_step([seq.output_ids[0]], first), kv=handle, cached_tokens=cached, queue_wall_s=queue_s,
            compute_wall_s=job.compute_s, kv_store_wall_s=io_s, modeled_s=job.modeled_s,
            queue_modeled_s=job.queue_modeled_s or 0.0)

    async def _reuse_prefix(self, seq, keys: list[str], lease_id: str, ttl: float) -> tuple[int, int]:
        """Lease what the kvstore already holds and load the reusable leading blocks into ``seq``'s cache.

        Returns (blocks present in the kvstore, blocks reused). At least one prompt token is always computed, since
        the first output token needs its logits.
        """
        bt = self.runtime.block_tokens
        stored = await self.kv.acquire(keys, lease_id, ttl) if keys else 0
        reusable = (len(seq.prompt_ids) - 1) // bt
        local = self.cache.leading_hits(keys[:reusable])
        reuse = min(max(local, stored), reusable)
        fetched = await self.kv.get(keys[local:reuse]) if reuse > local else []
        for i in range(reuse):
            data = self.cache.get(keys[i]) if i < local else fetched[i - local].data
            seq.kv.append_block(data, bt)
        for block in fetched:
            self.cache.add(block.key, block.data)
        return stored, reuse

    async def _store_blocks(self, seq, keys: list[str], stored_prefix: int, lease_id: str,
                            ttl: float) -> common_pb2.KVHandle:
        """Put the blocks the kvstore lacks (and the request's partial tail block), leased for decode."""
        bt, n = self.runtime.block_tokens, len(seq.prompt_ids)
        handle_keys = list(keys)
        blocks = []
        for i in range(stored_prefix, len(keys)):
            data = seq.kv.export_block(i)
            blocks.append(BlockData(keys[i], bt, data))
            self.cache.add(keys[i], data)
        if n % bt:
            tail = tail_block_key(seq.request_id, n)
            handle_keys.append(tail)
            blocks.append(BlockData(tail, n % bt, seq.kv.export_block(len(keys))))
        if blocks:
            await self.kv.put(blocks, lease_id, ttl)
        return common_pb2.KVHandle(block_keys=handle_keys, token_count=n, block_tokens=bt, lease_id=lease_id,
                                   lease_ttl_s=ttl, model_fingerprint=self.fingerprint)

    async def _release_quietly(self, lease_id: str) -> None:
        try:
            await self.kv.release(lease_id, timeout=5)
        except grpc.aio.AioRpcError as exc:
            log.warning("could not release lease %s: %s", lease_id, exc.details())


def main(argv: list[str] | None = None) -> None:
    parser = service_parser("prefill_server", 50061)
    add_model_flags(parser)
    parser.add_argument("--kvstore", default="127.0.0.1:50051", help="kvstore address(es), comma separated")
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048, help="token budget of one prefill step")
    parser.add_argument("--max-num-seqs", type=int, default=64, help="sequences in one prefill step")
    parser.add_argument("--max-queue", type=int, default=256, help="waiting requests before RESOURCE_EXHAUSTED")
    parser.add_argument("--prefix-cache-mb", type=float, default=256.0, help="local cache of hot KV blocks")
    add_perf_flags(parser)
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    runtime = Runtime.load(args.model, args.block_tokens)
    scheduler = PrefillScheduler(runtime, clock_from_args(args), args.max_num_batched_tokens, args.max_num_seqs)

    async def run() -> None:
        kv = KVStoreClient(split_targets(args.kvstore))
        service = PrefillService(runtime, scheduler, kv, args.max_queue,
                                 LocalPrefixCache(int(args.prefix_cache_mb * (1 << 20))))

        def register(server):
            prefill_pb2_grpc.add_PrefillServicer_to_server(service, server)
            return [prefill_pb2.DESCRIPTOR.services_by_name["Prefill"].full_name]

        await serve_worker("prefill", args, register, scheduler, kv)

    asyncio.run(run())
