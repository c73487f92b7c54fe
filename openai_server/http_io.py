"""The edge's HTTP plumbing below the routes: per-route metrics as ASGI middleware, a bounded body received within a
deadline, a request's work cancelled when its client goes away, server-sent events."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from typing import Any

from fastapi import Request

from pdserve.openai_server.errors import ApiError
from pdserve.openai_server.metrics import DISCONNECTS, HTTP_INFLIGHT, HTTP_REQUESTS, HTTP_SECONDS, LIMITED

MAX_BODY_BYTES = 8 * 1024 * 1024  # under the router's gRPC message limit (common.server.MAX_MESSAGE_BYTES)
BODY_DEADLINE_KEY = "pdserve.body_deadline_s"  # set in the ASGI scope by limits.EdgeLimits


ROUTES = ("/v1/models", "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize", "/health", "/metrics")


class ClientGone(Exception):
    """The HTTP client disconnected; the upstream call has been cancelled."""


class MetricsMiddleware:
    """Counts and times every request by route and status (pure ASGI, so streaming and cancellation pass through)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in ROUTES else "other"
        status = 500
        start = time.perf_counter()

        async def send_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        HTTP_INFLIGHT.inc()
        try:
            await self.app(scope, receive, send_status)
        finally:
            HTTP_INFLIGHT.dec()
            HTTP_REQUESTS.labels(route, str(status)).inc()
            HTTP_SECONDS.labels(route).observe(time.perf_counter() - start)


async def read_body(request: Request) -> bytes:
    """The body, refused (413) past MAX_BODY_BYTES: bigger ones could not travel to the router anyway; and 408 when
    it has not all arrived within the deadline the edge set (a client trickling its body holds no slot for long)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"the body has {declared} bytes; at most {MAX_BODY_BYTES} are accepted")
    deadline_s = request.scope.get(BODY_DEADLINE_KEY)
    parts: list[bytes] = []
    size = 0

    async def receive() -> None:
        nonlocal size
        async for part in request.stream():
            parts.append(part)
            size += len(part)
            if size > MAX_BODY_BYTES:
                raise ApiError(413, f"the body exceeds {MAX_BODY_BYTES} bytes")
    try:
        async with asyncio.timeout(deadline_s):
            await receive()
    except TimeoutError:
        LIMITED.labels("body_deadline").inc()
        raise ApiError(408, f"the request body did not arrive within {deadline_s:g} s") from None
    return b"".join(parts)


async def until_disconnect(request: Request) -> None:
    """Returns when the client closes the connection (call only once the body has been read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable) -> Any:
    """``await work``, cancelled (ClientGone) if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(until_disconnect(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
    if not task.done() or task.cancelled():
        DISCONNECTS.inc()
        raise ClientGone()
    return task.result()


def sse(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"
