"""The edge's connections to the router: enough of them for every request the edge admits.

One gRPC channel is one HTTP/2 connection, and the router lets each connection carry only so many calls at once
(its ``--max-streams-per-connection``); calls past that wait in the client for a free stream. Through a single
channel, one tenant holding that many streams would make every other tenant's request wait. The pool opens
``ceil(edge concurrency / streams per connection)`` channels, each on a connection of its own, and starts each call
on the one with the fewest calls in flight.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from pdserve.client.client import AsyncPdserveClient

T = TypeVar("T")


def pool_size(max_concurrent_requests: int, streams_per_connection: int) -> int:
    return max(1, math.ceil(max_concurrent_requests / max(1, streams_per_connection)))


class RouterPool:
    """The calls of :class:`AsyncPdserveClient` that the edge makes, spread over ``size`` connections. Channels are
    opened on first use, inside the server's event loop."""

    def __init__(self, target: str, size: int, credentials: grpc.ChannelCredentials | None = None,
                 options: list[tuple[str, object]] | None = None) -> None:
        self.target, self.size, self.credentials, self.options = target, size, credentials, options or []
        self.clients: list[AsyncPdserveClient] = []
        self.inflight: list[int] = []

    def _pick(self) -> int:
        if not self.clients:
            for _ in range(self.size):  # a local subchannel pool: a connection per channel, never shared
                self.clients.append(AsyncPdserveClient(self.target, self.credentials, options=self.options + [
                    ("grpc.use_local_subchannel_pool", 1)]))
                self.inflight.append(0)
        return min(range(self.size), key=self.inflight.__getitem__)

    async def _unary(self, call: Callable[[AsyncPdserveClient], Awaitable[T]]) -> T:
        i = self._pick()
        self.inflight[i] += 1
        try:
            return await call(self.clients[i])
        finally:
            self.inflight[i] -= 1

    def generate(self, *args, **kwargs):
        i = self._pick()
        self.inflight[i] += 1
        call = self.clients[i].generate(*args, **kwargs)

        def done(_call) -> None:
            self.inflight[i] -= 1
        call.add_done_callback(done)
        return call

    async def complete(self, *args, **kwargs):
        return await self._unary(lambda c: c.complete(*args, **kwargs))

    async def list_models(self, *args, **kwargs):
        return await self._unary(lambda c: c.list_models(*args, **kwargs))

    async def tokenize(self, *args, **kwargs):
        return await self._unary(lambda c: c.tokenize(*args, **kwargs))

    async def detokenize(self, *args, **kwargs):
        return await self._unary(lambda c: c.detokenize(*args, **kwargs))

    async def serving(self, *args, **kwargs) -> bool:
        return await self._unary(lambda c: c.serving(*args, **kwargs))

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
