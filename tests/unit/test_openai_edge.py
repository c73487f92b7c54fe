"""The HTTP edge in process against a scripted router: status codes, OpenAI's error JSON, the field named in
``param``, Retry-After, 400 (never 500) for malformed bodies, wrong types and unsupported fields; how request fields
reach the router and how its answers are shaped."""

import asyncio
import json

import grpc
import httpx
import pytest

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


UPSTREAM = [
    (grpc.StatusCode.INVALID_ARGUMENT, "temperature: must be in [0, 100], got 200", 400, "temperature"),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "router is at its limit of 512 requests in flight; retry later", 429, None),
    (grpc.StatusCode.UNAVAILABLE, "decode: no decode worker could take the request", 503, None),
    (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", 504, None),
    (grpc.StatusCode.INTERNAL, "decode failed: boom", 500, None),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("code,details,status,param", UPSTREAM, ids=[u[0].name for u in UPSTREAM])
def test_router_status_becomes_http_status(code, details, status, param, stream):
    router = ScriptedRouter(rpc_error(code, details))
    r = post(router, "/v1/completions", {"prompt": "hi", "stream": stream})
    assert r.status_code == status
    error = error_of(r)
    assert error["param"] == param and error["code"] == code.name.lower()
    assert details.split(": ", 1)[-1] in error["message"]
    if status >= 500:  # a failure of the plumbing names the role that failed, the router unless it named another
        assert error["message"].startswith(("decode:", "router:"))
    assert (r.headers.get("retry-after") == "3") == (status == 429)


def test_the_rich_status_names_the_field():
    """The router's BadRequest.FieldViolation is what names ``param`` (the details' prefix is only a fallback)."""
    from google.rpc import error_details_pb2

    from pdserve.common.status import rich_status

    violation = error_details_pb2.BadRequest.FieldViolation(field="prompt.chat.messages[0].role")
    status = rich_status(grpc.StatusCode.INVALID_ARGUMENT, "no prefix here: 'wizard' is not a role",
                         error_details_pb2.BadRequest(field_violations=[violation]))
    err = grpc.aio.AioRpcError(status.code, grpc.aio.Metadata(), grpc.aio.Metadata(*status.trailing_metadata),
                               status.details)
    r = post(ScriptedRouter(err), "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]})
    assert r.status_code == 400
    assert error_of(r)["param"] == "messages[0].role"


def test_router_field_names_become_the_requests_own():
    cases = [("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 9},
              "max_tokens: prompt (5 tokens) + max_tokens (9) exceeds", "max_completion_tokens"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]},
              "prompt.chat.messages[0].role: 'x' is not one of", "messages[0].role"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]},
              "prompt: 70 tokens leave no room", "messages"),
             ("/v1/completions", {"prompt": [1, 2]}, "prompt.token_ids: token id 99 is outside", "prompt")]
    for path, body, details, param in cases:
        r = post(ScriptedRouter(rpc_error(grpc.StatusCode.INVALID_ARGUMENT, details)), path, body)
        assert r.status_code == 400 and error_of(r)["param"] == param
        assert error_of(r)["message"].startswith(param + ": ")


BAD_BODIES = [
    (b"{not json", None),
    (b"\xff\xfe", None),
    (b"", None),
    (b"[1, 2]", None),
    (b'{"max_tokens": 3}', "prompt"),
    (b'{"prompt": 5}', "prompt"),
    (b'{"prompt": "hi", "max_tokens": "3"}', "max_tokens"),
    (b'{"prompt": "hi", "max_tokens": -1}', "max_tokens"),
    (b'{"prompt": "hi", "temperature": "hot"}', "temperature"),
    (b'{"prompt": "hi", "stream": "yes"}', "stream"),
    (b'{"prompt": "hi", "stop": [1]}', "stop"),
    (b'{"prompt": "hi", "seed": -5}', "seed"),
    (b'{"prompt": [1, -2]}', "prompt"),
    (b'{"prompt": []}', "prompt"),
    (b'{"prompt": ["a", "b"]}', "prompt"),
    (b'{"prompt": "hi", "n": -2}', "n"),
    (b'{"prompt": "hi", "logprobs": true}', "logprobs"),
    (b'{"prompt": "hi", "echo": true}', "echo"),
    (b'{"prompt": "hi", "best_of": 3}', "best_of"),
    (b'{"prompt": "hi", "logit_bias": {"5": 1.0}}', "logit_bias"),
    (b'{"prompt": "hi", "skip_special_tokens": false}', "skip_special_tokens"),
    (b'{"prompt": "hi", "stream_options": {"include_usage": true}}', "stream_options"),
]


