"""Refusing a client stream: the status is sent only after the rest of the stream is read (bounded), and a handler
that does not refuse runs as it would without the wrapper."""

import asyncio

import grpc
import pytest

from pdserve.common.client_stream import RefusingContext, drain, refuse_after_stream
from pdserve.common.status import rich_status


class Message:
    def __init__(self, size: int) -> None:
        self.size = size

    def ByteSize(self) -> int:  # noqa: N802 (protobuf's name)
        return self.size


class Requests:
    """A request stream of ``n`` messages; ``read`` counts those taken. ``endless``: it never ends."""

    def __init__(self, n: int, size: int = 100, endless: bool = False) -> None:
        self.n, self.size, self.endless, self.read = n, size, endless, 0

    def __aiter__(self):
        return self

    async def __anext__(self) -> Message:
        if self.read >= self.n and not self.endless:
            raise StopAsyncIteration
        if self.endless:
            await asyncio.sleep(0)
        self.read += 1
        return Message(self.size)


class Context:
    def __init__(self) -> None:
        self.aborted: tuple | None = None

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code, details="", trailing_metadata=()):
        self.aborted = (code, details, trailing_metadata)
        raise grpc.aio.AbortError()


def test_a_refusal_is_sent_after_the_rest_of_the_stream_is_read():
    requests, context = Requests(10), Context()

    async def handler(ctx) -> None:
        assert ctx.peer() == "ipv4:127.0.0.1:1"  # everything but abort is the real context
        await requests.__anext__()
        await ctx.abort(grpc.StatusCode.PERMISSION_DENIED, "Put: not allowed", (("k", "v"),))

    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(refuse_after_stream(handler, requests, context))
    assert requests.read == 10
    assert context.aborted == (grpc.StatusCode.PERMISSION_DENIED, "Put: not allowed", (("k", "v"),))


def test_the_handlers_cleanup_runs_before_the_drain():
    requests, context, order = Requests(3), Context(), []

    async def handler(ctx) -> None:
        try:
            await ctx.abort(grpc.StatusCode.DATA_LOSS, "data: bad")
        finally:
            order.append(("cleanup", requests.read))

    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(refuse_after_stream(handler, requests, context))
    assert order == [("cleanup", 0)] and requests.read == 3


def test_a_handler_that_does_not_refuse_is_answered_as_is():
    async def handler(ctx: RefusingContext) -> str:
        return "reply"
    requests, context = Requests(5), Context()
    assert asyncio.run(refuse_after_stream(handler, requests, context)) == "reply"
    assert requests.read == 0 and context.aborted is None


def test_the_drain_stops_at_its_bounds():
    assert asyncio.run(drain(Requests(4, size=100), max_bytes=1000)) is True
    too_big = Requests(100, size=100)
    assert asyncio.run(drain(too_big, max_bytes=1000)) is False and too_big.read == 11
    endless = Requests(0, endless=True)
    assert asyncio.run(drain(endless, max_bytes=1 << 60, max_s=0.05)) is False and endless.read > 0


class Broken(Requests):
    """A stream whose third message cannot be read (as a message that does not parse)."""

    async def __anext__(self) -> Message:
        if self.read == 2:
            raise ValueError("Error parsing message")
        return await super().__anext__()


def test_a_stream_that_cannot_be_drained_is_refused_anyway():
    requests, context = Broken(10), Context()

    async def handler(ctx) -> None:
        await ctx.abort_with_status(rich_status(grpc.StatusCode.PERMISSION_DENIED, "Put: not allowed"))
    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(refuse_after_stream(handler, requests, context))
    assert context.aborted[:2] == (grpc.StatusCode.PERMISSION_DENIED, "Put: not allowed")
    assert asyncio.run(drain(Requests(3))) and asyncio.run(drain(iter_bytes([b"ab", b"cde"]), max_bytes=4)) is False


async def iter_bytes(items: list[bytes]):
    for item in items:
        yield item


def test_the_authorizer_drains_a_client_stream_it_refuses_and_only_that_kind():
    """wrap_handler: a refused stream-unary call is drained before its status; the check's context variable is seen
    by the handler it lets through; a bidirectional stream is refused at once (its client may await replies)."""
    from contextvars import ContextVar

    from pdserve.common.authz import wrap_handler

    role: ContextVar[str] = ContextVar("role", default="")

    async def check(ctx) -> None:
        if ctx.peer() != "ipv4:127.0.0.1:1":
            await ctx.abort(grpc.StatusCode.PERMISSION_DENIED, "no")
        role.set("prefill")

    async def put(requests, ctx) -> str:
        return f"stored by {role.get()}"
    handler = wrap_handler(grpc.stream_unary_rpc_method_handler(put), check)
    assert asyncio.run(handler.stream_unary(Requests(4), Context())) == "stored by prefill"

    stranger, requests = Context(), Requests(4)
    stranger.peer = lambda: "ipv4:10.0.0.9:1"
    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(handler.stream_unary(requests, stranger))
    assert requests.read == 4 and stranger.aborted[0] == grpc.StatusCode.PERMISSION_DENIED

    async def chat(requests, ctx):
        yield "reply"
    bidi, requests, stranger.aborted = wrap_handler(grpc.stream_stream_rpc_method_handler(chat), check), Requests(4), None

    async def first_reply():
        return [m async for m in bidi.stream_stream(requests, stranger)]
    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(first_reply())
    assert requests.read == 0 and stranger.aborted[0] == grpc.StatusCode.PERMISSION_DENIED
