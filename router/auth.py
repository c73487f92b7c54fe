"""Bearer tokens on the router's public API, each mapped to its tenant (``common/tenants.py``).

Every call to a ``pdserve.v1.Router`` method must carry ``authorization: Bearer <token>`` metadata when tokens are
configured; a missing or unknown token is answered UNAUTHENTICATED by the interceptor, before the handler
(validation, tokenizing, any worker) runs. The caller's tenant is then in :data:`current_tenant` for the handler:
it scopes prefix caching, request ids, Abort and limits. Health and reflection stay open for probes.
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


class TenantAuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, tenants: Tenants) -> None:
        self.tenants = tenants

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or not handler_call_details.method.startswith(PROTECTED_PREFIX):
            return handler
        given = next((v for k, v in handler_call_details.invocation_metadata or () if k == "authorization"), None)
        tenant = self.tenants.tenant_of(given)

        async def admit(context) -> None:
            if tenant is None:
                REJECTED.labels("unauthenticated").inc()
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, MESSAGE)
            current_tenant.set(tenant)

        return wrap_handler(handler, admit)
