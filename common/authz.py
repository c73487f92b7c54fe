"""Per-RPC authorization on the internal plane: who may call what, in one table, checked before any handler runs.

A service run with an identity requires a client certificate from the stack's CA (the TLS handshake refuses any other
caller, so no byte of a request reaches it); :class:`RoleAuthorizer` then reads the caller's role from its
certificate (``spiffe://pdserve/<role>``) and answers PERMISSION_DENIED to a role the table does not list for the
method, UNAUTHENTICATED to a certificate that names no role. Health and reflection are open to every identity. The
router's public API is not in the table: it serves callers by bearer token (``router/auth.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from contextvars import ContextVar

import grpc
from prometheus_client import Counter

from pdserve.common.client_stream import RefusingContext, refuse_after_stream
from pdserve.common.identity import ROLES, role_from_spiffe

ANY = frozenset(ROLES)
OPEN_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
                 "grpc.reflection.v1.ServerReflection")

# method -> the roles that may call it. Anything not listed is denied.
POLICY: dict[str, frozenset[str]] = {
    "/pdserve.v1.Prefill/Prefill": frozenset({"router"}),
    "/pdserve.v1.Prefill/GetLoad": frozenset({"router", "admin"}),
    "/pdserve.v1.Decode/Decode": frozenset({"router"}),
    "/pdserve.v1.Decode/Prefetch": frozenset({"router"}),
    "/pdserve.v1.Decode/GetLoad": frozenset({"router", "admin"}),
    "/pdserve.v1.KVStore/Put": frozenset({"prefill"}),
    "/pdserve.v1.KVStore/Get": frozenset({"prefill", "decode"}),
    "/pdserve.v1.KVStore/Lookup": frozenset({"prefill"}),
    "/pdserve.v1.KVStore/Acquire": frozenset({"router", "prefill"}),  # creating a lease: the router only (kvstore)
    "/pdserve.v1.KVStore/Renew": frozenset({"router", "prefill", "decode"}),
    "/pdserve.v1.KVStore/Release": frozenset({"router", "prefill", "decode"}),
    "/pdserve.v1.KVStore/Stats": frozenset({"router", "prefill", "decode", "admin", "test"}),
    "/pdserve.testing.v1.KVStoreFaults/Corrupt": frozenset({"test"}),
}

# The role of the caller of the RPC being served (None on a service run with --insecure-internal).
caller_role: ContextVar[str | None] = ContextVar("caller_role", default=None)

DENIED = Counter("pdserve_rpc_denied_total", "internal RPCs refused by authorization, by method and caller role",
                 ["method", "role"])


def allowed_roles(method: str) -> frozenset[str]:
    service = method.lstrip("/").split("/", 1)[0]
    if service in OPEN_SERVICES:
        return ANY
    return POLICY.get(method, frozenset())


def wrap_handler(handler: grpc.RpcMethodHandler,
                 before: Callable[[grpc.aio.ServicerContext | RefusingContext], Awaitable[None]],
                 ) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that awaits ``before(context)`` first (which may abort the call,
    or set context variables the handler reads), then runs ``handler``. A client-streaming call that ``before``
    aborts ends once the client has finished writing (:mod:`common.client_stream`); there ``before`` is given a
    :class:`RefusingContext`."""
    kind = ("unary_unary" if handler.unary_unary else "unary_stream" if handler.unary_stream
            else "stream_unary" if handler.stream_unary else "stream_stream")
    behavior = getattr(handler, kind)

    async def check(request, context) -> None:
        if kind == "stream_unary":  # a client stream is refused once the client has finished writing
            await refuse_after_stream(before, request, context)
        else:
            await before(context)
    if kind in ("unary_stream", "stream_stream") and inspect.isasyncgenfunction(behavior):
        async def wrapped(request, context):
            await check(request, context)
            async for message in behavior(request, context):
                yield message
    else:  # a coroutine: a unary response, or a stream written with context.write (health's Watch)
        async def wrapped(request, context):
            await check(request, context)
            return await behavior(request, context)
    make = getattr(grpc, f"{kind}_rpc_method_handler")
    return make(wrapped, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)


class RoleAuthorizer(grpc.aio.ServerInterceptor):
    """Checks every call's caller role against :data:`POLICY` before the handler runs."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        allowed = allowed_roles(method)

        async def check(context) -> None:
            peer = context.auth_context().get("peer_spiffe_id") or [b""]
            role = role_from_spiffe(peer[0])
            if role is None:
                DENIED.labels(method, "none").inc()
                await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                    "the client certificate names no pdserve role (spiffe://pdserve/<role>)")
            if role not in allowed:
                DENIED.labels(method, role).inc()
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{method}: not allowed for role {role}")
            caller_role.set(role)

        return wrap_handler(handler, check)
