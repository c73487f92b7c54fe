"""Refusing a client-streaming RPC so that the client learns why.

A server that ends a client-streaming call (the kvstore's Put) while the client is still writing sends its status
and resets the stream; grpcio's asyncio client then fails the write in flight and may report that failure,
``INTERNAL: Internal error from Core``, in place of the status the server sent (grpc/grpc#36066). A Put refused with
PERMISSION_DENIED, or FAILED_PRECONDITION for a lease a restarted shard never saw (which the client answers by
moving to the next shard), would read as INTERNAL in a few calls out of a hundred.

So a refusal of a client stream is answered once the client has finished writing: the handler runs with a context
whose ``abort`` raises :class:`Refusal` (the handler's own cleanup runs as the exception passes through it), then
the rest of the stream is read and dropped, at most :data:`DRAIN_MAX_BYTES` within :data:`DRAIN_MAX_S` per call,
and only then does the call end with the refusal's status. A client that keeps writing past those bounds, or whose
stream cannot be read, is cut off at once (and may see INTERNAL).

Only for request streams that end in one reply (stream-unary): a bidirectional stream's client may wait for replies
before it half-closes, so draining it would only delay the refusal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import NoReturn, TypeVar

import grpc

log = logging.getLogger(__name__)

DRAIN_MAX_BYTES = 256 << 20  # a refused Put's blocks over the socket: a 2,048-token chunk of SmolLM2 is ~94 MB
DRAIN_MAX_S = 5.0

T = TypeVar("T")


class Refusal(Exception):
    """An abort deferred until the request stream is drained."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing_metadata: tuple) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details, self.trailing_metadata = code, details, trailing_metadata


class RefusingContext:
    """The servicer context, except that aborting raises :class:`Refusal` instead of ending the call."""

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context

    def __getattr__(self, name: str):
        return getattr(self._context, name)

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: tuple = ()) -> NoReturn:
        raise Refusal(code, details, trailing_metadata)

    async def abort_with_status(self, status: grpc.Status) -> NoReturn:
        raise Refusal(status.code, status.details, status.trailing_metadata)


def _received_bytes(message) -> int:
    return len(message) if isinstance(message, (bytes, memoryview)) else message.ByteSize()


async def drain(requests: AsyncIterator, max_bytes: int = DRAIN_MAX_BYTES, max_s: float = DRAIN_MAX_S) -> bool:
    """Read and drop what is left of a request stream; False if it was still going at either bound, or could not
    be read (a message that does not parse: the refusal is sent anyway)."""
    async def read_to_end() -> bool:
        received = 0
        async for message in requests:
            received += _received_bytes(message)
            if received > max_bytes:
                return False
        return True
    try:
        return await asyncio.wait_for(read_to_end(), max_s)
    except TimeoutError:
        return False
    except Exception as exc:  # noqa: BLE001 (whatever the rest of the stream holds, the refusal stands)
        log.debug("a refused request stream could not be drained: %r", exc)
        return False


async def refuse_after_stream(run: Callable[[RefusingContext], Awaitable[T]], requests: AsyncIterator,
                              context: grpc.aio.ServicerContext) -> T:
    """``await run(refusing_context)``; if it refuses the call, drain ``requests``, then abort with its status."""
    try:
        return await run(RefusingContext(context))
    except Refusal as refusal:
        if not await drain(requests):
            log.info("a refused request stream was cut off before its end (%s)", refusal)
        await context.abort(refusal.code, refusal.details, refusal.trailing_metadata)
        raise AssertionError("context.abort returned") from refusal
