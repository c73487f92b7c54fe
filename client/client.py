"""Python client for the router, sync and asyncio, over the generated stubs.

    from pdserve.client.client import PdserveClient
    with PdserveClient("127.0.0.1:50050") as c:
        for chunk in c.generate(messages=[{"role": "user", "content": "Hi"}], max_tokens=32, temperature=0):
            print(chunk.text, end="")

Sampling keywords are those of :class:`engine.params.SamplingParams` (max_tokens, temperature, top_p, stop, n,
logprobs, ...); without max_tokens the router lets the answer run to the end of the context. With n > 1 the chunks
of the samples interleave, each tagged with its ``index``.
A router with TLS takes ``credentials=grpc.ssl_channel_credentials(...)``; one that checks bearer tokens, ``token=``.
With TLS the sync client pins the router's identity: it takes only a certificate valid for the name ``router``
(``server_name``), which a stack's CA gives the router alone, while every role's certificate is valid for
``localhost`` and 127.0.0.1; so a stolen kvstore or worker key cannot pose as the router and collect bearer tokens.
``server_name=None`` verifies by the address dialed instead (a router serving a certificate of a public CA).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pdserve.common.convert import sampling_to_proto
from pdserve.common.server import GRPC_OPTIONS
from pdserve.engine.params import SamplingParams
from pdserve.v1 import router_pb2, router_pb2_grpc

ROUTER_NAME = "router"  # the name only the router's certificate carries (common/certs.py)


def pinned_options(credentials: grpc.ChannelCredentials | None, server_name: str | None) -> list[tuple[str, object]]:
    """The channel argument that makes TLS verify the peer for ``server_name`` rather than the address dialed."""
    return [("grpc.ssl_target_name_override", server_name)] if credentials is not None and server_name else []


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...] | None:
    return (("authorization", f"Bearer {token}"),) if token else None


def build_request(prompt: str | None = None, *, messages: list[dict[str, str]] | None = None,
                  token_ids: list[int] | None = None, model: str = "", request_id: str = "", cache_salt: str = "",
                  **sampling) -> router_pb2.GenerateRequest:
    """A GenerateRequest from exactly one of prompt / messages / token_ids plus sampling keywords; ``cache_salt``
    (vLLM's) shares cached prompt blocks only among the tenant's requests with the same salt."""
    given = [x is not None for x in (prompt, messages, token_ids)]
    if sum(given) != 1:
        raise ValueError("pass exactly one of prompt, messages, token_ids")
    sampling.setdefault("max_tokens", None)  # unset on the wire: the rest of the context
    request = router_pb2.GenerateRequest(model=model, request_id=request_id, cache_salt=cache_salt,
                                         sampling=sampling_to_proto(SamplingParams(**sampling)))
    if prompt is not None:
        request.text = prompt
    elif messages is not None:
        request.chat.messages.extend(chat_messages(messages))
    else:
        request.token_ids.ids.extend(token_ids)
    return request


def chat_messages(messages: list[dict[str, str]]) -> list[router_pb2.ChatMessage]:
    return [router_pb2.ChatMessage(role=m["role"], content=m["content"]) for m in messages]


def tokenize_request(prompt: str | None = None, *, messages: list[dict[str, str]] | None = None, model: str = "",
                     add_special_tokens: bool | None = None,
                     add_generation_prompt: bool | None = None) -> router_pb2.TokenizeRequest:
    """A TokenizeRequest from exactly one of prompt / messages; None leaves an option at the router's default."""
    if (prompt is None) == (messages is None):
        raise ValueError("pass exactly one of prompt, messages")
    request = router_pb2.TokenizeRequest(model=model, add_special_tokens=add_special_tokens,
                                         add_generation_prompt=add_generation_prompt)
    if prompt is not None:
        request.text = prompt
    else:
        request.chat.messages.extend(chat_messages(messages))
    return request


class PdserveClient:
    def __init__(self, target: str = "127.0.0.1:50050", credentials: grpc.ChannelCredentials | None = None,
                 token: str | None = None, server_name: str | None = ROUTER_NAME,
                 options: list[tuple[str, object]] | None = None) -> None:
        """``server_name``: the name the router's TLS certificate must carry (None: the address dialed);
        ``options``: more grpc channel arguments."""
        options = GRPC_OPTIONS + pinned_options(credentials, server_name) + (options or [])
        self.channel = (grpc.secure_channel(target, credentials, options=options) if credentials
                        else grpc.insecure_channel(target, options=options))
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

    def tokenize(self, prompt: str | None = None, **kwargs) -> router_pb2.TokenizeResponse:
        """Token ids as Generate would see them; ``messages=`` renders the chat template."""
        return self.stub.Tokenize(tokenize_request(prompt, **kwargs), metadata=self.metadata)

    def detokenize(self, token_ids: list[int], model: str = "",
                   skip_special_tokens: bool | None = None) -> router_pb2.DetokenizeResponse:
        return self.stub.Detokenize(router_pb2.DetokenizeRequest(model=model, token_ids=token_ids,
                                                                 skip_special_tokens=skip_special_tokens),
                                    metadata=self.metadata)

    def abort(self, request_ids: list[str]) -> router_pb2.AbortResponse:
        """Abort requests in flight by id (from any connection); says which ids were found."""
        return self.stub.Abort(router_pb2.AbortRequest(request_ids=request_ids), metadata=self.metadata)


class AsyncPdserveClient:
    def __init__(self, target: str = "127.0.0.1:50050", credentials: grpc.ChannelCredentials | None = None,
                 token: str | None = None, options: list[tuple[str, object]] | None = None) -> None:
        """``options``: more grpc channel arguments (e.g. ``grpc.use_local_subchannel_pool`` for a connection of its
        own)."""
        options = GRPC_OPTIONS + (options or [])
        self.channel = (grpc.aio.secure_channel(target, credentials, options=options) if credentials
                        else grpc.aio.insecure_channel(target, options=options))
        self.stub = router_pb2_grpc.RouterStub(self.channel)
        self.metadata = auth_metadata(token)

    async def __aenter__(self) -> "AsyncPdserveClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close()

    def _metadata(self, token: str | None):
        """This call's metadata: a proxy serving many callers passes each one's ``token`` (else the client's own)."""
        return auth_metadata(token) if token else self.metadata

    def generate(self, prompt: str | None = None, *, timeout: float | None = None, token: str | None = None,
                 **kwargs) -> AsyncIterator[router_pb2.GenerateChunk]:
        """An async iterator of chunks (a grpc.aio call: ``.cancel()`` cancels the request end to end)."""
        return self.stub.Generate(build_request(prompt, **kwargs), timeout=timeout, metadata=self._metadata(token))

    async def complete(self, prompt: str | None = None, *, timeout: float | None = None, token: str | None = None,
                       **kwargs) -> router_pb2.GenerateResponse:
        return await self.stub.Complete(build_request(prompt, **kwargs), timeout=timeout,
                                        metadata=self._metadata(token))

    async def list_models(self, token: str | None = None) -> router_pb2.ListModelsResponse:
        return await self.stub.ListModels(router_pb2.ListModelsRequest(), metadata=self._metadata(token))

    async def serving(self, timeout: float = 2.0) -> bool:
        """Whether the router answers grpc.health.v1 with SERVING."""
        try:
            reply = await health_pb2_grpc.HealthStub(self.channel).Check(health_pb2.HealthCheckRequest(),
                                                                         timeout=timeout)
        except grpc.aio.AioRpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    async def tokenize(self, prompt: str | None = None, *, timeout: float | None = None, token: str | None = None,
                       **kwargs) -> router_pb2.TokenizeResponse:
        return await self.stub.Tokenize(tokenize_request(prompt, **kwargs), timeout=timeout,
                                        metadata=self._metadata(token))

    async def detokenize(self, token_ids: list[int], model: str = "", skip_special_tokens: bool | None = None,
                         timeout: float | None = None, token: str | None = None) -> router_pb2.DetokenizeResponse:
        return await self.stub.Detokenize(router_pb2.DetokenizeRequest(
            model=model, token_ids=token_ids, skip_special_tokens=skip_special_tokens), timeout=timeout,
            metadata=self._metadata(token))

    async def abort(self, request_ids: list[str], timeout: float | None = None) -> router_pb2.AbortResponse:
        return await self.stub.Abort(router_pb2.AbortRequest(request_ids=request_ids), timeout=timeout,
                                     metadata=self.metadata)