@pytest.mark.parametrize("body,param", BAD_BODIES, ids=[b.decode(errors="replace")[:40] for b, _ in BAD_BODIES])
def test_bad_completion_bodies_are_400_naming_the_field(body, param):
    router = ScriptedRouter()
    r = post(router, "/v1/completions", body)
    assert r.status_code == 400, r.text
    assert error_of(r)["param"] == param and error_of(r)["type"] == "invalid_request_error"
    assert router.calls == []  # refused before reaching the router


BAD_CHAT = [
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": "hi"}], "logprobs": 1}, "logprobs"),
    ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "tools"),
    ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 1.5}, "max_completion_tokens"),
]


@pytest.mark.parametrize("body,param", BAD_CHAT, ids=[p for _, p in BAD_CHAT])
def test_bad_chat_bodies_are_400_naming_the_field(body, param):
    router = ScriptedRouter()
    r = post(router, "/v1/chat/completions", body)
    assert r.status_code == 400, r.text
    assert error_of(r)["param"] == param
    assert router.calls == []


def test_error_after_the_first_chunk_is_an_event_then_done():
    first = router_pb2.GenerateChunk(request_id="r", token_ids=[5], text="a")
    router = ScriptedRouter(rpc_error(grpc.StatusCode.UNAVAILABLE, "decode: worker went away"), [first])
    r = post(router, "/v1/completions", {"prompt": "hi", "stream": True})
    assert r.status_code == 200
    events = [line[len("data: "):] for line in r.text.splitlines() if line]
    assert json.loads(events[0])["choices"][0]["text"] == "a"
    assert "worker went away" in json.loads(events[1])["error"]["message"]
    assert events[2] == "[DONE]"


def test_unknown_route_and_method_are_openai_errors():
    router = ScriptedRouter()
    assert error_of(post(router, "/v1/embeddings", {}))["type"] == "not_found_error"

    async def get():
        transport = httpx.ASGITransport(app=create_app(client=router))
        async with httpx.AsyncClient(transport=transport, base_url="http://edge") as http:
            return await http.get("/v1/completions")
    r = asyncio.run(get())
    assert r.status_code == 405 and "error" in r.json()


