"""Bearer-token auth on the router's public API.

Every call to a ``pdserve.v1.Router`` method must carry ``authorization: Bearer <token>`` metadata; a missing or
wrong token is answered UNAUTHENTICATED by the interceptor, before the handler (validation, tokenizing, any worker)
runs. Health and reflection stay open for probes. The token is read from a file (``--auth-token-file``) or
``PDSERVE_AUTH_TOKEN``, compared in constant time, and never logged.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path

import grpc

from pdserve.router.metrics import REJECTED

PROTECTED_PREFIX = "/pdserve.v1.Router/"
TOKEN_ENV = "PDSERVE_AUTH_TOKEN"


def load_token(path: str | None) -> str | None:
    """The token from ``path`` (surrounding whitespace dropped), else from $PDSERVE_AUTH_TOKEN, else None (no auth)."""
    if path:
        try:
            token = Path(path).read_text().strip()
        except OSError as exc:
            raise SystemExit(f"--auth-token-file: cannot read {path}: {exc.strerror}") from None
        if not token:
            raise SystemExit(f"--auth-token-file: {path} is empty")
        return token
    return os.environ.get(TOKEN_ENV) or None


class BearerAuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def _authorized(self, metadata) -> bool:
        given = next((v for k, v in metadata or () if k == "authorization"), "")
        return hmac.compare_digest(given.encode() if isinstance(given, str) else given, self._expected)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if (handler is None or not handler_call_details.method.startswith(PROTECTED_PREFIX)
                or self._authorized(handler_call_details.invocation_metadata)):
            return handler
        REJECTED.labels("unauthenticated").inc()
        return _refusal(handler)


MESSAGE = "missing or invalid bearer token (send 'authorization: Bearer <token>' metadata)"


def _refusal(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that answers UNAUTHENTICATED without reading the request."""
    async def unary(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, MESSAGE)

    async def stream(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, MESSAGE)
        yield  # pragma: no cover (makes this an async generator)

    kw = dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary, **kw)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(stream, **kw)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary, **kw)
    return grpc.stream_stream_rpc_method_handler(stream, **kw)
