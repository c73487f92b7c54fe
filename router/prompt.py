"""What the router checks of a client's request, and how a prompt (text, chat messages or ids) becomes token ids.

Sizes are checked first, on the event loop, where they cost nothing: a prompt with more characters than could fit the
context is refused before anything reads it. Rendering the chat template and tokenizing then run in a small thread
pool (:meth:`RequestValidator.off_loop`), so that one long prompt does not stall every other stream the router relays;
the pool takes at most ``max_pending`` jobs at a time, and more are refused as overload. Waiting jobs take their
turns round-robin by tenant (``router/fair_pool.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pdserve.common.convert import sampling_from_proto
from pdserve.common.validation import check_request_id
from pdserve.engine.params import InvalidParameter, SamplingParams, validate_request
from pdserve.engine.text.tokenizer import GGUFTokenizer
from pdserve.router.auth import current_tenant
from pdserve.router.fair_pool import FairPool
from pdserve.v1 import router_pb2

MAX_PROMPT_CHARS = 1_000_000  # characters of one prompt, all its messages together, at most (whatever the context)
# Characters per token a prompt that fits the context may average. Prose averages about 4 with byte-level BPE
# vocabularies such as SmolLM2's, code fewer; the longest vocabulary entry (SmolLM2: dozens of bytes) would admit
# prompts ten times longer than any that can fit, each tokenized in full before the length check refuses it.
MAX_CHARS_PER_TOKEN = 8
MAX_MESSAGES = 1024
CHAT_ROLES = ("system", "user", "assistant", "tool")
DEFAULT_TOKENIZER_WORKERS = 2
T = TypeVar("T")


class TokenizerBusy(Exception):
    """As many prompts are waiting for the tokenizer pool as the router allows."""


def prompt_char_limit(tokenizer: GGUFTokenizer, context_length: int, cap: int = MAX_PROMPT_CHARS,
                      chars_per_token: int = MAX_CHARS_PER_TOKEN) -> int:
    """The most characters a prompt may have: the context times the characters a token stands for, at most the
    longest vocabulary entry's bytes (every character is at least one byte) and at most ``chars_per_token`` (a
    realistic average). Never more than ``cap``."""
    longest = max(len(tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size))
    return min(cap, context_length * min(longest, chars_per_token))


class RequestValidator:
    def __init__(self, tokenizer: GGUFTokenizer, model_name: str, context_length: int,
                 max_chars: int = MAX_PROMPT_CHARS, workers: int = DEFAULT_TOKENIZER_WORKERS,
                 max_pending: int = 512) -> None:
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.context_length = context_length
        self.max_chars = prompt_char_limit(tokenizer, context_length, max_chars)
        self.pool = FairPool(workers)
        self.max_pending = max_pending
        self.pending = 0

    async def off_loop(self, fn: Callable[..., T], *args) -> T:
        """``fn(*args)`` in the tokenizer pool, in the caller's tenant's turn; TokenizerBusy when ``max_pending`` calls
        are already queued there."""
        if self.pending >= self.max_pending:
            raise TokenizerBusy(f"tokenizer: {self.pending} prompts are waiting to be tokenized")
        self.pending += 1
        try:
            return await self.pool.run(current_tenant.get(), fn, *args)
        finally:
            self.pending -= 1

    async def validate(self, request: router_pb2.GenerateRequest) -> tuple[list[int], SamplingParams]:
        """Prompt ids and sampling parameters, or InvalidParameter naming the field and the limit."""
        if request.request_id:
            check_request_id(request.request_id)
        if request.model and request.model != self.model_name:
            raise InvalidParameter("model", f"unknown model {request.model!r}; this router serves {self.model_name!r}")
        self.check_size(request)
        params = sampling_from_proto(request.sampling)
        ids = await self.off_loop(self.prompt_ids, request) if request.WhichOneof("prompt") != "token_ids" else \
            self.prompt_ids(request)
        ids_field = "prompt.token_ids" if request.WhichOneof("prompt") == "token_ids" else "prompt"
        return validate_request(ids, params, self.tokenizer.vocab_size, self.context_length, ids_field)

    def check_size(self, request) -> None:
        """The prompt's shape and size (a GenerateRequest or a TokenizeRequest): cheap, before any tokenizing."""
        kind = request.WhichOneof("prompt")
        if kind is None:
            raise InvalidParameter("prompt", "one of text, chat or token_ids is required")
        if kind == "text":
            if not request.text:
                raise InvalidParameter("prompt.text", "prompt is empty")
            self._check_chars("prompt.text", len(request.text))
        elif kind == "chat":
            messages = request.chat.messages
            if not messages:
                raise InvalidParameter("prompt.chat.messages", "at least one message is required")
            if len(messages) > MAX_MESSAGES:
                raise InvalidParameter("prompt.chat.messages", f"at most {MAX_MESSAGES} messages")
            for i, m in enumerate(messages):
                if m.role not in CHAT_ROLES:
                    raise InvalidParameter(f"prompt.chat.messages[{i}].role",
                                           f"{m.role!r} is not one of {', '.join(CHAT_ROLES)}")
            self._check_chars("prompt.chat.messages", sum(len(m.content) for m in messages))

    def _check_chars(self, field: str, chars: int) -> None:
        if chars > self.max_chars:
            raise InvalidParameter(field, f"{chars} characters; at most {self.max_chars} (no more can fit the "
                                          f"{self.context_length}-token context)")

    def prompt_ids(self, request) -> list[int]:
        """Token ids of a request whose size passed :meth:`check_size` (tokenizing: call it through :meth:`off_loop`)."""
        kind = request.WhichOneof("prompt")
        if kind == "text":
            return self.tokenizer.encode(request.text)
        if kind == "chat":
            try:
                return self.tokenizer.encode_chat([{"role": m.role, "content": m.content}
                                                   for m in request.chat.messages])
            except ValueError as exc:
                raise InvalidParameter("prompt.chat", str(exc)) from exc
        return list(request.token_ids.ids)
