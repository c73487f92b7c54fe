"""Python client for the router, sync and asyncio, over the generated stubs.

    from client.client import PdserveClient
    with PdserveClient("127.0.0.1:50050") as c:
        for chunk in c.generate(messages=[{"role": "user", "content": "Hi"}], max_tokens=32, temperature=0):
            print(chunk.text, end="")

Sampling keywords are those of :class:`engine.params.SamplingParams` (max_tokens, temperature, top_p, stop, ...).
A router with TLS takes ``credentials=grpc.ssl_channel_credentials(...)``; one that checks bearer tokens, ``token=``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import grpc

from common.convert import sampling_to_proto
from common.server import GRPC_OPTIONS
from engine.params import SamplingParams
from protos import router_pb2, router_pb2_grpc


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...] | None:
    return (("authorization", f"Bearer {token}"),) if token else None


def build_request(prompt: str | None = None, *, messages: list[dict[str, str]] | None = None,
                  token_ids: list[int] | None = None, model: str = "", request_id: str = "",
                  **sampling) -> router_pb2.GenerateRequest:
    """A GenerateRequest from exactly one of prompt / messages / token_ids plus sampling keywords."""
    given = [x is not None for x in (prompt, messages, token_ids)]
    if sum(given) != 1:
        raise ValueError("pass exactly one of prompt, messages, token_ids")
    request = router_pb2.GenerateRequest(model=model, request_id=request_id,
                                         sampling=sampling_to_proto(SamplingParams(**sampling)))
    if prompt is not None:
        request.text = prompt
    elif messages is not None:
        request.chat.messages.extend(router_pb2.ChatMessage(role=m["role"], content=m["content"]) for m in messages)
    else:
        request.token_ids.ids.extend(token_ids)
    return request


class PdserveClient:
    def __init__(self, target: str = "127.0.0.1:50050", credentials: grpc.ChannelCredentials | None = None,
                 token: str | None = None) -> None:
        self.channel = (grpc.secure_channel(target, credentials, options=GRPC_OPTIONS) if credentials
                        else grpc.insecure_channel(target, options=GRPC_OPTIONS))
        self.stub = router_pb2_grpc.RouterStub(self.channel)
        self.metadata = auth_metadata(token)

    def __enter__(self) -> "PdserveClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def generate(self, prompt: str | None = None, *, timeout: float | None = None,
                 **kwargs) -> Iterator[router_pb2.GenerateChunk]:
        """Stream the answer; breaking out of the loop (or ``.cancel()`` on the returned call) cancels it."""
        return self.stub.Generate(build_request(prompt, **kwargs), timeout=timeout, metadata=self.metadata)

    def complete(self, prompt: str | None = None, *, timeout: float | None = None,
                 **kwargs) -> router_pb2.GenerateResponse:
        return self.stub.Complete(build_request(prompt, **kwargs), timeout=timeout, metadata=self.metadata)

    def list_models(self) -> router_pb2.ListModelsResponse:
        return self.stub.ListModels(router_pb2.ListModelsRequest(), metadata=self.metadata)


class AsyncPdserveClient:
    def __init__(self, target: str = "127.0.0.1:50050", credentials: grpc.ChannelCredentials | None = None,
                 token: str | None = None) -> None:
        self.channel = (grpc.aio.secure_channel(target, credentials, options=GRPC_OPTIONS) if credentials
                        else grpc.aio.insecure_channel(target, options=GRPC_OPTIONS))
        self.stub = router_pb2_grpc.RouterStub(self.channel)
        self.metadata = auth_metadata(token)

    async def __aenter__(self) -> "AsyncPdserveClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close()

    def generate(self, prompt: str | None = None, *, timeout: float | None = None,
                 **kwargs) -> AsyncIterator[router_pb2.GenerateChunk]:
        """An async iterator of chunks (a grpc.aio call: ``.cancel()`` cancels the request end to end)."""
        return self.stub.Generate(build_request(prompt, **kwargs), timeout=timeout, metadata=self.metadata)

    async def complete(self, prompt: str | None = None, *, timeout: float | None = None,
                       **kwargs) -> router_pb2.GenerateResponse:
        return await self.stub.Complete(build_request(prompt, **kwargs), timeout=timeout, metadata=self.metadata)

    async def list_models(self) -> router_pb2.ListModelsResponse:
        return await self.stub.ListModels(router_pb2.ListModelsRequest(), metadata=self.metadata)
