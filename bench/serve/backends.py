"""How requests reach a server. Each backend streams one request and fills a :class:`RequestRecord`.

- :class:`GrpcBackend`: pdserve's router (``--target HOST:PORT``); the final chunk brings usage and the router's
  timings in both clocks.
- :class:`OpenAIBackend`: any OpenAI-compatible HTTP endpoint (``--base-url``), streaming server-sent events:
  ``/chat/completions`` for chat prompts, ``/completions`` for text and token ids. A final chunk's ``usage`` gives
  the token counts; a ``timings`` object in it (pdserve's edge) gives the modeled clock.
- :class:`InProcessBackend`: the engine in this process, one engine thread; the baseline of ``--compare``.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time

from pdserve.workload.datasets import BenchRequest
from pdserve.workload.record import RequestRecord, Sampling, Stopwatch
from pdserve.workload.requests import ServedModel


class BenchError(RuntimeError):
    """A problem with the target or the workload, reported as one line without a traceback."""


class GrpcBackend:
    name = "pdserve-grpc"

    def __init__(self, target: str, timeout_s: float | None = None) -> None:
        from pdserve.client.client import AsyncPdserveClient

        self.target = target
        self.timeout_s = timeout_s
        self.client = AsyncPdserveClient(target)

    async def check(self) -> ServedModel:
        import grpc

        from pdserve.v1 import router_pb2

        try:
            reply = await self.client.stub.ListModels(router_pb2.ListModelsRequest(), timeout=10.0)
        except grpc.aio.AioRpcError as err:
            raise BenchError(f"--target {self.target}: the router does not answer ({err.code().name}: "
                             f"{err.details()})") from None
        if not reply.models:
            raise BenchError(f"--target {self.target}: the router serves no model")
        card = reply.models[0]
        return ServedModel(card.id, card.vocab_size, card.context_length)

    async def send(self, request: BenchRequest, record: RequestRecord, sampling: Sampling) -> None:
        import grpc

        kwargs = dict(max_tokens=request.output_len, temperature=sampling.temperature, ignore_eos=sampling.ignore_eos)
        if request.token_ids is not None:
            kwargs["token_ids"] = request.token_ids
        elif request.messages is not None:
            kwargs["messages"] = request.messages
        else:
            kwargs["prompt"] = request.prompt
        watch = Stopwatch(record, time.perf_counter())
        try:
            async for chunk in self.client.generate(timeout=self.timeout_s, **kwargs):
                watch.tokens(len(chunk.token_ids), time.perf_counter())
                if chunk.finish_reason:
                    record.finish_reason = chunk.finish_reason
                    record.prompt_tokens = chunk.usage.prompt_tokens
                    record.cached_tokens = chunk.usage.cached_prompt_tokens
                    t = chunk.timings
                    record.server = {f.name: getattr(t, f.name) for f in t.DESCRIPTOR.fields}
            watch.done(time.perf_counter())
        except grpc.aio.AioRpcError as err:
            record.error_code, record.error = err.code().name, err.details() or ""

    async def close(self) -> None:
        await self.client.close()


ENDPOINTS = ("/v1/completions", "/v1/chat/completions")


class OpenAIBackend:
    name = "openai"

    def __init__(self, base_url: str, model: str | None = None, timeout_s: float | None = None,
                 api_key: str | None = None, endpoint: str | None = None) -> None:
        import httpx

        # with or without /v1, as vLLM's bench serve takes it; the routes are under /v1
        self.root = base_url.rstrip("/").removesuffix("/v1")
        self.base_url = self.root + "/v1"
        if not self.base_url.startswith(("http://", "https://")):
            raise BenchError(f"--base-url must start with http:// or https://, got {base_url!r}")
        if endpoint is not None and endpoint not in ENDPOINTS:
            raise BenchError(f"--endpoint {endpoint!r}: use one of {', '.join(ENDPOINTS)}")
        self.endpoint = endpoint
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0), headers=headers,
                                      limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))

    async def check(self) -> ServedModel:
        import httpx

        try:
            reply = await self.http.get(f"{self.base_url}/models")
        except httpx.HTTPError as exc:
            raise BenchError(f"--base-url {self.base_url}: cannot connect ({type(exc).__name__}: {exc})") from None
        if reply.status_code != 200:
            raise BenchError(f"--base-url {self.base_url}: GET /models answered HTTP {reply.status_code}")
        try:
            models = [m["id"] for m in reply.json().get("data", [])]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise BenchError(f"--base-url {self.base_url}: GET /models did not return an OpenAI model list") from None
        if self.model is None:
            if not models:
                raise BenchError(f"--base-url {self.base_url}: no model listed; pass --served-model-name")
            self.model = models[0]
        card = next((m for m in reply.json()["data"] if m.get("id") == self.model), {})
        # pdserve's edge (and vLLM's max_model_len) say what random prompts need; other servers leave them 0
        return ServedModel(self.model, int(card.get("vocab_size") or 0), int(card.get("max_model_len") or 0))

    def _body(self, request: BenchRequest, sampling: Sampling) -> tuple[str, dict]:
        body = {"model": self.model, "max_tokens": request.output_len, "temperature": sampling.temperature,
                "stream": True, "stream_options": {"include_usage": True}}
        if sampling.ignore_eos:
            body["ignore_eos"] = True  # vLLM's extension, also accepted by pdserve's edge
        if request.messages is not None:
            if self.endpoint == "/v1/completions":
                raise BenchError("--endpoint /v1/completions: this dataset sends chat messages; use "
                                 "/v1/chat/completions")
            return "/v1/chat/completions", dict(body, messages=request.messages)
        if self.endpoint == "/v1/chat/completions":
            if request.prompt is None:
                raise BenchError("--endpoint /v1/chat/completions: this dataset sends token ids; use /v1/completions")
            return "/v1/chat/completions", dict(body, messages=[{"role": "user", "content": request.prompt}])
        return "/v1/completions", dict(body, prompt=request.token_ids if request.token_ids is not None
                                       else request.prompt)

    async def send(self, request: BenchRequest, record: RequestRecord, sampling: Sampling) -> None:
        import httpx

        path, body = self._body(request, sampling)
        watch = Stopwatch(record, time.perf_counter())
        usage = None
        try:
            async with self.http.stream("POST", self.root + path, json=body) as reply:
                if reply.status_code != 200:
                    text = (await reply.aread()).decode(errors="replace")
                    record.error_code, record.error = f"HTTP {reply.status_code}", _error_message(text)
                    return
                async for line in reply.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        now = time.perf_counter()  # the end of the answer, not of closing the connection
                        break
                    chunk = json.loads(data)
                    if "error" in chunk:
                        record.error_code, record.error = "stream error", _error_message(data)
                        return
                    for choice in chunk.get("choices") or []:
                        piece = (choice.get("delta") or {}).get("content") if "delta" in choice else choice.get("text")
                        watch.tokens(1 if piece else 0, time.perf_counter())
                        if choice.get("finish_reason"):
                            record.finish_reason = choice["finish_reason"]
                    usage = chunk.get("usage") or usage
                    server = server_timings(chunk)
                    if server:
                        record.server = server
                else:
                    now = time.perf_counter()  # a server that ends the stream without [DONE]
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
            record.error_code, record.error = "connection", f"{type(exc).__name__}: {exc}"
            return
        if usage:  # the server's count beats our count of chunks (a chunk may carry several tokens)
            record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            record.completion_tokens = int(usage.get("completion_tokens") or record.completion_tokens)
            record.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        watch.done(now)

    async def close(self) -> None:
        await self.http.aclose()


def server_timings(chunk: dict) -> dict[str, float]:
    """The server's own timings from a chunk: pdserve's edge sends ``pdserve.timings`` as ``{"wall": {"ttft_s":
    ..}, "modeled": {..}}``, which become the Timings message's names (``ttft_modeled_s``), as the gRPC backend
    reports them; a flat ``timings`` object of numbers (another server's) is taken as it is."""
    nested = (chunk.get("pdserve") or {}).get("timings") if isinstance(chunk.get("pdserve"), dict) else None
    if isinstance(nested, dict):
        return {f"{key.removesuffix('_s')}_{clock}_s": float(v) for clock, values in nested.items()
                if isinstance(values, dict) for key, v in values.items() if isinstance(v, (int, float))}
    flat = chunk.get("timings")
    if isinstance(flat, dict):
        return {k: float(v) for k, v in flat.items() if isinstance(v, (int, float))}
    return {}


def _deliver(batch: list[tuple[asyncio.Queue, tuple]]) -> None:
    for events, event in batch:
        events.put_nowait(event)


def _error_message(text: str) -> str:
    """The ``message`` of an OpenAI error body, else the body itself (shortened)."""
    try:
        err = json.loads(text).get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    except (ValueError, AttributeError):
        pass
    return text.strip()[:200]


class InProcessBackend:
    """The engine in this process. One thread owns it: it admits new requests between steps and reports each
    produced token with the instant it was produced, so the same statistics apply as for a served stack."""

    name = "in-process"

    def __init__(self, model: str | None, max_num_seqs: int = 64) -> None:
        from pdserve.engine.llm_engine import LLMEngine
        from pdserve.engine.runtime import Runtime

        self.runtime = Runtime.load(model)
        self.engine = LLMEngine(self.runtime, max_num_seqs=max_num_seqs)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="bench-engine", daemon=True)
        self.thread.start()

    async def check(self) -> ServedModel:
        c = self.runtime.config
        return ServedModel(self.runtime.model_name, c.vocab_size, c.context_length)

    def _loop(self) -> None:
        listeners: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        while not self.stopped.is_set():
            try:
                while True:
                    ids, params, loop, events = self.inbox.get(block=not self.engine.has_work(), timeout=0.05)
                    try:
                        listeners[self.engine.add_request(ids, params).request_id] = (loop, events)
                    except ValueError as exc:  # e.g. an empty prompt
                        loop.call_soon_threadsafe(events.put_nowait, (0, "", time.perf_counter(), str(exc)))
            except queue.Empty:
                pass
            if not self.engine.has_work():
                continue
            produced = self.engine.step()
            now = time.perf_counter()
            batch = []
            for seq, result in produced:
                loop, events = listeners[seq.request_id]
                batch.append((events, (1, result.finish_reason.value if result.finished else "", now, "")))
                if result.finished:
                    del listeners[seq.request_id]
            if batch:  # one wake-up of the event loop per step, not one per token
                loop.call_soon_threadsafe(_deliver, batch)

    async def send(self, request: BenchRequest, record: RequestRecord, sampling: Sampling) -> None:
        from pdserve.engine.params import SamplingParams

        tok = self.runtime.tokenizer
        if request.token_ids is not None:
            ids = request.token_ids
        elif request.messages is not None:
            ids = tok.encode_chat(request.messages)
        else:
            ids = tok.encode(request.prompt)
        params = SamplingParams(max_tokens=request.output_len, temperature=sampling.temperature,
                                ignore_eos=sampling.ignore_eos)
        record.prompt_tokens = len(ids)
        context = self.runtime.config.context_length
        if len(ids) + request.output_len > context:  # as the router would refuse it
            record.error_code = "INVALID_ARGUMENT"
            record.error = f"prompt ({len(ids)} tokens) + max_tokens ({request.output_len}) exceeds the context ({context})"
            return
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        watch = Stopwatch(record, time.perf_counter())
        self.inbox.put((ids, params, loop, events))
        while True:
            n, finish_reason, now, error = await events.get()
            if error:
                record.error_code, record.error = "INVALID_ARGUMENT", error
                return
            watch.tokens(n, now)
            if finish_reason:
                record.finish_reason = finish_reason
                watch.done(now)
                return

    async def close(self) -> None:
        self.stopped.set()
        await asyncio.to_thread(self.thread.join)
