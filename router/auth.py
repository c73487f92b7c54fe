"""Bearer tokens on the router's public API, each mapped to its tenant (``common/tenants.py``).

Every call to a ``pdserve.v1.Router`` method must carry ``authorization: Bearer <token>`` metadata when tokens are
configured. The token travels in the call's headers, so the interceptor decides from them alone: a missing or unknown
token is answered UNAUTHENTICATED by a handler that takes its request as a stream and never reads it. gRPC then never
asks the transport for the request message, HTTP/2 flow control holds the sender at the stream's initial window, and
the call ends with its status (the unread bytes are dropped with the stream). Without this, gRPC would receive and
parse a whole unary request (up to the port's message limit) before any handler could refuse it, and a caller with no
token could make the router hold many such messages at once.

The caller's tenant is then in :data:`current_tenant` for the handler: it scopes prefix caching, request ids, Abort
and limits. Health and reflection stay open for probes.
"""

from __future__ import annotations

from contextvars import ContextVar

import grpc

from pdserve.common.authz import wrap_handler
from pdserve.common.tenants import DEFAULT_TENANT, Tenants
from pdserve.router.metrics import REJECTED

PROTECTED_PREFIX = "/pdserve.v1.Router/"
MESSAGE = "missing or invalid bearer token (send 'authorization: Bearer <token>' metadata)"

current_tenant: ContextVar[str] = ContextVar("current_tenant", default=DEFAULT_TENANT)


def refusal(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, details: str) -> grpc.RpcMethodHandler:
    """A handler that ends the call with ``code`` without reading its request: its request side is a stream (which
    gRPC reads only when the handler iterates it), its response side that of ``handler``."""

    async def refuse(_unread_requests, context):
        await context.abort(code, details)

    if handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse, response_serializer=handler.response_serializer)
    return grpc.stream_unary_rpc_method_handler(refuse, response_serializer=handler.response_serializer)


class TenantAuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, tenants: Tenants) -> None:
        self.tenants = tenants

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or not handler_call_details.method.startswith(PROTECTED_PREFIX):
            return handler
        given = next((v for k, v in handler_call_details.invocation_metadata or () if k == "authorization"), None)
        tenant = self.tenants.tenant_of(given)
        if tenant is None:
            REJECTED.labels("unauthenticated").inc()
            return refusal(handler, grpc.StatusCode.UNAUTHENTICATED, MESSAGE)

        async def admit(_context) -> None:
            current_tenant.set(tenant)

        return wrap_handler(handler, admit)
