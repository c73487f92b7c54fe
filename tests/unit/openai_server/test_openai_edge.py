"""The HTTP edge in process against a scripted router: status codes, OpenAI's error JSON, the field named in
``param``, Retry-After, 400 (never 500) for malformed bodies, wrong types and unsupported fields (how fields
reach the router: test_openai_edge_fields.py)."""

import asyncio
import json

import grpc
import httpx
import pytest

from pdserve.openai_server.app import create_app
from pdserve.v1 import router_pb2
from tests.unit.openai_server.scripted_router import ScriptedRouter, error_of, post, rpc_error

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
    (b'{"prompt": "hi", "echo": true, "logprobs": 1}', "echo"),
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
    ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "structural_tag"}},
     "response_format.type"),
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


def test_router_down_is_503_and_unhealthy():
    from pdserve.client.client import AsyncPdserveClient
    from pdserve.launcher.ports import free_port

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
    from pdserve.openai_server.http_io import MAX_BODY_BYTES

    router = ScriptedRouter()
    r = post(router, "/v1/completions", json.dumps({"prompt": "x" * (MAX_BODY_BYTES + 1)}).encode())
    assert r.status_code == 413 and "bytes" in error_of(r)["message"] and router.calls == []
