"""The public Router service: validate, tokenize, prefill on one worker, decode on another, relay the stream.

Over 300 lines because Generate is one request's life (admission, tenancy, leases, prefill, decode, samples)
kept in one reading order; prompt checks, streams, upstream calls and tenancy live in their own modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import NoReturn

import grpc

from pdserve.common.convert import sampling_from_proto, sampling_to_proto
from pdserve.common.metrics import request_id_var
from pdserve.common.status import abort_code, abort_invalid, exhausted_status
from pdserve.common.validation import MAX_SALT_CHARS, check_request_id
from pdserve.engine.kv.blocks import block_keys
from pdserve.engine.params import InvalidParameter, sample_params
from pdserve.engine.text.tokenizer import GGUFTokenizer
from pdserve.kvstore.client import KVStoreClient
from pdserve.kvstore.contract import build_handle, handle_keys, under_lease, wait_s_within
from pdserve.kvstore.lease import KVLease
from pdserve.router.auth import current_tenant
from pdserve.router.config import RouterConfig
from pdserve.router.kv_leases import request_lease, sample_lease
from pdserve.router.metrics import INFLIGHT, REJECTED, RETRIES, record_finished, record_unfinished
from pdserve.router.policy import PrefillPolicy
from pdserve.router.prompt import RequestValidator, TokenizerBusy
from pdserve.router.request_state import Inflight, RequestState, total_usage
from pdserve.router.streams import merge
from pdserve.router.tenancy import TenantLimitExceeded, TenantLimits, TenantSalts, internal_id
from pdserve.router.tokenize import TokenizeRPCs
from pdserve.router.tokens import TokenPieces
from pdserve.router.upstream import LeaseLost, UpstreamError, prefill_with_retries, resumable_decode, start_prefetch
from pdserve.router.workers import WorkerPool
from pdserve.v1 import common_pb2, decode_pb2, prefill_pb2, router_pb2, router_pb2_grpc

log = logging.getLogger("pdserve.router")
MAX_ABORT_IDS = 1024


class RouterService(TokenizeRPCs, router_pb2_grpc.RouterServicer):
    def __init__(self, config: RouterConfig, tokenizer: GGUFTokenizer, prefill: WorkerPool, decode: WorkerPool,
                 policy: PrefillPolicy, kv_client: KVStoreClient | None, limits: TenantLimits | None = None,
                 salts: TenantSalts | None = None) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.validator = RequestValidator(tokenizer, config.model_name, config.context_length, config.max_prompt_chars,
                                          config.tokenizer_workers, max_pending=config.max_inflight)
        self.prefill = prefill
        self.decode = decode
        self.policy = policy
        self.kv_client = kv_client
        self.inflight = 0
        # requests in flight by (tenant, the client's id), with their upstream calls (for Abort): ids are unique per
        # tenant; the workers see internal ids (tenancy.internal_id), unique everywhere
        self.active: dict[tuple[str, str], Inflight] = {}
        self.limits = limits or TenantLimits(0, 0)
        self.salts = salts or TenantSalts(None)
        self.pieces = TokenPieces(tokenizer)
        self.mean_e2e_s = 1.0  # moving average of finished requests' wall time, for the retry advice

    def retry_after_s(self) -> float:
        """When a shed request should come back: about when one of the requests in flight will have finished."""
        return min(30.0, max(0.05, self.mean_e2e_s / max(1, self.inflight)))

    async def _shed(self, context, reason: str, message: str) -> NoReturn:
        """RESOURCE_EXHAUSTED with retry advice: in the message, as RetryInfo, and as ``retry-after-ms`` metadata."""
        REJECTED.labels(reason).inc()
        after_s = self.retry_after_s()
        after_ms = int(after_s * 1000)
        status = exhausted_status(f"{message}; retry in about {after_ms} ms", after_s)
        await context.abort(status.code, status.details,
                            tuple(status.trailing_metadata) + (("retry-after-ms", str(after_ms)),))

    async def _shed_if_full(self, context) -> None:
        if self.inflight >= self.config.max_inflight:
            await self._shed(context, "router_full",
                             f"router is at its limit of {self.config.max_inflight} requests in flight")

    async def ListModels(self, request, context):
        c = self.config
        return router_pb2.ListModelsResponse(models=[router_pb2.ModelCard(
            id=c.model_name, context_length=c.context_length, vocab_size=self.tokenizer.vocab_size,
            fingerprint=c.fingerprint)])

    async def _admit(self, request, request_id: str, tenant: str, slot, context):
        """Validate and tokenize a request whose tenant slot is taken; its prompt tokens then join the slot."""
        try:
            if request_id:
                check_request_id(request_id)
            if len(request.cache_salt) > MAX_SALT_CHARS:
                raise InvalidParameter("cache_salt", f"at most {MAX_SALT_CHARS} characters")
            ids, params = await self.validator.validate(request)  # the tokenizing in a thread pool
        except InvalidParameter as exc:
            REJECTED.labels("invalid").inc()
            await abort_invalid(context, exc)
        except TokenizerBusy as exc:
            await self._shed(context, "router_full", str(exc))
        await self._shed_if_full(context)  # again: others were admitted while this one was tokenized
        if (tenant, request_id) in self.active:
            REJECTED.labels("duplicate_id").inc()
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"request_id: {request_id!r} is already in flight")
        try:
            slot.queue(len(ids))
        except TenantLimitExceeded as exc:
            await self._shed(context, "tenant_limit", str(exc))
        return ids, params

    async def Generate(self, request, context):
        tenant = current_tenant.get()
        request_id = request.request_id or dict(context.invocation_metadata() or ()).get("x-request-id", "")
        await self._shed_if_full(context)  # before tokenizing: a full router does not spend time on the prompt
        try:  # the tenant's slot too: a tenant at its limit gets no tokenizing
            slot = self.limits.admit(tenant)
        except TenantLimitExceeded as exc:
            await self._shed(context, "tenant_limit", str(exc))
        try:
            ids, params = await self._admit(request, request_id, tenant, slot, context)
        except BaseException:
            slot.close()
            raise
        request_id = request_id or uuid.uuid4().hex
        worker_id = internal_id(request_id)
        samples = [RequestState(request_id, len(ids), colocated=self.config.colocated) for _ in range(params.n)]
        request_id_var.set(worker_id)  # for this RPC's log lines
        key = (tenant, request_id)
        inflight = self.active[key] = Inflight()
        self.inflight += 1
        INFLIGHT.inc()
        outcome = "abort"  # unless every sample finishes, is refused or fails below: the caller went away
        salt = self.salts.salt(tenant, request.cache_salt)
        try:
            async for chunk in self._serve(samples, worker_id, ids, request.sampling, salt, context, inflight.track):
                slot.prefilled()  # its first token is out: its prompt no longer counts as queued
                if all(s.finish_reason for s in samples):
                    outcome = ""
                yield chunk
        except asyncio.CancelledError:
            if not inflight.aborted:
                raise  # the client cancelled: nothing more to send
            log.info("aborted by an Abort call")
            outcome = ""  # each unfinished sample ends with an abort chunk, counted as a finish reason
            for chunk in self._abort_chunks(samples):
                yield chunk
        except UpstreamError as exc:
            if exc.overloaded:
                outcome = ""
                await self._shed(context, "workers_full", str(exc))
            outcome = "error"
            log.warning("request failed: %s: %s", exc.code.name, exc)
            await abort_code(context, exc.code, str(exc))
        finally:
            self.mean_e2e_s += 0.1 * (time.perf_counter() - samples[0].started - self.mean_e2e_s)
            del self.active[key]
            slot.close()
            self.inflight -= 1
            INFLIGHT.dec()
            if outcome:
                record_unfinished(self.config.model_name, outcome)

    async def Complete(self, request, context):
        choices: dict[int, router_pb2.Choice] = {}
        last = None
        async for chunk in self.Generate(request, context):
            choice = choices.setdefault(chunk.index, router_pb2.Choice(index=chunk.index))
            choice.token_ids.extend(chunk.token_ids)
            choice.text += chunk.text
            choice.logprobs.extend(chunk.logprobs)
            if chunk.finish_reason:
                choice.finish_reason, choice.stop_reason = chunk.finish_reason, chunk.stop_reason
                choice.timings.CopyFrom(chunk.timings)
            last = chunk
        ordered = [choices[i] for i in sorted(choices)]
        first = ordered[0]
        return router_pb2.GenerateResponse(
            request_id=last.request_id, token_ids=first.token_ids, text=first.text, finish_reason=first.finish_reason,
            stop_reason=first.stop_reason, usage=last.usage, timings=first.timings, logprobs=first.logprobs,
            choices=ordered)

    async def Abort(self, request, context):
        """Aborts the caller's tenant's requests; another tenant's ids are not found, as unknown ones are."""
        if len(request.request_ids) > MAX_ABORT_IDS:
            await abort_code(context, grpc.StatusCode.INVALID_ARGUMENT, f"request_ids: at most {MAX_ABORT_IDS}")
        tenant = current_tenant.get()
        aborted, not_found = [], []
        for request_id in request.request_ids:
            inflight = self.active.get((tenant, request_id))
            if inflight is None or inflight.aborted:
                not_found.append(request_id)
            else:
                inflight.abort()
                aborted.append(request_id)
        return router_pb2.AbortResponse(aborted=aborted, not_found=not_found)

    # --- the request path -------------------------------------------------------------------------------------------
    async def _serve(self, samples: list[RequestState], request_id: str, ids: list[int],
                     sampling: common_pb2.SamplingParams, salt: str, context, track):
        """Prefill once, then decode each sample; the sampling message goes to the workers as the client sent it
        (already checked), except that each decode request carries its own sample's parameters (n > 1). The workers
        see ``request_id`` (the internal id) and name blocks under ``salt`` (the tenant's). ``track`` is shown every
        upstream call (Inflight.track)."""
        n = len(samples)
        if self.config.colocated:  # each decode worker prefills for itself: the prompt is computed once per sample
            requests = {i: decode_pb2.DecodeRequest(request_id=request_id, prompt_ids=ids, colocated=True,
                                                    sampling=sample_sampling(sampling, i, n)) for i in range(n)}
            async for chunk in self._relay_all(samples, requests, context, track):
                yield chunk
            return
        keys = block_keys(ids, self.config.fingerprint, self.config.block_tokens, self.config.kv_dtype, salt=salt)
        # the router creates the request's lease and holds it (and a copy per extra sample) until the request ends,
        # e.g. cancelled between prefill and decode; prefill stores under it, decode releases it once it has the KV
        async with contextlib.AsyncExitStack() as leases:
            lease, reply, prefetched_on, prefetch = await self._prefill(leases, request_id, ids, keys, sampling, salt,
                                                                        n, context, track)
            try:
                firsts = [reply.first, *reply.forks]
                for state in samples:
                    state.took_prefill(reply)
                samples[0].lease = lease  # sample 0 decodes under prefill's lease, the others under copies
                for i in range(1, n):
                    if not firsts[i].finish_reason:
                        samples[i].lease = await leases.enter_async_context(await sample_lease(lease, reply.kv, i))
                for i, first in enumerate(firsts):
                    yield self._chunk(samples, i, first)
                requests = {}
                for i, first in enumerate(firsts):
                    if not first.finish_reason:
                        handle = under_lease(reply.kv, samples[i].lease.lease_id)
                        requests[i] = decode_pb2.DecodeRequest(request_id=request_id, prompt_ids=ids, kv=handle,
                                                               first_token=first.token_ids[0],
                                                               sampling=sample_sampling(sampling, i, n))
                async for chunk in self._relay_all(samples, requests, context, track, prefetched_on):
                    yield chunk
            finally:
                if prefetch is not None:
                    prefetch.cancel()  # no-op once done; else the worker drops a copy nobody will take

    async def _prefill(self, leases: contextlib.AsyncExitStack, request_id: str, ids: list[int], keys: list[str],
                       sampling: common_pb2.SamplingParams, salt: str, n: int, context, track):
        """Make the request's lease (held in ``leases``), start a decode worker prefetching (one sample) and prefill
        under the lease, kept renewed meanwhile. A lease a kvstore lost (it restarted after the lease was made) is made
        again and the prompt prefilled once more, without the prefetch, which waits under the first lease's name.
        Returns (lease, prefill's reply, the prefetching worker or "", the prefetch call or None)."""
        attempts = 0
        while True:
            attempts += 1
            lease = await leases.enter_async_context(await request_lease(self.kv_client, self.config.lease_ttl_s,
                                                                         self.prefill.retry))
            prefill_request = prefill_pb2.PrefillRequest(request_id=request_id, token_ids=ids, sampling=sampling,
                                                         lease_ttl_s=lease.ttl_s, lease_id=lease.lease_id,
                                                         cache_salt=salt)
            prefetched_on, prefetch = (self._prefetch(request_id, ids, keys, lease, context, track)
                                       if n == 1 and attempts == 1 else ("", None))
            try:
                async with lease.keep(renew_now=False):  # a prefill that waits in a queue past the lease's TTL
                    reply = await prefill_with_retries(self.prefill, self.policy, prefill_request, keys,
                                                       self.config.prefill_retries, context.time_remaining(), track)
                return lease, reply, prefetched_on, prefetch
            except BaseException as exc:
                if prefetch is not None:
                    prefetch.cancel()
                if not isinstance(exc, LeaseLost) or attempts == self.prefill.retry.lease_attempts:
                    raise
                RETRIES.labels("lease").inc()

    def _prefetch(self, request_id: str, ids: list[int], keys: list[str], lease: KVLease, context,
                  track) -> tuple[str, grpc.aio.Call | None]:
        """Start a decode worker importing the KV prefill is about to store (block by block, as each chunk of the
        prompt is computed), so that little of the hand-off is left when prefill returns; returns that worker."""
        if not self.config.decode_prefetch:
            return "", None
        c = self.config
        remaining = context.time_remaining()
        handle = build_handle(handle_keys(keys, lease.lease_id, len(ids), c.block_tokens), len(ids), c.block_tokens,
                              lease.lease_id, lease.ttl_s, c.fingerprint, c.kv_dtype, wait_s_within(remaining))
        return start_prefetch(self.decode, decode_pb2.PrefetchRequest(request_id=request_id, kv=handle), remaining,
                              track)

    async def _relay_all(self, samples: list[RequestState], requests: dict[int, decode_pb2.DecodeRequest], context,
                         track, prefer: str = ""):
        """Every sample's decode stream, merged as chunks arrive. A chunk is counted when it is passed on (not when
        it arrives), so that usage after an abort counts exactly the tokens the client got. ``prefer``: the decode
        worker that prefetched the KV (one sample)."""
        async def one(i: int, request: decode_pb2.DecodeRequest):
            async for chunk in resumable_decode(self.decode, samples[i], request, self.config.decode_resumes,
                                                context.time_remaining, track, prefer):
                yield i, chunk

        async for i, chunk in merge([one(i, r) for i, r in requests.items()]):
            samples[i].hand_over_lease()  # its decode worker has the KV now
            samples[i].took_decode_timings(chunk)
            yield self._chunk(samples, i, chunk.step)

    def _chunk(self, samples: list[RequestState], index: int, step: common_pb2.TokenStep) -> router_pb2.GenerateChunk:
        state = samples[index]
        state.took_tokens(step.token_ids)
        chunk = router_pb2.GenerateChunk(request_id=state.request_id, token_ids=step.token_ids, text=step.text,
                                         finish_reason=step.finish_reason, stop_reason=step.stop_reason,
                                         logprobs=self.pieces.spell(step.logprobs), index=index)
        if step.finish_reason:
            self._finish(samples, index, chunk)
        return chunk

    def _finish(self, samples: list[RequestState], index: int, chunk: router_pb2.GenerateChunk) -> None:
        """A sample's last chunk: its timings; the request's usage on the stream's last chunk."""
        state = samples[index]
        state.finish_reason = chunk.finish_reason
        chunk.timings.CopyFrom(state.timings())
        if all(s.finish_reason for s in samples):
            chunk.usage.CopyFrom(total_usage(samples))
        record_finished(self.config.model_name, chunk.finish_reason, state.usage(), chunk.timings,
                        *state.queue_before_first_token(), count_prompt=index == 0)

    def _abort_chunks(self, samples: list[RequestState]) -> list[router_pb2.GenerateChunk]:
        """The last chunk of every sample still running when the request was aborted."""
        out = []
        for i, state in enumerate(samples):
            if not state.finish_reason:
                chunk = router_pb2.GenerateChunk(request_id=state.request_id, finish_reason="abort", index=i)
                self._finish(samples, i, chunk)
                out.append(chunk)
        return out


def sample_sampling(sampling: common_pb2.SamplingParams, index: int, n: int) -> common_pb2.SamplingParams:
    """The sampling message of sample ``index`` (one sample, seed + index); unchanged for n = 1."""
    if n == 1:
        return sampling
    return sampling_to_proto(sample_params(sampling_from_proto(sampling), index))