def test_request_fields_reach_the_router_with_their_meaning():
    last = router_pb2.GenerateChunk(request_id="r", token_ids=[5], text="a", finish_reason="repetition",
                                    usage=common_pb2.Usage(prompt_tokens=3, completion_tokens=1))
    router = ScriptedRouter(chunks=[last])
    body = {"messages": [{"role": "developer", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
            "max_completion_tokens": 7, "max_tokens": 3, "stop": "x", "seed": 4, "top_k": 5, "min_tokens": 1,
            "stream": True, "user": "u1", "some_future_field": {"ignored": True}}
    r = post(router, "/v1/chat/completions", body, headers={"x-request-id": "abc"})
    [call] = router.calls
    assert call["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ab"}]
    assert call["max_tokens"] == 7 and call["stop"] == ["x"] and call["seed"] == 4 and call["top_k"] == 5
    assert call["request_id"] == "abc" and "temperature" not in call  # unset: the router's default
    chunk = json.loads(r.text.splitlines()[0][len("data: "):])
    assert chunk["id"] == "chatcmpl-abc" and r.headers["x-request-id"] == "abc"
    assert chunk["choices"][0]["finish_reason"] == "stop"  # OpenAI's value ...
    assert chunk["choices"][0]["pdserve_finish_reason"] == "repetition"  # ... and pdserve's own


def logprobs_entry(token_id: int, text: str, logprob: float, top: list[tuple[int, str, float]]) -> common_pb2.Logprobs:
    def one(t, s, v):
        return common_pb2.TokenLogprob(token_id=t, token=s, token_bytes=s.encode(), logprob=v)
    return common_pb2.Logprobs(sampled=one(token_id, text, logprob), rank=1, top=[one(*t) for t in top])


N_LOGPROB_CHUNKS = [
    router_pb2.GenerateChunk(request_id="r", index=0, token_ids=[5], text="a",
                             logprobs=[logprobs_entry(5, "a", -0.5, [(5, "a", -0.5), (6, "é", -1.5)])]),
    router_pb2.GenerateChunk(request_id="r", index=1, token_ids=[6], text="é",
                             logprobs=[logprobs_entry(6, "é", -1.5, [(5, "a", -0.5), (6, "é", -1.5)])]),
    router_pb2.GenerateChunk(request_id="r", index=0, token_ids=[7], text="b", finish_reason="length",
                             logprobs=[logprobs_entry(7, "b", float("-inf"), [(5, "a", -0.5), (6, "é", -1.5)])]),
    router_pb2.GenerateChunk(request_id="r", index=1, token_ids=[5], text="a", finish_reason="length",
                             logprobs=[logprobs_entry(5, "a", -0.25, [(5, "a", -0.25), (6, "é", -1.0)])],
                             usage=common_pb2.Usage(prompt_tokens=3, completion_tokens=4)),
]


def events(r: httpx.Response) -> list[dict]:
    return [json.loads(line[len("data: "):]) for line in r.text.splitlines()
            if line.startswith("data: {")]


def test_chat_n_and_logprobs_reach_the_router_and_come_back_in_openais_shape():
    router = ScriptedRouter(chunks=N_LOGPROB_CHUNKS)
    body = {"messages": [{"role": "user", "content": "hi"}], "n": 2, "logprobs": True, "top_logprobs": 2,
            "stream": True, "stream_options": {"include_usage": True}}
    r = post(router, "/v1/chat/completions", body)
    [call] = router.calls
    assert call["n"] == 2 and call["logprobs"] == 2
    chunks = events(r)
    assert [c["choices"][0]["index"] for c in chunks[:4]] == [0, 1, 0, 1]
    assert [c["choices"][0]["delta"].get("role") for c in chunks[:4]] == ["assistant", "assistant", None, None]
    first = chunks[0]["choices"][0]["logprobs"]["content"]
    assert first == [{"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": [
        {"token": "a", "logprob": -0.5, "bytes": [97]}, {"token": "é", "logprob": -1.5, "bytes": [195, 169]}]}]
    assert chunks[2]["choices"][0]["logprobs"]["content"][0]["logprob"] == -9999.0  # JSON has no -Infinity
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4


def test_completions_logprobs_shape_and_text_offsets():
    router = ScriptedRouter(chunks=N_LOGPROB_CHUNKS)
    r = post(router, "/v1/completions", {"prompt": "hi", "n": 2, "logprobs": 2, "stream": True})
    assert router.calls[0]["logprobs"] == 2
    by_index: dict[int, list] = {0: [], 1: []}
    for c in events(r):
        choice = c["choices"][0]
        by_index[choice["index"]].append(choice["logprobs"])
    assert [lp["tokens"] for lp in by_index[1]] == [["é"], ["a"]]
    assert [lp["text_offset"] for lp in by_index[1]] == [[0], [1]]  # characters, not bytes
    assert by_index[0][0]["top_logprobs"] == [{"a": -0.5, "é": -1.5}]
    assert by_index[0][0]["token_logprobs"] == [-0.5]


def test_no_logprobs_asked_none_sent():
    router = ScriptedRouter(chunks=N_LOGPROB_CHUNKS[2:3])
    r = post(router, "/v1/completions", {"prompt": "hi", "stream": True})
    assert router.calls[0]["logprobs"] is None and "n" not in router.calls[0]
    assert events(r)[0]["choices"][0]["logprobs"] is None


def test_unset_max_tokens_is_left_to_the_router():
    router = ScriptedRouter(chunks=[router_pb2.GenerateChunk(finish_reason="length")])
    post(router, "/v1/completions", {"prompt": "hi", "stream": True})
    assert router.calls[0]["max_tokens"] is None


@pytest.mark.parametrize("stop_ids,reason,want", [([7], "7", 7), ([], "7", None), ([], "</s>", "</s>")],
                         ids=["stop_token_id", "eos", "stop_string"])
def test_stop_reason_follows_vllm(stop_ids, reason, want):
    last = router_pb2.GenerateChunk(finish_reason="stop", stop_reason=reason)
    body = {"prompt": "hi", "stream": True, "stop_token_ids": stop_ids, "stop": ["</s>"]}
    r = post(ScriptedRouter(chunks=[last]), "/v1/completions", body)
    assert json.loads(r.text.splitlines()[0][len("data: "):])["choices"][0]["stop_reason"] == want


def test_router_down_is_503_and_unhealthy():
    from pdserve.client.client import AsyncPdserveClient
    from pdserve.launcher.stack import free_port

    async def go():
        router = AsyncPdserveClient(f"127.0.0.1:{free_port()}")  # nothing listens there
        transport = httpx.ASGITransport(app=create_app(client=router))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://edge") as http:
                return (await http.get("/health"), await http.post("/v1/completions", json={"prompt": "hi"}),
                        await http.post("/tokenize", json={"prompt": "hi"}))
        finally:
            await router.close()
    health, completion, tokenize = asyncio.run(go())
    assert health.status_code == completion.status_code == tokenize.status_code == 503
    assert error_of(completion)["type"] == "service_unavailable_error"


def test_oversized_body_is_413_not_a_retryable_error():
    from pdserve.openai_server.app import MAX_BODY_BYTES

    router = ScriptedRouter()
    r = post(router, "/v1/completions", json.dumps({"prompt": "x" * (MAX_BODY_BYTES + 1)}).encode())
    assert r.status_code == 413 and "bytes" in error_of(r)["message"] and router.calls == []
