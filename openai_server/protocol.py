"""Request bodies as OpenAI (and vLLM's extras) name them, parsed strictly: a wrong type is a 400 naming the field.

Fields pdserve cannot serve yet are accepted only at their neutral value (e.g. ``best_of`` = 1); anything else is a
400 that names the field, so a client never silently gets less than it asked for (openai_server/vllm_fields.py lists
them). Unknown fields are ignored, as OpenAI and vLLM do, and logged once per name.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pdserve.openai_server.errors import ApiError
from pdserve.openai_server.structured import ResponseFormat, StructuredOutputs, spec_fields
from pdserve.openai_server.vllm_fields import check_extras

UInt32 = Annotated[int, Field(ge=0, le=2**32 - 1)]
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Seed = Annotated[int, Field(ge=0, lt=2**63)]
TokenIds = Annotated[list[UInt32], Field(min_length=1)]


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class StreamOptions(Body):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class SamplingFields(Body):
    """What completions and chat share: OpenAI's sampling fields plus vLLM's extras."""

    model_config = ConfigDict(extra="allow", strict=True)  # the extras are checked (check_supported), not dropped
    CHAT: ClassVar[bool] = False

    model: str = ""
    max_tokens: UInt32 | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: UInt32 | None = None  # the router checks the range (1..16)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: Seed | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # vLLM's extras
    top_k: Int32 | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: UInt32 = 0
    ignore_eos: bool = False
    stop_token_ids: list[UInt32] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    cache_salt: str | None = None  # prefix caching only among requests of the caller's tenant with the same salt
    allowed_token_ids: list[UInt32] | None = None
    bad_words: list[str] | None = None
    truncate_prompt_tokens: Annotated[int, Field(ge=1)] | None = None  # keep the prompt's last k tokens
    # structured outputs: vLLM's older spellings and its structured_outputs object (OpenAI's response_format: chat)
    guided_json: str | dict[str, Any] | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    structured_outputs: StructuredOutputs | None = None
    # pdserve's own: finish with reason "repetition" when the output loops (0 = off); finish with reason "complete"
    # when the model's own check at a sentence boundary gives P(yes) >= stop_when_complete (0 = off)
    repetition_max_repeats: UInt32 = 0
    stop_when_complete: float = 0.0
    stop_when_complete_interval: UInt32 | None = None

    def check_supported(self) -> None:
        """400 for what pdserve cannot serve yet (the README lists these)."""
        if self.logit_bias:
            raise ApiError.invalid("logit_bias", "is not supported")
        if not self.skip_special_tokens:
            raise ApiError.invalid("skip_special_tokens", "only true is supported")
        if self.stream_options is not None and not self.stream:
            raise ApiError.invalid("stream_options", "is only allowed when stream is true")
        if self.stream_options is not None and self.stream_options.continuous_usage_stats:
            raise ApiError.invalid("stream_options.continuous_usage_stats", "is not supported by pdserve")
        check_extras(self.model_extra, self.CHAT)
        self.spec()  # a second structured output, or one malformed, is refused here

    def spec(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The structured output asked for: SamplingParams fields, and each one's name in this request."""
        return spec_fields(self.guided_json, self.guided_regex, self.guided_choice, self.guided_grammar,
                           self.structured_outputs, getattr(self, "response_format", None))
    def max_tokens_field(self) -> str:
        return "max_tokens"

    def sampling(self) -> dict[str, Any]:
        """Keyword arguments for the router client; unset fields keep the router's defaults."""
        out: dict[str, Any] = {"max_tokens": self.max_output_tokens(), "logprobs": self.top_logprobs_wanted()}
        for name in ("n", "temperature", "top_p", "seed", "presence_penalty", "frequency_penalty", "top_k", "min_p",
                     "repetition_penalty", "stop_token_ids", "stop_when_complete_interval"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.stop is not None:
            out["stop"] = [self.stop] if isinstance(self.stop, str) else self.stop
        if self.cache_salt is not None:
            out["cache_salt"] = self.cache_salt
        if self.allowed_token_ids:
            out["allowed_token_ids"] = self.allowed_token_ids
        if self.bad_words:
            out["bad_words"] = self.bad_words
        out.update(self.spec()[0])
        out.update(min_tokens=self.min_tokens, ignore_eos=self.ignore_eos,
                   include_stop_str_in_output=self.include_stop_str_in_output,
                   repetition_max_repeats=self.repetition_max_repeats, stop_when_complete=self.stop_when_complete)
        return out

    def max_output_tokens(self) -> int | None:
        return self.max_tokens

    def top_logprobs_wanted(self) -> int | None:
        """The router's ``logprobs``: None for none, else how many alternatives per token."""
        return None

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionRequest(SamplingFields):
    prompt: str | TokenIds | list[str] | list[TokenIds]
    logprobs: UInt32 | None = None  # alternatives per token (OpenAI allows up to 5, pdserve as vLLM up to 20)
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None

    def check_supported(self) -> None:
        super().check_supported()
        if self.echo and self.logprobs is not None:
            raise ApiError.invalid("echo", "with logprobs needs the prompt's log-probabilities, which pdserve does "
                                           "not compute; leave one of them unset")
        if self.best_of not in (None, 1):
            raise ApiError.invalid("best_of", "only best_of = 1 is supported")
        if self.suffix:
            raise ApiError.invalid("suffix", "is not supported")

    def top_logprobs_wanted(self) -> int | None:
        return self.logprobs

    def prompt_kwargs(self) -> dict[str, Any]:
        """One prompt as the router client takes it: ``prompt=`` text or ``token_ids=``."""
        p = self.prompt
        if isinstance(p, list) and p and isinstance(p[0], (str, list)):  # a batch of prompts
            if len(p) != 1:
                raise ApiError.invalid("prompt", f"a batch of {len(p)} prompts is not supported; send one per request")
            p = p[0]
        if isinstance(p, str):
            return {"prompt": p}
        if not p:
            raise ApiError.invalid("prompt", "is empty")
        return {"token_ids": p}


class TextPart(Body):
    type: str
    text: str | None = None


class ChatMessage(Body):
    role: str
    content: str | list[TextPart] | None = None

    def text(self, index: int) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        for j, part in enumerate(self.content):
            if part.type != "text" or part.text is None:
                raise ApiError.invalid(f"messages[{index}].content[{j}]", "only text parts are supported")
        return "".join(part.text for part in self.content)


def chat_messages(messages: list[ChatMessage]) -> list[dict[str, str]]:
    """Messages as the router takes them; OpenAI's ``developer`` role is a system message."""
    return [{"role": "system" if m.role == "developer" else m.role, "content": m.text(i)}
            for i, m in enumerate(messages)]


class ChatCompletionRequest(SamplingFields):
    CHAT: ClassVar[bool] = True

    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: UInt32 | None = None
    logprobs: bool = False
    top_logprobs: UInt32 | None = None  # alternatives per token, 0..20 (needs logprobs)
    tools: list[Any] | None = None
    tool_choice: Any = None
    response_format: ResponseFormat | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False  # the prompt ends inside the last (assistant) message: the answer goes on

    def check_supported(self) -> None:
        super().check_supported()
        if self.continue_final_message and self.add_generation_prompt:  # vLLM's rule: one or the other
            raise ApiError.invalid("continue_final_message", "needs add_generation_prompt set to false")
        if self.continue_final_message and self.messages[-1].role != "assistant":
            raise ApiError.invalid("continue_final_message", "needs the last message to be the assistant's")
        if self.top_logprobs is not None and not self.logprobs:
            raise ApiError.invalid("top_logprobs", "needs logprobs set to true")
        if self.tools:
            raise ApiError.invalid("tools", "tool calling is not supported")
        if self.tool_choice not in (None, "none"):
            raise ApiError.invalid("tool_choice", "tool calling is not supported")

    def max_tokens_field(self) -> str:
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"

    def top_logprobs_wanted(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def max_output_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def chat(self) -> list[dict[str, str]]:
        return chat_messages(self.messages)


class TokenizeRequest(Body):
    model: str = ""
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool | None = None
    return_token_strs: bool = False


class DetokenizeRequest(Body):
    model: str = ""
    tokens: list[UInt32]


def _param(loc: tuple) -> str:
    """A pydantic error location as a request path, e.g. ``messages[0].content``; union member tags dropped."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "[" in part or part in ("str", "int", "float", "bool", "list", "dict", "none"):
            continue
        else:
            path += f".{part}" if path else part
    return path


def parse(model: type[Body], raw: bytes) -> Body:
    """The request body as ``model``, or an ApiError (400) naming the first field at fault."""
    try:
        return model.model_validate_json(raw or b"")
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        if first["type"] == "json_invalid":
            raise ApiError(400, f"the body is not valid JSON: {first['msg']}") from None
        if first["type"] == "model_type" and not first["loc"]:
            raise ApiError(400, "the body must be a JSON object") from None
        param = _param(first["loc"])
        messages = list(dict.fromkeys(e["msg"] for e in errors if _param(e["loc"]) == param))
        raise ApiError.invalid(param, "; ".join(messages)) from None

