"""A scripted router for the HTTP edge's in-process tests: it answers ListModels and streams or fails as told."""

import asyncio
import json

import grpc
import httpx

from pdserve.openai_server.app import create_app
from pdserve.v1 import common_pb2, router_pb2


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class ScriptedCall:
    """A stand-in for a grpc.aio streaming call: yields ``chunks``, then raises ``error`` if given."""

    def __init__(self, chunks, error=None) -> None:
        self.chunks, self.error, self.cancelled = chunks, error, False

    def __aiter__(self):
        return self._iterate()

    async def _iterate(self):
        for chunk in self.chunks:
            yield chunk
        if self.error is not None:
            raise self.error

    def cancel(self) -> bool:
        self.cancelled = True
        return True

    def done(self) -> bool:
        return True


class ScriptedRouter:
    """Answers ListModels; Complete and Generate fail with ``error`` or stream ``chunks``."""

    def __init__(self, error=None, chunks=()) -> None:
        self.error, self.chunks, self.calls = error, list(chunks), []

    async def list_models(self, token=None):
        return router_pb2.ListModelsResponse(models=[router_pb2.ModelCard(id="m", context_length=64)])

    async def complete(self, **kwargs):
        self.calls.append(kwargs)
        raise self.error

    def generate(self, **kwargs):
        self.calls.append(kwargs)
        return ScriptedCall(self.chunks, self.error)

    async def tokenize(self, prompt=None, **kwargs):
        """Ids 100, 101, ...: one per character of a prompt; one per message, plus one for the generation
        prompt unless add_generation_prompt is false."""
        self.calls.append(dict(kwargs, tokenize=True, prompt=prompt))
        if "messages" in kwargs:
            n = len(kwargs["messages"]) + (0 if kwargs.get("add_generation_prompt") is False else 1)
        else:
            n = len(prompt)
        return router_pb2.TokenizeResponse(token_ids=list(range(100, 100 + n)), count=n)


def post(router: ScriptedRouter, path: str, body, **kwargs) -> httpx.Response:
    async def go():
        transport = httpx.ASGITransport(app=create_app(client=router, retry_after_s=3))
        async with httpx.AsyncClient(transport=transport, base_url="http://edge") as http:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            return await http.post(path, content=content, **kwargs)
    return asyncio.run(go())


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"])
    return body["error"]


def logprobs_entry(token_id: int, text: str, logprob: float, top: list[tuple[int, str, float]]) -> common_pb2.Logprobs:
    def one(t, s, v):
        return common_pb2.TokenLogprob(token_id=t, token=s, token_bytes=s.encode(), logprob=v)
    return common_pb2.Logprobs(sampled=one(token_id, text, logprob), rank=1, top=[one(*t) for t in top])


def events(r: httpx.Response) -> list[dict]:
    return [json.loads(line[len("data: "):]) for line in r.text.splitlines()
            if line.startswith("data: {")]
