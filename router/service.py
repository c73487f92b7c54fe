"""The public Router service: validate, tokenize, prefill on one worker, decode on another, relay the stream."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

import grpc
from prometheus_client import Counter, Gauge, Histogram

from common.convert import sampling_from_proto, sampling_to_proto
from common.metrics import E2E_BUCKETS, TOKEN_COUNT_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS, request_id_var
from common.server import request_metadata
from common.validation import abort_invalid, check_fits_context, check_request_id, check_token_ids
from engine.kv_cache import block_keys
from engine.params import InvalidParameter, SamplingParams
from engine.tokenizer import GGUFTokenizer
from kvstore.client import KVStoreClient
from protos import common_pb2, decode_pb2, prefill_pb2, router_pb2, router_pb2_grpc
from router.policy import PrefillPolicy, choose_decode
from router.tokenize import TokenizeRPCs
from router.workers import Worker, WorkerPool

log = logging.getLogger("pdserve.router")

MAX_PROMPT_CHARS = 1_000_000
MAX_MESSAGES = 1024
CHAT_ROLES = ("system", "user", "assistant", "tool")

REQUESTS = Counter("pdserve_request_success_total", "Requests finished, by finish reason", ["finished_reason"])
REJECTED = Counter("pdserve_request_rejected_total", "Requests refused before running", ["reason"])
PROMPT_TOKENS = Counter("pdserve_prompt_tokens_total", "Prompt tokens of finished requests")
GENERATION_TOKENS = Counter("pdserve_generation_tokens_total", "Generated tokens")
CACHED_TOKENS = Counter("pdserve_prefix_cache_hit_tokens_total", "Prompt tokens served from cached KV")
TTFT = Histogram("pdserve_time_to_first_token_seconds", "Wall time to the first token", buckets=TTFT_BUCKETS)
TPOT = Histogram("pdserve_time_per_output_token_seconds", "Wall time per output token after the first",
                 buckets=TPOT_BUCKETS)
E2E = Histogram("pdserve_e2e_request_latency_seconds", "Wall time of the whole request", buckets=E2E_BUCKETS)
TTFT_MODELED = Histogram("pdserve_time_to_first_token_modeled_seconds", "Modeled time to the first token",
                         buckets=TTFT_BUCKETS)
TPOT_MODELED = Histogram("pdserve_time_per_output_token_modeled_seconds", "Modeled time per output token",
                         buckets=TPOT_BUCKETS)
E2E_MODELED = Histogram("pdserve_e2e_request_latency_modeled_seconds", "Modeled time of the whole request",
                        buckets=E2E_BUCKETS)
PROMPT_LEN = Histogram("pdserve_request_prompt_tokens", "Prompt tokens per request", buckets=TOKEN_COUNT_BUCKETS)
GEN_LEN = Histogram("pdserve_request_generation_tokens", "Generated tokens per request", buckets=TOKEN_COUNT_BUCKETS)
INFLIGHT = Gauge("pdserve_num_requests_inflight", "Requests the router is serving")


@dataclass
class RouterConfig:
    model_name: str
    context_length: int
    fingerprint: str
    block_tokens: int = 16
    colocated: bool = False
    max_inflight: int = 512
    prefill_retries: int = 3
    lease_ttl_s: float = 30.0


@dataclass
class RequestState:
    request_id: str
    prompt_len: int
    started: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    completion_tokens: int = 0
    cached_tokens: int = 0
    queue_s: float = 0.0
    kv_store_s: float = 0.0
    kv_fetch_s: float = 0.0
    lease_id: str = ""  # prefill's lease, until a decode worker has taken the KV (it releases it then)
    # modeled clock, as reported by the workers
    queue_modeled_s: float = 0.0
    prefill_modeled_s: float = 0.0
    kv_transfer_modeled_s: float = 0.0
    decode_wait_modeled_s: float = 0.0  # decode admission queue before the first decode step
    decode_modeled_s: float = 0.0

    def timings(self) -> common_pb2.Timings:
        now = time.perf_counter()
        e2e = now - self.started
        ttft = (self.first_token_at or now) - self.started
        tpot = (e2e - ttft) / (self.completion_tokens - 1) if self.completion_tokens > 1 else 0.0
        ttft_m = self.queue_modeled_s + self.prefill_modeled_s
        e2e_m = ttft_m + self.kv_transfer_modeled_s + self.decode_wait_modeled_s + self.decode_modeled_s
        tpot_m = (e2e_m - ttft_m) / (self.completion_tokens - 1) if self.completion_tokens > 1 else 0.0
        return common_pb2.Timings(
            queue_wall_s=self.queue_s, ttft_wall_s=ttft, tpot_wall_s=tpot, e2e_wall_s=e2e,
            kv_handoff_wall_s=self.kv_store_s + self.kv_fetch_s, kv_store_wall_s=self.kv_store_s,
            kv_fetch_wall_s=self.kv_fetch_s, queue_modeled_s=self.queue_modeled_s + self.decode_wait_modeled_s,
            ttft_modeled_s=ttft_m, tpot_modeled_s=tpot_m, e2e_modeled_s=e2e_m,
            kv_transfer_modeled_s=self.kv_transfer_modeled_s)

    def usage(self) -> common_pb2.Usage:
        return common_pb2.Usage(prompt_tokens=self.prompt_len, completion_tokens=self.completion_tokens,
                                cached_prompt_tokens=self.cached_tokens,
                                total_tokens=self.prompt_len + self.completion_tokens)


class UpstreamError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class RouterService(TokenizeRPCs, router_pb2_grpc.RouterServicer):
    def __init__(self, config: RouterConfig, tokenizer: GGUFTokenizer, prefill: WorkerPool, decode: WorkerPool,
                 policy: PrefillPolicy, kv: KVStoreClient | None) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.prefill = prefill
        self.decode = decode
        self.policy = policy
        self.kv = kv
        self.inflight = 0
        self.active_ids: set[str] = set()  # workers key their state by request id: one request per id at a time

    # --- validation -------------------------------------------------------------------------------------------------
    def _prompt_ids(self, request: router_pb2.GenerateRequest) -> list[int]:
        kind = request.WhichOneof("prompt")
        if kind is None:
            raise InvalidParameter("prompt", "one of text, chat or token_ids is required")
        if kind == "text":
            if not request.text:
                raise InvalidParameter("prompt.text", "prompt is empty")
            if len(request.text) > MAX_PROMPT_CHARS:
                raise InvalidParameter("prompt.text", f"at most {MAX_PROMPT_CHARS} characters")
            return self.tokenizer.encode(request.text)
        if kind == "chat":
            messages = request.chat.messages
            if not messages:
                raise InvalidParameter("prompt.chat.messages", "at least one message is required")
            if len(messages) > MAX_MESSAGES:
                raise InvalidParameter("prompt.chat.messages", f"at most {MAX_MESSAGES} messages")
            for i, m in enumerate(messages):
                if m.role not in CHAT_ROLES:
                    raise InvalidParameter(f"prompt.chat.messages[{i}].role",
                                           f"{m.role!r} is not one of {', '.join(CHAT_ROLES)}")
                if len(m.content) > MAX_PROMPT_CHARS:
                    raise InvalidParameter(f"prompt.chat.messages[{i}].content", f"at most {MAX_PROMPT_CHARS} chars")
            try:
                return self.tokenizer.encode_chat([{"role": m.role, "content": m.content} for m in messages])
            except ValueError as exc:
                raise InvalidParameter("prompt.chat", str(exc)) from exc
        return check_token_ids(request.token_ids.ids, self.tokenizer.vocab_size, "prompt.token_ids")

    def validate(self, request: router_pb2.GenerateRequest) -> tuple[list[int], SamplingParams]:
        if request.model and request.model != self.config.model_name:
            raise InvalidParameter("model", f"unknown model {request.model!r}; this router serves "
                                            f"{self.config.model_name!r}")
        ids = self._prompt_ids(request)
        if not ids:
            raise InvalidParameter("prompt", "prompt is empty after tokenization")
        params = sampling_from_proto(request.sampling)
        if not request.sampling.HasField("max_tokens"):  # unset: the rest of the context, as vLLM's server does
            params.max_tokens = max(1, self.config.context_length - len(ids))
        params.validate(self.tokenizer.vocab_size)
        check_fits_context(len(ids), params, self.config.context_length)
        return ids, params

    # --- RPCs -------------------------------------------------------------------------------------------------------
    async def ListModels(self, request, context):
        c = self.config
        return router_pb2.ListModelsResponse(models=[router_pb2.ModelCard(
            id=c.model_name, context_length=c.context_length, vocab_size=self.tokenizer.vocab_size,
            fingerprint=c.fingerprint)])

    async def Generate(self, request, context):
        request_id = request.request_id or dict(context.invocation_metadata() or ()).get("x-request-id", "")
        try:
            if request_id:
                check_request_id(request_id)
            ids, params = self.validate(request)
        except InvalidParameter as exc:
            REJECTED.labels("invalid").inc()
            await abort_invalid(context, exc)
        if self.inflight >= self.config.max_inflight:
            REJECTED.labels("overloaded").inc()
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"router is at its limit of {self.config.max_inflight} requests in flight; retry later")
        if request_id in self.active_ids:
            REJECTED.labels("duplicate_id").inc()
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"request_id: {request_id!r} is already in flight")
        state = RequestState(request_id or uuid.uuid4().hex, len(ids))
        request_id_var.set(state.request_id)  # for this RPC's log lines
        self.active_ids.add(state.request_id)
        self.inflight += 1
        INFLIGHT.inc()
        try:
            async for chunk in self._serve(state, ids, params, context):
                yield chunk
        except UpstreamError as exc:
            await context.abort(exc.code, str(exc))
        finally:
            self.active_ids.discard(state.request_id)
            self.inflight -= 1
            INFLIGHT.dec()
            if state.lease_id and self.kv is not None:  # e.g. cancelled between prefill and decode
                asyncio.ensure_future(self._release(state.lease_id))

    async def Complete(self, request, context):
        chunks = [c async for c in self.Generate(request, context)]
        last = chunks[-1]
        return router_pb2.GenerateResponse(
            request_id=last.request_id, token_ids=[t for c in chunks for t in c.token_ids],
            text="".join(c.text for c in chunks), finish_reason=last.finish_reason, stop_reason=last.stop_reason,
            usage=last.usage, timings=last.timings)

    # --- the request path -------------------------------------------------------------------------------------------
    def _chunk(self, state: RequestState, step: common_pb2.TokenStep) -> router_pb2.GenerateChunk:
        if state.first_token_at is None and step.token_ids:
            state.first_token_at = time.perf_counter()
        state.completion_tokens += len(step.token_ids)
        chunk = router_pb2.GenerateChunk(request_id=state.request_id, token_ids=step.token_ids, text=step.text,
                                         finish_reason=step.finish_reason, stop_reason=step.stop_reason)
        if step.finish_reason:
            chunk.usage.CopyFrom(state.usage())
            chunk.timings.CopyFrom(state.timings())
            self._record(state, step.finish_reason, chunk.timings)
        return chunk

    @staticmethod
    def _record(state: RequestState, reason: str, t: common_pb2.Timings) -> None:
        REQUESTS.labels(reason).inc()
        PROMPT_TOKENS.inc(state.prompt_len)
        GENERATION_TOKENS.inc(state.completion_tokens)
        CACHED_TOKENS.inc(state.cached_tokens)
        PROMPT_LEN.observe(state.prompt_len)
        GEN_LEN.observe(state.completion_tokens)
        TTFT.observe(t.ttft_wall_s)
        E2E.observe(t.e2e_wall_s)
        TTFT_MODELED.observe(t.ttft_modeled_s)
        E2E_MODELED.observe(t.e2e_modeled_s)
        if state.completion_tokens > 1:
            TPOT.observe(t.tpot_wall_s)
            TPOT_MODELED.observe(t.tpot_modeled_s)

    async def _serve(self, state: RequestState, ids: list[int], params: SamplingParams, context):
        sampling = sampling_to_proto(params)
        timeout = context.time_remaining()
        if self.config.colocated:
            request = decode_pb2.DecodeRequest(request_id=state.request_id, prompt_ids=ids, sampling=sampling,
                                               colocated=True)
            async for chunk in self._relay_decode(state, request, timeout):
                yield chunk
            return
        reply = await self._prefill(state, ids, sampling, timeout)
        state.lease_id = reply.kv.lease_id
        state.cached_tokens = reply.cached_tokens
        state.queue_s = reply.queue_wall_s
        state.kv_store_s = reply.kv_store_wall_s
        state.queue_modeled_s = reply.queue_modeled_s
        state.prefill_modeled_s = reply.modeled_s
        yield self._chunk(state, reply.first)
        if reply.first.finish_reason:
            return
        request = decode_pb2.DecodeRequest(request_id=state.request_id, prompt_ids=ids,
                                           first_token=reply.first.token_ids[0], kv=reply.kv, sampling=sampling)
        async for chunk in self._relay_decode(state, request, context.time_remaining()):
            yield chunk

    async def _prefill(self, state: RequestState, ids: list[int], sampling, timeout) -> prefill_pb2.PrefillReply:
        """Prefill on the policy's worker; UNAVAILABLE or a full queue moves the request to another worker."""
        keys = block_keys(ids, self.config.fingerprint, self.config.block_tokens)
        request = prefill_pb2.PrefillRequest(request_id=state.request_id, token_ids=ids, sampling=sampling,
                                             lease_ttl_s=self.config.lease_ttl_s)
        tried: set[str] = set()
        last_error: grpc.aio.AioRpcError | None = None
        for _ in range(min(self.config.prefill_retries, len(self.prefill.workers))):
            candidates = self.prefill.available(exclude=tried)
            if not candidates:
                break
            worker = self.policy.choose(candidates, keys)
            tried.add(worker.target)
            worker.inflight += 1
            worker.inflight_tokens += len(ids)
            try:
                reply = await worker.stub.Prefill(request, timeout=timeout,
                                                  metadata=request_metadata(state.request_id))
                worker.remember(keys)
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
                worker.inflight_tokens -= len(ids)
        if last_error is not None and last_error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            REJECTED.labels("overloaded").inc()
            raise UpstreamError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"all prefill workers are full ({last_error.details()}); retry later")
        raise UpstreamError(grpc.StatusCode.UNAVAILABLE,
                            f"no prefill worker could take the request ({last_error.details() if last_error else ''})")

    async def _relay_decode(self, state: RequestState, request: decode_pb2.DecodeRequest, timeout):
        """Stream from a decode worker. One that is UNAVAILABLE before it sent anything is replaced by another
        (the KV still waits, leased, in the kvstore); after the first chunk a failure ends the request."""
        tried: set[str] = set()
        while True:
            candidates = self.decode.available(exclude=tried)
            if not candidates:
                raise UpstreamError(grpc.StatusCode.UNAVAILABLE, "decode: no decode worker could take the request")
            worker: Worker = choose_decode(candidates)
            tried.add(worker.target)
            worker.inflight += 1
            call = worker.stub.Decode(request, timeout=timeout, metadata=request_metadata(state.request_id))
            relayed = False
            try:
                async for chunk in call:
                    relayed = True
                    state.lease_id = ""  # the decode worker fetched the KV and released the lease itself
                    state.kv_fetch_s += chunk.kv_fetch_wall_s
                    state.queue_s += chunk.queue_wall_s
                    state.kv_transfer_modeled_s += chunk.kv_transfer_modeled_s
                    state.decode_modeled_s += chunk.decode_modeled_s
                    if self.config.colocated:  # the decode worker's queue and prefill come before the first token
                        state.queue_modeled_s += chunk.queue_modeled_s
                        state.prefill_modeled_s += chunk.prefill_modeled_s
                    else:
                        state.decode_wait_modeled_s += chunk.queue_modeled_s
                    yield self._chunk(state, chunk.step)
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

    async def _release(self, lease_id: str) -> None:
        try:
            await self.kv.release(lease_id, timeout=5)
        except grpc.aio.AioRpcError as exc:
            log.warning("lease %s not released: %s", lease_id, exc.details())
