"""The Prefill service: prefix reuse from the kvstore, batched prefill, KV blocks stored and leased for decode."""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from pdserve.common.convert import token_step
from pdserve.common.status import abort_code, abort_exhausted, abort_invalid
from pdserve.common.validation import MAX_SALT_CHARS, check_worker_request
from pdserve.engine.kv.blocks import block_keys
from pdserve.engine.params import InvalidParameter
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.engine.sequence import Sequence
from pdserve.kvstore.client import KVIntegrityError, KVStoreClient
from pdserve.kvstore.contract import DEFAULT_LEASE_TTL_S, build_handle, check_lease_id, check_lease_ttl
from pdserve.kvstore.lease import KVLease
from pdserve.prefill_server import metrics
from pdserve.prefill_server.kv_upload import BlockUploader
from pdserve.prefill_server.prefix_cache import LocalPrefixCache
from pdserve.v1 import common_pb2, prefill_pb2, prefill_pb2_grpc
from pdserve.worker.flags import build_worker, run_worker, worker_config, worker_parser
from pdserve.worker.job import Job
from pdserve.worker.worker import Worker, WorkerDraining, WorkerFull

log = logging.getLogger("pdserve.prefill")




class PrefillService(prefill_pb2_grpc.PrefillServicer):
    def __init__(self, worker: Worker, kv_client: KVStoreClient, local_cache: LocalPrefixCache) -> None:
        self.worker = worker
        self.put_turns = asyncio.Lock()
        self.runtime = worker.runtime
        self.kv_client = kv_client
        self.cache = local_cache
        self.fingerprint = self.runtime.config.fingerprint
        # the modeled engine's first token leaves once the prefill's reply is sent at its loop's next turn (SGLang)
        self.reply_at_next_turn = worker.clock.handoff.engine.first_token == "loops"
        for outcome in ("ok", "rejected", "cancelled", "error"):
            metrics.REQUESTS.labels(outcome)
        metrics.WAITING.set_function(lambda: len(worker.scheduler.waiting))
        metrics.WAITING_TOKENS.set_function(lambda: worker.scheduler.pending_tokens)

    async def GetLoad(self, request, context):
        return self.worker.load()

    def _validate(self, request) -> tuple[list[int], object, float]:
        config = self.runtime.config
        ids, params = check_worker_request(request.request_id, request.token_ids, request.sampling,
                                           config.vocab_size, config.context_length, "token_ids")
        ttl = check_lease_ttl(request.lease_ttl_s or DEFAULT_LEASE_TTL_S)
        check_lease_id(request.lease_id)
        if len(request.cache_salt) > MAX_SALT_CHARS:
            raise InvalidParameter("cache_salt", f"at most {MAX_SALT_CHARS} characters")
        return ids, params, ttl

    async def Prefill(self, request, context):
        try:
            ids, params, ttl = self._validate(request)
        except InvalidParameter as exc:
            await abort_invalid(context, exc)
        try:
            with self.worker.admission():
                return await self._prefill(request, ids, params, ttl, context)
        except WorkerFull as exc:
            metrics.REQUESTS.labels("rejected").inc()
            await abort_exhausted(context, f"prefill {exc}")
        except WorkerDraining as exc:
            metrics.REQUESTS.labels("rejected").inc()
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"prefill {exc}")

    async def _prefill(self, request: prefill_pb2.PrefillRequest, ids: list[int], params, ttl: float, context):
        metrics.PROMPT_TOKENS.inc(len(ids))
        metrics.PROMPT_LEN.observe(len(ids))
        seq = self.runtime.new_sequence(ids, params, request.request_id)
        # named under the tenant's salt: blocks (here, in the local cache, in the kvstore) are shared within a tenant
        keys = block_keys(ids, self.fingerprint, self.runtime.block_tokens, self.runtime.kv_dtype,
                          salt=request.cache_salt)
        lease = KVLease(self.kv_client, request.lease_id, ttl)  # made by the router, one per request
        job: Job | None = None
        uploader: BlockUploader | None = None
        try:
            async with lease:  # released if anything below fails; handed over to decode with the reply
                frontend_s = await self.worker.clock.pace_frontend()
                io_start = time.perf_counter()
                stored_prefix, reused = await self._reuse_prefix(seq, keys, lease)
                io_s = time.perf_counter() - io_start
                uploader = BlockUploader(self.kv_client, self.cache, seq, keys, stored_prefix, lease, self.put_turns)
                job = self.worker.submit(seq)
                job.on_prefill_chunk = uploader.chunk_done  # blocks move while later chunks compute
                event = await job.events.get()
                if isinstance(event, BaseException):
                    raise event
                token_ids, first = event
                io_start = time.perf_counter()
                handle = self._handle(await uploader.finish(), len(ids), lease)
                io_s += time.perf_counter() - io_start
                if self.reply_at_next_turn:  # SGLang: the reply leaves when the loop comes round (its next step)
                    await job.next_step_known.wait()
                lease.hand_over()
        except asyncio.CancelledError:
            if job is not None:
                self.worker.cancel(job)
            self._give_up(uploader)
            metrics.REQUESTS.labels("cancelled").inc()
            raise
        except KVIntegrityError as exc:
            self._give_up(uploader)
            metrics.REQUESTS.labels("error").inc()
            await context.abort(grpc.StatusCode.DATA_LOSS, f"kv: {exc}")
        except grpc.aio.AioRpcError as exc:
            self._give_up(uploader)
            metrics.REQUESTS.labels("error").inc()
            passed = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.FAILED_PRECONDITION)  # full; no such lease
            code = exc.code() if exc.code() in passed else grpc.StatusCode.UNAVAILABLE
            await abort_code(context, code, f"kvstore: {exc.details()}")
        except Exception as exc:  # the model step failed
            self._give_up(uploader)
            metrics.REQUESTS.labels("error").inc()
            await context.abort(grpc.StatusCode.INTERNAL, f"prefill failed: {exc}")
        cached = reused * self.runtime.block_tokens
        metrics.CACHE_QUERIES.inc(len(ids))
        metrics.CACHE_HITS.inc(cached)
        metrics.QUEUE_SECONDS.observe(job.queue_wall_s)
        metrics.KV_SECONDS.observe(io_s)
        metrics.REQUESTS.labels("ok").inc()
        return prefill_pb2.PrefillReply(
            first=token_step(token_ids, first), forks=[token_step(f.output_ids, f.first_result) for f in seq.forks],
            kv=handle, cached_tokens=cached, queue_wall_s=job.queue_wall_s,
            compute_wall_s=job.compute_wall_s, kv_store_wall_s=io_s, modeled_s=job.prefill_modeled_s,
            queue_modeled_s=job.queue_modeled_s, frontend_modeled_s=frontend_s,
            next_turn_modeled_s=job.next_step_modeled_s if self.reply_at_next_turn else 0.0)

    async def _reuse_prefix(self, seq: Sequence, keys: list[str], lease: KVLease) -> tuple[int, int]:
        """Lease what the kvstore already holds and load the reusable leading blocks into ``seq``'s cache.

        Returns (blocks present in the kvstore, blocks reused). At least one prompt token is always computed, since
        the first output token needs its logits. A block that fails its checksum or MAC on the way (the kvstore drops
        it) is computed instead, with every block after it, and stored again.
        """
        bt = self.runtime.block_tokens
        stored = await lease.acquire(keys)
        reusable = (len(seq.prompt_ids) - 1) // bt
        local = self.cache.leading_hits(keys[:reusable])
        reuse = min(max(local, stored), reusable)
        try:
            fetched = await self.kv_client.get(keys[local:reuse], lease_id=lease.lease_id) if reuse > local else []
        except KVIntegrityError as exc:
            log.warning("a reused block failed its check (%s); computing the prompt from block %d", exc, local)
            metrics.KV_INTEGRITY_FAILURES.inc()
            stored, reuse, fetched = local, local, []
        for i in range(reuse):
            if i < local:
                seq.kv.append_block(self.cache.get(keys[i]), bt)  # (keys name the dtype: the cache's own)
            else:
                seq.kv.append_block(fetched[i - local].data, bt, fetched[i - local].kv_dtype)
        for block in fetched:
            self.cache.add(block.key, block.data)
        return stored, reuse

    @staticmethod
    def _give_up(uploader: BlockUploader | None) -> None:
        """Stop the request's Puts in flight; the lease released next frees whatever they stored."""
        if uploader is not None:
            uploader.cancel()

    def _handle(self, keys: list[str], token_count: int, lease: KVLease) -> common_pb2.KVHandle:
        return build_handle(keys, token_count, self.runtime.block_tokens, lease.lease_id, lease.ttl_s, self.fingerprint,
                            self.runtime.kv_dtype)


def build_parser():
    parser = worker_parser("prefill_server", 50061, max_queue=256)
    parser.add_argument("--prefix-cache-mb", type=float, default=256.0, help="local cache of hot KV blocks")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = worker_config(args, SchedulerRole.PREFILL, "prefill")
    worker = build_worker(config)
    cache = LocalPrefixCache(int(args.prefix_cache_mb * (1 << 20)))

    def register(server: grpc.aio.Server, kv_client: KVStoreClient | None) -> list[str]:
        if kv_client is None:
            parser.error("--kvstore: a prefill worker needs a kvstore")
        prefill_pb2_grpc.add_PrefillServicer_to_server(PrefillService(worker, kv_client, cache), server)
        return [prefill_pb2.DESCRIPTOR.services_by_name["Prefill"].full_name]

    asyncio.run(run_worker("prefill", config, worker, register))
