"""Errors as OpenAI's clients expect them: ``{"error": {"message", "type", "param", "code"}}`` with a matching status.

Router errors arrive as gRPC status codes; an invalid field is named by the rich status's BadRequest.FieldViolation
(or, from a peer without it, by the ``field: `` the details start with) and becomes ``param``, renamed to the OpenAI
request's spelling.
"""

from __future__ import annotations

import grpc
from fastapi.responses import JSONResponse

from pdserve.common.redact import without_addresses
from pdserve.common.status import violated_field

HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,  # e.g. an X-Request-Id already in flight
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,  # the client closed the request (nginx's convention)
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}
# failures of the stack's plumbing rather than of the request: the router's name the role that failed ("prefill: ...")
PLUMBING = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL,
            grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS)
ROLE_PREFIXES = ("router:", "prefill:", "decode:", "kvstore:")
ERROR_TYPE = {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error",
              503: "service_unavailable_error", 504: "timeout_error"}


class ApiError(Exception):
    """An error answered to the HTTP client; ``param`` names the request field at fault."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    @classmethod
    def invalid(cls, param: str, message: str) -> "ApiError":
        return cls(400, f"{param}: {message}", param)


def from_grpc(err: grpc.aio.AioRpcError, rename=lambda field: field) -> ApiError:
    """The HTTP error for a failed router call; ``rename`` maps router field names to the request's."""
    status = HTTP_STATUS.get(err.code(), 500)
    details = without_addresses(err.details() or err.code().name)
    if err.code() in PLUMBING and not details.startswith(ROLE_PREFIXES):
        details = f"router: {details}"  # the router's own failure, or the edge's call to it (gRPC's text)
    field = violated_field(err) if status in (400, 409) else None
    param = None
    if field is not None:
        param = rename(field)
        details = f"{param}: {details.removeprefix(field + ': ')}"
    return ApiError(status, details, param, err.code().name.lower())


def error_response(exc: ApiError, retry_after_s: int) -> JSONResponse:
    kind = ERROR_TYPE.get(exc.status, "server_error" if exc.status >= 500 else "invalid_request_error")
    body = {"error": {"message": exc.message, "type": kind, "param": exc.param, "code": exc.code}}
    headers = {"Retry-After": str(retry_after_s)} if exc.status == 429 else None
    return JSONResponse(body, status_code=exc.status, headers=headers)


def renamer(chat: bool, max_tokens_field: str, spec_names: dict[str, str] | None = None):
    """Router field names -> the request's (``prompt.chat.messages[0].role`` -> ``messages[0].role``)."""
    def rename(field: str) -> str:
        if spec_names and field in spec_names:
            return spec_names[field]
        if field == "max_tokens":
            return max_tokens_field
        if field.startswith("prompt.chat.messages"):
            return field[len("prompt.chat."):]
        if field.startswith("prompt"):
            return "messages" if chat else "prompt"
        if field == "request_id":
            return "x-request-id"
        if field == "logprobs" and chat:
            return "top_logprobs"
        return field
    return rename
