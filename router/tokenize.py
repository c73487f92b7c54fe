"""Tokenize / Detokenize RPCs: clients that send token ids need not rebuild the tokenizer or the chat template.

A mixin of :class:`router.service.RouterService`: it uses the service's ``tokenizer``, ``config`` and its prompt
validation (``validator.prompt_ids``), so a prompt tokenizes here exactly as ``Generate`` tokenizes it.
"""

from __future__ import annotations

from pdserve.common.status import abort_invalid
from pdserve.engine.params import InvalidParameter, check_token_ids
from pdserve.v1 import router_pb2

MAX_DETOKENIZE_IDS = 1_000_000


class TokenizeRPCs:
    def _check_model(self, model: str) -> None:
        if model and model != self.config.model_name:
            raise InvalidParameter("model", f"unknown model {model!r}; this router serves {self.config.model_name!r}")

    def _tokenize(self, request: router_pb2.TokenizeRequest) -> list[int]:
        self._check_model(request.model)
        kind = request.WhichOneof("prompt")
        as_generate = router_pb2.GenerateRequest()
        if kind == "text":
            as_generate.text = request.text
        elif kind == "chat":
            as_generate.chat.CopyFrom(request.chat)
        ids = self.validator.prompt_ids(as_generate)  # Generate's checks (sizes, roles) and its tokenization
        if kind == "text" and request.HasField("add_special_tokens"):
            ids = self.tokenizer.encode(request.text, add_bos=request.add_special_tokens)
        elif kind == "chat" and request.HasField("add_generation_prompt") and not request.add_generation_prompt:
            messages = [{"role": m.role, "content": m.content} for m in request.chat.messages]
            ids = self.tokenizer.encode(self.tokenizer.render_chat(messages, add_generation_prompt=False),
                                        add_bos=False)
        return ids

    async def Tokenize(self, request, context):
        try:
            ids = self._tokenize(request)
        except InvalidParameter as exc:
            await abort_invalid(context, exc)
        return router_pb2.TokenizeResponse(token_ids=ids, count=len(ids), context_length=self.config.context_length,
                                           tokens=[self.tokenizer.tokens[i] for i in ids])

    async def Detokenize(self, request, context):
        try:
            self._check_model(request.model)
            if len(request.token_ids) > MAX_DETOKENIZE_IDS:
                raise InvalidParameter("token_ids", f"at most {MAX_DETOKENIZE_IDS} ids")
            ids = check_token_ids(request.token_ids, self.tokenizer.vocab_size) if request.token_ids else []
        except InvalidParameter as exc:
            await abort_invalid(context, exc)
        skip = request.skip_special_tokens if request.HasField("skip_special_tokens") else True
        return router_pb2.DetokenizeResponse(text=self.tokenizer.decode(ids, skip_special=skip))
