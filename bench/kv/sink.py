"""The bare gRPC sink ``pdserve bench kv`` compares the kvstore with: its own process (``python -m
pdserve.bench.kv.sink --sink-port N``), on the same server scaffolding (options, message limits, interceptor), carrying
the same data messages as raw bytes, with no protobuf, no checksum, nothing kept beyond the stream."""

from __future__ import annotations

import argparse
import asyncio
import os

import grpc

from pdserve.common.server import CHANNEL_OPTIONS, serve
from pdserve.kvstore.memory import keep_freed_memory
from pdserve.kvstore.wire import CHUNK_BYTES

SINK_SERVICE = "pdserve.bench.Sink"


# --- the bare sink -------------------------------------------------------------------------------------------------
def _sink_handler() -> grpc.GenericRpcHandler:
    """The least a store does with a stream: Put holds the messages it is sent until the stream ends, Get streams
    ``count`` blocks of ``block_bytes`` as the kvstore would, from as many distinct buffers (made once). Holding and
    reading distinct buffers matters: the same message sent again or one dropped at once stays in the CPU's cache,
    the bytes of a store do not."""
    made: dict[tuple[int, int], list[list[bytes]]] = {}

    async def put(request_iterator, context) -> bytes:
        held = [message async for message in request_iterator]
        return sum(len(m) for m in held).to_bytes(8, "little")

    async def get(request: bytes, context):
        block_bytes, count = int.from_bytes(request[:8], "little"), int.from_bytes(request[8:16], "little")
        if (block_bytes, count) not in made:
            made[block_bytes, count] = [[os.urandom(n) for n in message_sizes(block_bytes)] for _ in range(count)]
        for block in made[block_bytes, count]:
            for message in block:
                yield message

    return grpc.method_handlers_generic_handler(SINK_SERVICE, {
        "Put": grpc.stream_unary_rpc_method_handler(put),
        "Get": grpc.unary_stream_rpc_method_handler(get),
    })


def serve_sink(port: int) -> None:
    keep_freed_memory()  # as the kvstore does: the floor gets the same allocator settings
    def register(server: grpc.aio.Server) -> list[str]:
        server.add_generic_rpc_handlers((_sink_handler(),))
        return [SINK_SERVICE]

    asyncio.run(serve("bench-sink", port, register))


# --- measuring -----------------------------------------------------------------------------------------------------
class SinkClient:
    """The sink as ``pdserve bench kv`` calls it."""


    def __init__(self, target: str) -> None:
        self.channel = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
        self.put_call = self.channel.stream_unary(f"/{SINK_SERVICE}/Put")
        self.get_call = self.channel.unary_stream(f"/{SINK_SERVICE}/Get")

    async def put(self, messages: list[bytes]) -> None:
        await self.put_call(iter(messages))

    async def get(self, block_bytes: int, count: int) -> int:
        """Receive and hold the bytes until the end of the stream, as a fetch for a decode worker does."""
        request = block_bytes.to_bytes(8, "little") + count.to_bytes(8, "little")
        held = [message async for message in self.get_call(request)]
        return sum(len(m) for m in held)


def message_sizes(block_bytes: int) -> list[int]:
    """The data messages of one block, as the kvstore sends them."""
    return [min(CHUNK_BYTES, block_bytes - start) for start in range(0, block_bytes, CHUNK_BYTES)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the bare gRPC sink pdserve bench kv compares the kvstore with")
    parser.add_argument("--sink-port", type=int, required=True)
    serve_sink(parser.parse_args().sink_port)
