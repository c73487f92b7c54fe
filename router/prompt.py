"""What the router checks of a client's request, and how a prompt (text, chat messages or ids) becomes token ids."""

from __future__ import annotations

from pdserve.common.convert import sampling_from_proto
from pdserve.common.validation import check_request_id
from pdserve.engine.params import InvalidParameter, SamplingParams, validate_request
from pdserve.engine.tokenizer import GGUFTokenizer
from pdserve.v1 import router_pb2

MAX_PROMPT_CHARS = 1_000_000
MAX_MESSAGES = 1024
CHAT_ROLES = ("system", "user", "assistant", "tool")


class RequestValidator:
    def __init__(self, tokenizer: GGUFTokenizer, model_name: str, context_length: int) -> None:
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.context_length = context_length

    def validate(self, request: router_pb2.GenerateRequest) -> tuple[list[int], SamplingParams]:
        """Prompt ids and sampling parameters, or InvalidParameter naming the field and the limit."""
        if request.request_id:
            check_request_id(request.request_id)
        if request.model and request.model != self.model_name:
            raise InvalidParameter("model", f"unknown model {request.model!r}; this router serves {self.model_name!r}")
        ids_field = "prompt.token_ids" if request.WhichOneof("prompt") == "token_ids" else "prompt"
        return validate_request(self.prompt_ids(request), sampling_from_proto(request.sampling),
                                self.tokenizer.vocab_size, self.context_length, ids_field)

    def prompt_ids(self, request: router_pb2.GenerateRequest) -> list[int]:
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
            return self._chat_ids(request.chat.messages)
        return list(request.token_ids.ids)

    def _chat_ids(self, messages) -> list[int]:
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
