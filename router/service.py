"""The public Router service: validate, tokenize, prefill on one worker, decode on another, relay the stream."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass

import grpc

from common.metrics import request_id_var
from common.validation import abort_invalid
from engine.kv_cache import DEFAULT_BLOCK_TOKENS, block_keys
from engine.params import InvalidParameter
from engine.tokenizer import GGUFTokenizer
from kvstore.client import DEFAULT_LEASE_TTL_S, KVStoreClient
from protos import common_pb2, decode_pb2, prefill_pb2, router_pb2, router_pb2_grpc
from router.metrics import INFLIGHT, REJECTED, RETRIES, record_finished
from router.policy import PrefillPolicy
from router.prompt import RequestValidator
from router.request_state import RequestState
from router.upstream import StreamInterrupted, UpstreamError, prefill_with_retries, relay_decode
from router.workers import WorkerPool

log = logging.getLogger("pdserve.router")


@dataclass
class RouterConfig:
    model_name: str
    context_length: int
    fingerprint: str
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    colocated: bool = False
    max_inflight: int = 512
    prefill_retries: int = 3
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S
    decode_resumes: int = 3  # times one request may move to another decode worker mid-stream


class RouterService(router_pb2_grpc.RouterServicer):
    def __init__(self, config: RouterConfig, tokenizer: GGUFTokenizer, prefill: WorkerPool, decode: WorkerPool,
                 policy: PrefillPolicy, kv: KVStoreClient | None) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.validator = RequestValidator(tokenizer, config.model_name, config.context_length)
        self.prefill = prefill
        self.decode = decode
        self.policy = policy
        self.kv = kv
        self.inflight = 0
        self.mean_e2e_s = 1.0  # moving average of finished requests' wall time, for the retry advice

    def retry_after_s(self) -> float:
        """When a shed request should come back: about when one of the requests in flight will have finished."""
        return min(30.0, max(0.05, self.mean_e2e_s / max(1, self.inflight)))

    async def _shed(self, context, message: str) -> None:
        """RESOURCE_EXHAUSTED with retry advice, in the message and as ``retry-after-ms`` trailing metadata."""
        REJECTED.labels("overloaded").inc()
        after_ms = int(self.retry_after_s() * 1000)
        context.set_trailing_metadata((("retry-after-ms", str(after_ms)),))
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{message}; retry in about {after_ms} ms")

    async def ListModels(self, request, context):
        c = self.config
        return router_pb2.ListModelsResponse(models=[router_pb2.ModelCard(
            id=c.model_name, context_length=c.context_length, vocab_size=self.tokenizer.vocab_size,
            fingerprint=c.fingerprint)])

    async def Generate(self, request, context):
        try:
            ids, _ = self.validator.validate(request)
        except InvalidParameter as exc:
            REJECTED.labels("invalid").inc()
            await abort_invalid(context, exc)
        if self.inflight >= self.config.max_inflight:
            await self._shed(context, f"router is at its limit of {self.config.max_inflight} requests in flight")
        state = RequestState(request.request_id or uuid.uuid4().hex, len(ids), colocated=self.config.colocated)
        request_id_var.set(state.request_id)  # for this RPC's log lines
        self.inflight += 1
        INFLIGHT.inc()
        try:
            async for chunk in self._serve(state, ids, request.sampling, context):
                yield chunk
        except UpstreamError as exc:
            if exc.overloaded:
                await self._shed(context, str(exc))
            log.warning("request failed: %s: %s", exc.code.name, exc)
            await context.abort(exc.code, str(exc))
        finally:
            self.mean_e2e_s += 0.1 * (time.perf_counter() - state.started - self.mean_e2e_s)
            self.inflight -= 1
            INFLIGHT.dec()
            if state.lease_id and self.kv is not None:  # e.g. cancelled between prefill and decode
                asyncio.ensure_future(self.kv.release_quietly(state.lease_id))

    async def Complete(self, request, context):
        chunks = [c async for c in self.Generate(request, context)]
        last = chunks[-1]
        return router_pb2.GenerateResponse(
            request_id=last.request_id, token_ids=[t for c in chunks for t in c.token_ids],
            text="".join(c.text for c in chunks), finish_reason=last.finish_reason, stop_reason=last.stop_reason,
            usage=last.usage, timings=last.timings)

    # --- the request path -------------------------------------------------------------------------------------------
    async def _serve(self, state: RequestState, ids: list[int], sampling: common_pb2.SamplingParams, context):
        """Prefill, then decode; the sampling message goes to the workers as the client sent it (already checked)."""
        if self.config.colocated:
            request = decode_pb2.DecodeRequest(request_id=state.request_id, prompt_ids=ids, sampling=sampling,
                                               colocated=True)
            async for chunk in self._relay(state, request, context):
                yield chunk
            return
        keys = block_keys(ids, self.config.fingerprint, self.config.block_tokens)
        state.lease_id = uuid.uuid4().hex  # released when the request ends before a decode worker took the KV
        prefill_request = prefill_pb2.PrefillRequest(request_id=state.request_id, token_ids=ids, sampling=sampling,
                                                     lease_ttl_s=self.config.lease_ttl_s, lease_id=state.lease_id)
        reply = await prefill_with_retries(self.prefill, self.policy, prefill_request, keys,
                                           self.config.prefill_retries, context.time_remaining())
        state.took_prefill(reply)
        yield self._chunk(state, reply.first)
        if reply.first.finish_reason:
            return
        request = decode_pb2.DecodeRequest(request_id=state.request_id, prompt_ids=ids,
                                           first_token=reply.first.token_ids[0], kv=reply.kv, sampling=sampling)
        async for chunk in self._relay(state, request, context):
            yield chunk

    async def _relay(self, state: RequestState, request: decode_pb2.DecodeRequest, context):
        """Relay the decode stream; when its worker goes away mid-stream, resume on another one.

        The resumed request carries every token already relayed: the new worker recomputes prompt + those tokens and
        continues from the next one, so the client sees no gap and no duplicate (and with greedy or seeded sampling
        the same tokens as without the fault).
        """
        failed: set[str] = set()
        while True:
            try:
                async for chunk in relay_decode(self.decode, request, context.time_remaining(), frozenset(failed)):
                    state.took_decode_chunk(chunk)
                    yield self._chunk(state, chunk.step)
                return
            except StreamInterrupted as exc:
                failed.add(exc.target)
                if state.resumes >= self.config.decode_resumes:
                    raise UpstreamError(grpc.StatusCode.UNAVAILABLE,
                                        f"{exc}; gave up after {state.resumes} resumptions") from exc
                if len(failed) >= len(self.decode.workers):
                    raise UpstreamError(grpc.StatusCode.UNAVAILABLE,
                                        f"{exc}; no other decode worker can resume the request") from exc
                state.resumes += 1
                RETRIES.labels("resume").inc()
                log.warning("%s; resuming after %d tokens", exc, len(state.output_ids))
                request = decode_pb2.DecodeRequest(request_id=request.request_id, prompt_ids=request.prompt_ids,
                                                   sampling=request.sampling, colocated=True,
                                                   resume_ids=state.output_ids)

    def _chunk(self, state: RequestState, step: common_pb2.TokenStep) -> router_pb2.GenerateChunk:
        state.took_tokens(step.token_ids)
        chunk = router_pb2.GenerateChunk(request_id=state.request_id, token_ids=step.token_ids, text=step.text,
                                         finish_reason=step.finish_reason, stop_reason=step.stop_reason)
        if step.finish_reason:
            chunk.usage.CopyFrom(state.usage())
            chunk.timings.CopyFrom(state.timings())
            record_finished(step.finish_reason, chunk.usage, chunk.timings)
        return chunk
