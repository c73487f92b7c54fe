"""Bearer tokens at the HTTP edge: every route but ``/health`` checks the caller's token on every call, before
anything else runs (``/v1/models`` and ``/metrics`` included), against the same token file as the router's
(``common/tenants.py``). The token then travels on to the router, which checks it again and maps it to its tenant."""

from __future__ import annotations

import json

from pdserve.common.tenants import Tenants

OPEN_PATHS = ("/health",)
MESSAGE = "missing or invalid bearer token (send 'Authorization: Bearer <token>')"


class TokenCheck:
    """Pure ASGI, so that streaming and cancellation pass through untouched."""

    def __init__(self, app, tenants: Tenants | None) -> None:
        self.app = app
        self.tenants = tenants

    async def __call__(self, scope, receive, send) -> None:
        if (scope["type"] != "http" or self.tenants is None or not self.tenants.enabled
                or scope["path"] in OPEN_PATHS):
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers") or ()).get(b"authorization")
        if self.tenants.tenant_of(given) is not None:
            return await self.app(scope, receive, send)
        body = json.dumps({"error": {"message": MESSAGE, "type": "invalid_request_error", "param": None,
                                     "code": "unauthenticated"}}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})
