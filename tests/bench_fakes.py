"""Fake servers with known, fixed delays for the load tool's tests: a gRPC Router and an OpenAI-compatible HTTP
endpoint streaming server-sent events. Each answers a request with ``TOKENS`` chunks, the first after ``TTFT_S``,
the others ``ITL_S`` apart, and a final chunk with usage and modeled timings; a prompt containing "FAIL" is refused.

Tests that measure the delays use those defaults (a loaded machine needs absolute slack around them); tests of
arrivals, durations and reports pass shorter ones so they do not wait on them."""

from __future__ import annotations

import json
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc

from pdserve.v1 import common_pb2, router_pb2, router_pb2_grpc

TTFT_S = 0.20
ITL_S = 0.05
TOKENS = 5
PROMPT_TOKENS = 40
CACHED_TOKENS = 16
MODELED = {"ttft_modeled_s": 0.123, "tpot_modeled_s": 0.0045, "e2e_modeled_s": 0.141, "queue_modeled_s": 0.0}
VOCAB = 1000


def _prompt_text(request: router_pb2.GenerateRequest) -> str:
    if request.HasField("chat"):
        return " ".join(m.content for m in request.chat.messages)
    return request.text


class FakeRouter(router_pb2_grpc.RouterServicer):
    def __init__(self, ttft_s: float = TTFT_S, itl_s: float = ITL_S) -> None:
        self.ttft_s, self.itl_s = ttft_s, itl_s

    def Generate(self, request, context):
        if "FAIL" in _prompt_text(request):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "fake queue is full")
        time.sleep(self.ttft_s)
        for i in range(TOKENS):
            if i:
                time.sleep(self.itl_s)
            yield router_pb2.GenerateChunk(token_ids=[7], text="x")
        yield router_pb2.GenerateChunk(
            finish_reason="length",
            usage=common_pb2.Usage(prompt_tokens=PROMPT_TOKENS, completion_tokens=TOKENS,
                                   cached_prompt_tokens=CACHED_TOKENS),
            timings=common_pb2.Timings(**MODELED))

    def ListModels(self, request, context):
        return router_pb2.ListModelsResponse(models=[router_pb2.ModelCard(id="fake", vocab_size=VOCAB,
                                                                          context_length=4096)])


def start_fake_router(ttft_s: float = TTFT_S, itl_s: float = ITL_S) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    router_pb2_grpc.add_RouterServicer_to_server(FakeRouter(ttft_s, itl_s), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


class _OpenAIHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the stream ends when the connection closes after [DONE]
    ttft_s, itl_s = TTFT_S, ITL_S

    def log_message(self, *args) -> None:
        pass

    def _json(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        chat = self.path == "/v1/chat/completions"
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self._json(404, {"error": {"message": "not found"}})
        if "FAIL" in json.dumps(body.get("messages") or body.get("prompt")):
            return self._json(429, {"error": {"message": "fake rate limit", "type": "rate_limit"}})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def event(payload) -> None:
            self.wfile.write(f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode())
            self.wfile.flush()

        time.sleep(self.ttft_s)
        for i in range(TOKENS):
            if i:
                time.sleep(self.itl_s)
            choice = {"index": 0, "delta": {"content": "x"}} if chat else {"index": 0, "text": "x"}
            choice["finish_reason"] = "length" if i == TOKENS - 1 else None
            event({"id": "c", "object": "chunk", "choices": [choice]})
        event({"id": "c", "choices": [], "timings": MODELED,
               "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": TOKENS,
                         "prompt_tokens_details": {"cached_tokens": CACHED_TOKENS}}})
        event("[DONE]")


def start_fake_openai(ttft_s: float = TTFT_S, itl_s: float = ITL_S) -> tuple[ThreadingHTTPServer, str]:
    handler = type("OpenAIHandler", (_OpenAIHandler,), {"ttft_s": ttft_s, "itl_s": itl_s})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"
