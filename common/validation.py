"""Request checks shared by the router and the workers. Each raises InvalidParameter naming the field and limit."""

from __future__ import annotations

import grpc

from engine.params import InvalidParameter, SamplingParams

MAX_REQUEST_ID_CHARS = 128


def check_request_id(request_id: str) -> str:
    # ASCII: the id travels on as x-request-id metadata, and gRPC metadata values are ASCII
    if not request_id or len(request_id) > MAX_REQUEST_ID_CHARS or not (request_id.isascii() and request_id.isprintable()):
        raise InvalidParameter("request_id", f"must be 1..{MAX_REQUEST_ID_CHARS} printable ASCII characters")
    return request_id


def check_token_ids(ids, vocab_size: int, field: str = "token_ids") -> list[int]:
    ids = list(ids)
    if not ids:
        raise InvalidParameter(field, "prompt is empty")
    bad = next((t for t in ids if t >= vocab_size), None)
    if bad is not None:
        raise InvalidParameter(field, f"token id {bad} is outside the vocabulary (0..{vocab_size - 1})")
    return ids


def check_fits_context(prompt_len: int, params: SamplingParams, context_length: int) -> None:
    if prompt_len >= context_length:
        raise InvalidParameter("prompt", f"{prompt_len} tokens leave no room in the context length {context_length}")
    if prompt_len + params.max_tokens > context_length:
        raise InvalidParameter(
            "max_tokens", f"prompt ({prompt_len} tokens) + max_tokens ({params.max_tokens}) exceeds the context "
                          f"length {context_length}; at most {context_length - prompt_len} fits")


async def abort_invalid(context: grpc.aio.ServicerContext, exc: InvalidParameter) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
