"""The HTTP routes: OpenAI's completions, chat completions and models, vLLM's tokenize/detokenize, health, metrics.

Every request becomes one gRPC call to the router. A client that disconnects cancels that call, and with it the
request's prefill, decode and KV lease.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException

from pdserve.client.client import AsyncPdserveClient
from pdserve.common.tenants import Tenants
from pdserve.openai_server.auth import TokenCheck
from pdserve.openai_server.errors import ApiError, error_response, from_grpc, renamer
from pdserve.openai_server.http_io import (
    ClientGone,
    MetricsMiddleware,
    read_body,
    sse,
    unless_disconnected,
)
from pdserve.openai_server.metrics import DISCONNECTS, observe_answer
from pdserve.openai_server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    SamplingFields,
    TokenizeRequest,
    chat_messages,
    parse,
)
from pdserve.openai_server.responses import Shaper

log = logging.getLogger("pdserve.openai")


class Edge:
    """What the routes share: the router client, the served model's card, the settings."""

    def __init__(self, client: AsyncPdserveClient | None, timeout_s: float | None, retry_after_s: int) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self._card = None

    async def card(self, token: str | None, fresh: bool = False):
        """The served model, asked once (the router serves one model for its lifetime); ``fresh``: ask the router
        now, which checks the caller's token (``/v1/models`` answers nobody the router would not)."""
        if self._card is None or fresh:
            try:
                self._card = (await self.client.list_models(token)).models[0]
            except grpc.aio.AioRpcError as err:
                raise from_grpc(err) from None
        return self._card

    @staticmethod
    def token(request: Request) -> str | None:
        """The caller's bearer token (an OpenAI client's api_key), passed on to the router, which checks it: one
        token for both APIs, checked in one place, before any work; never logged."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return token.strip() or None if scheme.lower() == "bearer" else None

    @staticmethod
    def request_id(request: Request) -> str:
        given = request.headers.get("x-request-id")
        if not given:
            return uuid.uuid4().hex
        if not given.isascii():
            raise ApiError.invalid("x-request-id", "must be ASCII")
        return given  # the router checks its length

    async def prompt_ids(self, body: SamplingFields, prompt: dict[str, Any], token: str | None) -> dict[str, Any]:
        """The prompt as the router takes it; as token ids when the request changes them (add_generation_prompt
        false, continue_final_message, truncate_prompt_tokens), tokenized by the router as Generate would."""
        keep = body.truncate_prompt_tokens
        no_generation_prompt = getattr(body, "add_generation_prompt", True) is False
        if keep is None and not no_generation_prompt:
            return prompt
        ids = prompt.get("token_ids")
        if getattr(body, "continue_final_message", False):
            prompt = {"prompt": await self.continued(body, prompt["messages"], token), "add_special_tokens": False}
        if ids is None:
            try:
                if "messages" in prompt and no_generation_prompt:
                    prompt = dict(prompt, add_generation_prompt=False)
                reply = await self.client.tokenize(model=body.model, timeout=self.timeout_s, token=token, **prompt)
            except grpc.aio.AioRpcError as err:
                raise from_grpc(err, renamer("messages" in prompt, "max_tokens")) from None
            ids = list(reply.token_ids)
        return {"token_ids": ids[-keep:] if keep else ids}

    async def continued(self, body: SamplingFields, messages: list[dict[str, str]], token: str | None) -> str:
        """continue_final_message (vLLM's): the chat rendered without a generation prompt, cut right after the last
        message's text, so the model continues that message instead of closing it."""
        try:
            ids = (await self.client.tokenize(messages=messages, add_generation_prompt=False, model=body.model,
                                              timeout=self.timeout_s, token=token)).token_ids
            text = (await self.client.detokenize(list(ids), model=body.model, skip_special_tokens=False,
                                                 timeout=self.timeout_s, token=token)).text
        except grpc.aio.AioRpcError as err:
            raise from_grpc(err, renamer(True, "max_tokens")) from None
        final = messages[-1]["content"]
        end = text.rfind(final) if final else -1
        if end < 0:
            raise ApiError.invalid("continue_final_message", "the last message's text is not in the rendered chat")
        return text[:end + len(final)]

    async def prompt_text(self, body: SamplingFields, prompt: dict[str, Any], token: str | None) -> str:
        """The prompt as text (completions' echo): as sent, or its token ids detokenized by the router."""
        if "prompt" in prompt:
            return prompt["prompt"]
        try:
            return (await self.client.detokenize(prompt["token_ids"], model=body.model, timeout=self.timeout_s,
                                                 token=token)).text
        except grpc.aio.AioRpcError as err:
            raise from_grpc(err, lambda f: "prompt") from None

    async def generate(self, request: Request, body: SamplingFields, prompt: dict[str, Any], chat: bool) -> Response:
        body.check_supported()
        request_id = self.request_id(request)
        token = self.token(request)
        card = await self.card(token)
        if body.model and body.model != card.id:  # OpenAI's and vLLM's answer: 404 model_not_found
            raise ApiError(404, f"the model {body.model!r} does not exist; this server serves {card.id!r}", "model",
                           "model_not_found")
        prompt = await self.prompt_ids(body, prompt, token)
        kwargs = dict(prompt, model=body.model, request_id=request_id, **body.sampling())
        shaper = Shaper(chat, request_id, card.id, kwargs.get("stop", []), kwargs.get("stop_token_ids", []),
                        card.fingerprint, logprobs=kwargs["logprobs"] is not None)
        if not chat and body.echo:
            shaper.echo = await self.prompt_text(body, prompt, token)
        rename = renamer(chat, body.max_tokens_field(), body.spec()[1])
        headers = {"x-request-id": request_id}
        if not body.stream:
            try:
                reply = await unless_disconnected(request, self.client.complete(timeout=self.timeout_s, token=token,
                                                                                     **kwargs))
            except grpc.aio.AioRpcError as err:
                raise from_grpc(err, rename) from None
            observe_answer(reply.usage, reply.timings)
            return JSONResponse(shaper.whole(reply), headers=headers)
        call = self.client.generate(timeout=self.timeout_s, token=token, **kwargs)
        chunks = aiter(call)
        try:  # errors before the first chunk (bad input, overload) still get their HTTP status
            first = await unless_disconnected(request, anext(chunks, None))
        except grpc.aio.AioRpcError as err:
            raise from_grpc(err, rename) from None
        except BaseException:  # the client went away (or the server stops): cancel upstream
            call.cancel()
            raise
        stream = self._events(call, chunks, first, shaper, body.include_usage(), rename)
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    async def _events(self, call, chunks: AsyncIterator, chunk, shaper: Shaper, include_usage: bool,
                      rename) -> AsyncIterator[str]:
        """Server-sent events: one per router chunk, the usage chunk if asked, ``[DONE]``."""
        last = None
        try:
            while chunk is not None:
                yield sse(shaper.chunk(chunk, include_usage))
                last = chunk
                chunk = await anext(chunks, None)
            if last is not None and last.HasField("usage"):
                observe_answer(last.usage, last.timings)
            if include_usage and last is not None:
                yield sse(shaper.usage_chunk(last))
        except grpc.aio.AioRpcError as err:  # after the headers: the error travels as an event
            error = from_grpc(err, rename)
            yield sse({"error": {"message": error.message, "type": "server_error", "param": error.param,
                                 "code": error.code}})
        except asyncio.CancelledError:  # the client went away
            DISCONNECTS.inc()
            raise
        finally:
            call.cancel()  # no-op once finished; else cancels the request upstream
        yield sse("[DONE]")


def create_app(router: str = "127.0.0.1:50050", *, client: AsyncPdserveClient | None = None,
               timeout_s: float | None = None, retry_after_s: int = 1,
               credentials: grpc.ChannelCredentials | None = None, tenants: Tenants | None = None) -> FastAPI:
    """The ASGI app. ``client`` replaces the router connection (tests); else one is opened at startup, over TLS
    with ``credentials``. ``tenants``: the tokens every route but /health checks first (the router checks again)."""
    edge = Edge(client, timeout_s, retry_after_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        owned = edge.client is None
        if owned:
            edge.client = AsyncPdserveClient(router, credentials=credentials)
        try:
            yield
        finally:
            if owned:
                await edge.client.close()

    app = FastAPI(title="pdserve OpenAI-compatible API", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.add_middleware(TokenCheck, tenants=tenants)
    app.add_middleware(MetricsMiddleware)  # outermost: counts refused calls too

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc, edge.retry_after_s)

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return error_response(ApiError(exc.status_code, str(exc.detail)), edge.retry_after_s)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        return error_response(ApiError(500, "internal error"), edge.retry_after_s)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body = parse(CompletionRequest, await read_body(request))
        return await edge.generate(request, body, body.prompt_kwargs(), chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = parse(ChatCompletionRequest, await read_body(request))
        return await edge.generate(request, body, {"messages": body.chat()}, chat=True)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        card = await edge.card(edge.token(request), fresh=True)
        return {"object": "list", "data": [{"id": card.id, "object": "model", "created": 0, "owned_by": "pdserve",
                                            "max_model_len": card.context_length,
                                            "vocab_size": card.vocab_size}]}

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        body = parse(TokenizeRequest, await read_body(request))
        if (body.prompt is None) == (body.messages is None):
            raise ApiError.invalid("prompt", "send exactly one of prompt or messages")
        prompt = {"prompt": body.prompt} if body.prompt is not None else {"messages": chat_messages(body.messages)}
        try:
            reply = await edge.client.tokenize(model=body.model, add_special_tokens=body.add_special_tokens,
                                               add_generation_prompt=body.add_generation_prompt,
                                               timeout=edge.timeout_s, token=edge.token(request), **prompt)
        except grpc.aio.AioRpcError as err:
            raise from_grpc(err, renamer(body.messages is not None, "max_tokens")) from None
        out = {"count": reply.count, "max_model_len": reply.context_length, "tokens": list(reply.token_ids)}
        if body.return_token_strs:
            out["token_strs"] = list(reply.tokens)
        return out

    @app.post("/detokenize")
    async def detokenize(request: Request) -> dict[str, Any]:
        body = parse(DetokenizeRequest, await read_body(request))
        try:
            reply = await edge.client.detokenize(body.tokens, model=body.model, timeout=edge.timeout_s,
                                                 token=edge.token(request))
        except grpc.aio.AioRpcError as err:
            raise from_grpc(err, lambda f: "tokens" if f == "token_ids" else f) from None
        return {"prompt": reply.text}

    @app.get("/health")
    async def health() -> Response:
        if await edge.client.serving():
            return Response(status_code=200)
        return error_response(ApiError(503, "the router is not serving"), edge.retry_after_s)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
