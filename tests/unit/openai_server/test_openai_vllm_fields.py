"""vLLM's request fields at the edge: each one pdserve does not serve is a 400 naming it (never a 200 with less than
asked); structured outputs in all three spellings reach the router as SamplingParams fields; an unknown field is
logged once; an unknown model is 404 model_not_found; add_generation_prompt / truncate_prompt_tokens change the ids."""

import json
import logging

import pytest

from pdserve.openai_server import vllm_fields
from pdserve.v1 import common_pb2, router_pb2
from tests.unit.openai_server.scripted_router import ScriptedRouter, error_of, post

CHAT = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
COMPLETION = {"prompt": "hi", "stream": True}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
LAST = router_pb2.GenerateChunk(request_id="r", token_ids=[5], text="{}", finish_reason="stop",
                                usage=common_pb2.Usage(prompt_tokens=3, completion_tokens=1))


def chat(fields, route="/v1/chat/completions", base=CHAT):
    router = ScriptedRouter(chunks=[LAST])
    return router, post(router, route, dict(base, **fields))


REFUSED_CHAT = [
    ({"chat_template": "{{ messages }}"}, "chat_template"),
    ({"chat_template_kwargs": {"enable_thinking": False}}, "chat_template_kwargs"),
    ({"prompt_logprobs": 1}, "prompt_logprobs"),
    ({"echo": True}, "echo"),
    ({"use_beam_search": True}, "use_beam_search"),
    ({"stream_options": {"continuous_usage_stats": True}}, "stream_options.continuous_usage_stats"),
    ({"length_penalty": 0.5}, "length_penalty"),
    ({"guided_decoding_backend": "xgrammar"}, "guided_decoding_backend"),
    ({"structured_outputs": {"structural_tag": "{}"}}, "structured_outputs.structural_tag"),
    ({"response_format": {"type": "structural_tag"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema"),
    ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_choice"),
    ({"response_format": {"type": "json_object"}, "guided_json": SCHEMA}, "response_format"),
    ({"guided_json": "[1, 2]"}, "guided_json"),
    ({"priority": 3}, "priority"),
]


@pytest.mark.parametrize("fields,param", REFUSED_CHAT, ids=[p for _, p in REFUSED_CHAT])
def test_unserved_chat_fields_are_400_naming_the_field(fields, param):
    router, r = chat(fields)
    assert r.status_code == 400, r.text
    error = error_of(r)
    assert error["param"] == param and param in error["message"] and error["type"] == "invalid_request_error"
    assert router.calls == []  # refused before any work


@pytest.mark.parametrize("fields,param", [({"prompt_logprobs": 0}, "prompt_logprobs"),
                                          ({"response_format": {"type": "json_object"}}, "response_format"),
                                          ({"add_special_tokens": False}, "add_special_tokens")])
def test_unserved_completion_fields_are_400_naming_the_field(fields, param):
    router, r = chat(fields, "/v1/completions", COMPLETION)
    assert r.status_code == 400 and error_of(r)["param"] == param


def test_neutral_values_of_unserved_fields_are_accepted():
    router, r = chat({"use_beam_search": False, "continue_final_message": False, "chat_template_kwargs": {},
                      "echo": False, "length_penalty": 1.0, "stream_options": {"continuous_usage_stats": False}})
    assert r.status_code == 200 and len(router.calls) == 1


@pytest.mark.parametrize("fields,want", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}},
     {"guided_json": json.dumps(SCHEMA)}),
    ({"response_format": {"type": "json_object"}}, {"guided_json_object": True}),
    ({"guided_json": SCHEMA}, {"guided_json": json.dumps(SCHEMA)}),
    ({"guided_json": json.dumps(SCHEMA)}, {"guided_json": json.dumps(SCHEMA)}),
    ({"guided_regex": "[0-9]+"}, {"guided_regex": "[0-9]+"}),
    ({"guided_choice": ["a", "b"]}, {"guided_choice": ["a", "b"]}),
    ({"guided_grammar": 'root ::= "x"'}, {"guided_grammar": 'root ::= "x"'}),
    ({"structured_outputs": {"json": SCHEMA}}, {"guided_json": json.dumps(SCHEMA)}),
    ({"structured_outputs": {"choice": ["y", "n"]}}, {"guided_choice": ["y", "n"]}),
    ({"structured_outputs": {"regex": "a+"}}, {"guided_regex": "a+"}),
    ({"structured_outputs": {"grammar": "start: \"x\""}}, {"guided_grammar": "start: \"x\""}),
    ({"structured_outputs": {"json_object": True}}, {"guided_json_object": True}),
    ({"allowed_token_ids": [3, 4], "bad_words": ["no"]}, {"allowed_token_ids": [3, 4], "bad_words": ["no"]}),
])
def test_structured_outputs_and_masks_reach_the_router(fields, want):
    router, r = chat(fields)
    assert r.status_code == 200, r.text
    [call] = router.calls
    assert {k: call.get(k) for k in want} == want


def test_guided_fields_on_completions_too():
    router, r = chat({"guided_choice": ["a", "b"]}, "/v1/completions", COMPLETION)
    assert r.status_code == 200 and router.calls[0]["guided_choice"] == ["a", "b"]


def test_an_unknown_field_is_logged_once(caplog):
    vllm_fields._logged.discard("some_future_field")
    with caplog.at_level(logging.WARNING, logger="pdserve.openai"):
        for _ in range(3):
            assert chat({"some_future_field": 1})[1].status_code == 200
    assert [m for m in caplog.messages if "some_future_field" in m] == [
        "the request field 'some_future_field' is not recognized and is ignored"]


@pytest.mark.parametrize("route,base", [("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)])
def test_an_unknown_model_is_404_model_not_found(route, base):
    router, r = chat({"model": "gpt-4o"}, route, base)
    error = error_of(r)
    assert r.status_code == 404 and error["code"] == "model_not_found" and error["param"] == "model"
    assert "'m'" in error["message"] and router.calls == []
    assert chat({"model": "m"}, route, base)[1].status_code == 200  # the served name works


def test_add_generation_prompt_false_sends_the_templates_ids_without_it():
    router, r = chat({"add_generation_prompt": False})
    tokenize, call = router.calls
    assert tokenize["tokenize"] and tokenize["add_generation_prompt"] is False
    assert call["token_ids"] == [100] and "messages" not in call  # one message, no generation prompt


def test_truncate_prompt_tokens_keeps_the_last_tokens():
    router, r = chat({"truncate_prompt_tokens": 2}, "/v1/completions", {"prompt": [1, 2, 3, 4], "stream": True})
    assert router.calls[0]["token_ids"] == [3, 4]
    router, r = chat({"truncate_prompt_tokens": 3}, "/v1/completions", {"prompt": "abcdef", "stream": True})
    tokenize, call = router.calls
    assert call["token_ids"] == [103, 104, 105] and "prompt" not in call
