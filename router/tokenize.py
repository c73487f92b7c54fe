"""Tokenize / Detokenize RPCs: clients that send token ids need not rebuild the tokenizer or the chat template.

A mixin of :class:`router.service.RouterService`: it uses the service's ``tokenizer``, ``config`` and its prompt
validation (``validator.check_size``, ``validator.prompt_ids``), so a prompt tokenizes here exactly as ``Generate``
tokenizes it, off the event loop as there.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from pdserve.common.status import abort_exhausted, abort_invalid
from pdserve.engine.params import InvalidParameter, check_token_ids
from pdserve.router.auth import current_tenant
from pdserve.router.prompt import TokenizerBusy
from pdserve.router.tenancy import TenantLimitExceeded
from pdserve.v1 import router_pb2

MAX_DETOKENIZE_IDS = 1_000_000


class TokenizeRPCs:
    @asynccontextmanager
    async def _tenant_slot(self, context):
        """One of the caller's tenant's in-flight slots for this call (RESOURCE_EXHAUSTED at its limit)."""
        try:
            slot = self.limits.admit(current_tenant.get())
        except TenantLimitExceeded as exc:
            await abort_exhausted(context, str(exc))
        try:
            yield
        finally:
            slot.close()

    def _check_model(self, model: str) -> None:
        if model and model != self.config.model_name:
            raise InvalidParameter("model", f"unknown model {model!r}; this router serves {self.config.model_name!r}")

    def _tokenize(self, request: router_pb2.TokenizeRequest) -> list[int]:
        """Token ids of a request whose size was checked (runs in the tokenizer pool)."""
        kind = request.WhichOneof("prompt")
        if kind == "text":
            add_bos = request.add_special_tokens if request.HasField("add_special_tokens") else None
            return self.tokenizer.encode(request.text, add_bos=add_bos)
        if request.HasField("add_generation_prompt") and not request.add_generation_prompt:
            messages = [{"role": m.role, "content": m.content} for m in request.chat.messages]
            return self.tokenizer.encode(self.tokenizer.render_chat(messages, add_generation_prompt=False),
                                         add_bos=False)
        as_generate = router_pb2.GenerateRequest()
        as_generate.chat.CopyFrom(request.chat)
        return self.validator.prompt_ids(as_generate)  # Generate's tokenization

    async def Tokenize(self, request, context):
        async with self._tenant_slot(context):
            return await self._tokenize_call(request, context)

    async def _tokenize_call(self, request, context):
        try:
            self._check_model(request.model)
            self.validator.check_size(request)  # Generate's checks (sizes, roles), before any tokenizing
            ids = await self.validator.off_loop(self._tokenize, request)
        except InvalidParameter as exc:
            await abort_invalid(context, exc)
        except TokenizerBusy as exc:
            await abort_exhausted(context, str(exc))
        return router_pb2.TokenizeResponse(token_ids=ids, count=len(ids), context_length=self.config.context_length,
                                           tokens=[self.tokenizer.tokens[i] for i in ids])

    async def Detokenize(self, request, context):
        async with self._tenant_slot(context):
            return await self._detokenize_call(request, context)

    async def _detokenize_call(self, request, context):
        try:
            self._check_model(request.model)
            if len(request.token_ids) > MAX_DETOKENIZE_IDS:
                raise InvalidParameter("token_ids", f"at most {MAX_DETOKENIZE_IDS} ids")
            ids = check_token_ids(request.token_ids, self.tokenizer.vocab_size) if request.token_ids else []
        except InvalidParameter as exc:
            await abort_invalid(context, exc)
        skip = request.skip_special_tokens if request.HasField("skip_special_tokens") else True
        try:
            text = await self.validator.off_loop(self.tokenizer.decode, ids, skip)
        except TokenizerBusy as exc:
            await abort_exhausted(context, str(exc))
        return router_pb2.DetokenizeResponse(text=text)
