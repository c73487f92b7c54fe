"""What one caller can hold at the edge: requests in flight (in all, and per tenant), and how long a connection may
take to deliver a request.

:class:`EdgeLimits` wraps the whole ASGI app: past ``max_concurrent`` requests in flight, or past a tenant's
``tenant_max_inflight``, a request is answered 429 at once (with Retry-After) instead of queueing behind the others,
so one tenant cannot take every slot of the edge or of its router connections. :class:`DeadlineH11Protocol` is
uvicorn's HTTP/1.1 protocol with a deadline for receiving each request's headers: uvicorn itself arms a timer only
between requests of a kept-alive connection, and any byte received cancels it, so a client that never finishes its
headers (slowloris) would hold its connection forever. The body has its own deadline (``http_io.read_body``).
"""

from __future__ import annotations

import json
from collections import Counter

from uvicorn.protocols.http.h11_impl import H11Protocol

from pdserve.common.tenants import Tenants
from pdserve.openai_server.errors import ERROR_TYPE
from pdserve.openai_server.http_io import BODY_DEADLINE_KEY
from pdserve.openai_server.metrics import LIMITED

UNLIMITED_PATHS = ("/health", "/metrics")  # probes and scrapes are not requests of a tenant


class EdgeLimits:
    def __init__(self, app, tenants: Tenants | None, max_concurrent: int, tenant_max_inflight: int,
                 body_deadline_s: float, retry_after_s: int = 1, metrics_elsewhere: bool = False) -> None:
        """``metrics_elsewhere``: /metrics is served on the metrics port (only to the metrics roles), so with tokens
        configured the public port answers it 404 instead of showing every tenant's load to any tenant's token."""
        self.app, self.tenants, self.metrics_elsewhere = app, tenants, metrics_elsewhere
        self.max_concurrent, self.tenant_max_inflight = max_concurrent, tenant_max_inflight
        self.body_deadline_s, self.retry_after_s = body_deadline_s, retry_after_s
        self.total = 0
        self.per_tenant: Counter[str] = Counter()

    def _tenant(self, scope) -> str | None:
        if self.tenants is None or not self.tenants.enabled:
            return None
        return self.tenants.tenant_of(dict(scope.get("headers") or ()).get(b"authorization"))

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == "/metrics" and self.metrics_elsewhere and \
                self._tenant(scope) is not None:  # a tenant's token (a wrong one gets the app's 401)
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
            return await send({"type": "http.response.body", "body": b"/metrics is on the edge's metrics port\n"})
        if scope["type"] != "http" or scope["path"] in UNLIMITED_PATHS:
            return await self.app(scope, receive, send)
        scope[BODY_DEADLINE_KEY] = self.body_deadline_s
        tenant = self._tenant(scope)  # None: no tokens configured, or a token the app will refuse (401)
        if self.total >= self.max_concurrent:
            LIMITED.labels("edge").inc()
            return await self._refuse(send, f"the edge has {self.total} requests in flight, its limit "
                                            f"(--max-concurrent-requests); retry later")
        if tenant is not None and self.tenant_max_inflight and self.per_tenant[tenant] >= self.tenant_max_inflight:
            LIMITED.labels("tenant").inc()
            return await self._refuse(send, f"this tenant has {self.per_tenant[tenant]} requests in flight, its "
                                            f"limit at the edge (--tenant-max-inflight); retry later")
        self.total += 1
        if tenant is not None:
            self.per_tenant[tenant] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.total -= 1
            if tenant is not None:
                self.per_tenant[tenant] -= 1
                if not self.per_tenant[tenant]:
                    del self.per_tenant[tenant]

    async def _refuse(self, send, message: str) -> None:
        body = json.dumps({"error": {"message": message, "type": ERROR_TYPE[429], "param": None,
                                     "code": "resource_exhausted"}}).encode()
        await send({"type": "http.response.start", "status": 429,
                    "headers": [(b"content-type", b"application/json"),
                                (b"retry-after", str(self.retry_after_s).encode())]})
        await send({"type": "http.response.body", "body": body})


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers have not all arrived ``headers_deadline_s``
    after the connection opened or its previous response ended."""

    headers_deadline_s = 10.0

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._seen_cycle = None
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._headers_timer = self.loop.call_later(self.headers_deadline_s, self._headers_late)

    def _disarm(self) -> None:
        timer = getattr(self, "_headers_timer", None)
        if timer is not None:
            timer.cancel()
            self._headers_timer = None

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and self.cycle is not self._seen_cycle:  # a request's headers are all in
            self._seen_cycle = self.cycle
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _headers_late(self) -> None:
        self._headers_timer = None
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            LIMITED.labels("headers_deadline").inc()
            self.transport.close()


def deadline_protocol(headers_deadline_s: float) -> type[DeadlineH11Protocol]:
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"headers_deadline_s": headers_deadline_s})
