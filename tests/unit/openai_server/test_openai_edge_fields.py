"""The HTTP edge in process against a scripted router: how request fields reach the router (with their
meaning, or unset for the router to decide) and how answers, logprobs and stop reasons come back in OpenAI's shape."""

import json

import pytest

from pdserve.v1 import common_pb2, router_pb2
from tests.unit.openai_server.scripted_router import ScriptedRouter, events, logprobs_entry, post

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


@pytest.mark.parametrize("route,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}]}),
    ("/v1/completions", {"prompt": "a"}),
])
def test_stop_when_complete_reaches_the_router_and_complete_is_a_stop(route, body):
    last = router_pb2.GenerateChunk(request_id="r", token_ids=[5], text="a.", finish_reason="complete",
                                    usage=common_pb2.Usage(prompt_tokens=3, completion_tokens=1))
    router = ScriptedRouter(chunks=[last])
    r = post(router, route, dict(body, stop_when_complete=0.75, stop_when_complete_interval=8, stream=True))
    [call] = router.calls
    assert call["stop_when_complete"] == 0.75 and call["stop_when_complete_interval"] == 8
    [choice] = events(r)[0]["choices"]
    assert choice["finish_reason"] == "stop" and choice["pdserve_finish_reason"] == "complete"


def test_stop_when_complete_interval_unset_is_left_to_the_router():
    router = ScriptedRouter(chunks=[router_pb2.GenerateChunk(request_id="r", token_ids=[5], finish_reason="length")])
    post(router, "/v1/completions", {"prompt": "a", "stop_when_complete": 1, "stream": True})
    [call] = router.calls
    assert call["stop_when_complete"] == 1.0 and "stop_when_complete_interval" not in call


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
