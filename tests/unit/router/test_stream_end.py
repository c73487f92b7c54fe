"""A decode worker that goes away mid-stream: the request resumes elsewhere, unless the worker had already sent the
request's last chunk, when it is complete (resuming it would hand the next worker tokens that already end it, which
that worker refuses, and a finished request would fail)."""

from __future__ import annotations

import asyncio

import grpc

from pdserve.router.request_state import RequestState
from pdserve.router.upstream import resumable_decode
from pdserve.router.workers import decode_pool
from pdserve.v1 import common_pb2, decode_pb2


class _Call:
    """A Decode stream that yields ``chunks`` and then ends, or fails as a killed worker's stream does."""

    def __init__(self, chunks: list[decode_pb2.DecodeChunk], dies: bool = False) -> None:
        self.chunks, self.dies = chunks, dies

    def __aiter__(self):
        return self._stream()

    async def _stream(self):
        for chunk in self.chunks:
            yield chunk
        if self.dies:
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       details="Socket closed")

    def cancel(self) -> bool:
        return False


def _chunk(tokens: list[int], finish: str = "") -> decode_pb2.DecodeChunk:
    return decode_pb2.DecodeChunk(step=common_pb2.TokenStep(token_ids=tokens, finish_reason=finish))


def _relay(first_chunks: list[decode_pb2.DecodeChunk]) -> tuple[list[decode_pb2.DecodeRequest], list[int]]:
    """Relay a request whose first worker streams ``first_chunks`` and dies; the second finishes it with token 99.
    Returns the requests each worker got and the tokens relayed."""
    async def main():
        pool = decode_pool(["127.0.0.1:1", "127.0.0.1:2"])
        sent: list[decode_pb2.DecodeRequest] = []
        replies = [_Call(first_chunks, dies=True), _Call([_chunk([99], "length")])]
        for worker in pool.workers:
            worker.stub.Decode = lambda request, **_: sent.append(request) or replies[len(sent) - 1]
        state = RequestState("r1", prompt_len=3, colocated=True)
        request = decode_pb2.DecodeRequest(request_id="r1", prompt_ids=[1, 2, 3], colocated=True)
        tokens = [t async for chunk in resumable_decode(pool, state, request, 2, lambda: None)
                  for t in chunk.step.token_ids]
        await pool.close()
        return sent, tokens
    return asyncio.run(main())


def test_a_worker_gone_mid_stream_hands_the_request_to_another_with_what_was_relayed():
    sent, tokens = _relay([_chunk([7]), _chunk([8])])
    assert len(sent) == 2 and list(sent[1].resume_ids) == [7, 8]
    assert tokens == [7, 8, 99]


def test_a_worker_gone_after_the_last_chunk_leaves_the_request_complete():
    sent, tokens = _relay([_chunk([7]), _chunk([8], "length")])
    assert len(sent) == 1  # no resumption: nothing is left to generate
    assert tokens == [7, 8]
