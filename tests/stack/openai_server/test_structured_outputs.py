"""Structured outputs through the whole stack on the real SmolLM2, colocated and disaggregated (where prefill samples
the first token under the grammar and decode continues it): with the official ``openai`` client, every answer parses
and matches its spec, whole and streamed."""

import json
import re

import grpc
import openai
import pytest

from pdserve.client.client import PdserveClient
from tests.helpers import start_stack

pytestmark = pytest.mark.real_model

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
ASK = [{"role": "user", "content": "Give a person as JSON with name and age."}]


@pytest.fixture(scope="module", params=["colocated", "disaggregated"])
def stack(request):
    stack = start_stack(colocated=request.param == "colocated", http_port=0)
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def oai(stack):
    with openai.OpenAI(base_url=stack.http_url + "/v1", api_key="unused", max_retries=0) as client:
        yield client


def test_over_grpc_the_spec_travels_in_sampling_params(stack):
    with PdserveClient(stack.router_target) as c:
        reply = c.complete(messages=ASK, max_tokens=64, temperature=0.6, seed=9, guided_json=json.dumps(PERSON))
        assert reply.finish_reason == "stop"
        person(reply.text)
        with pytest.raises(grpc.RpcError) as err:
            c.complete(prompt="x", max_tokens=4, guided_regex="(ab")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "guided_regex" in err.value.details()


def person(text: str) -> dict:
    value = json.loads(text)
    assert set(value) == {"name", "age"} and isinstance(value["name"], str) and type(value["age"]) is int, text
    return value


def test_json_schema_whole_and_streamed_with_samples(oai):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    whole = oai.chat.completions.create(model="", messages=ASK, max_tokens=64, temperature=0.6, seed=3, n=2,
                                        response_format=fmt)
    assert [c.finish_reason for c in whole.choices] == ["stop", "stop"]
    for choice in whole.choices:
        person(choice.message.content)
    chunks = oai.chat.completions.create(model="", messages=ASK, max_tokens=64, temperature=0, stream=True,
                                         response_format=fmt)
    person("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))


def test_regex_choice_and_grammar_on_both_routes(oai):
    regex = oai.completions.create(model="", prompt="The code is", max_tokens=16, temperature=1.0, seed=5,
                                   extra_body={"guided_regex": "[0-9]{3}-[a-z]{2}"})
    assert re.fullmatch(r"[0-9]{3}-[a-z]{2}", regex.choices[0].text)
    choice = oai.chat.completions.create(model="", messages=[{"role": "user", "content": "Is the sky blue?"}],
                                         max_tokens=8, temperature=0,
                                         extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    assert choice.choices[0].message.content in ("yes", "no")
    grammar = oai.chat.completions.create(model="", messages=ASK, max_tokens=24, temperature=0,
                                          extra_body={"guided_grammar": 'root ::= "(" [0-9]+ ("," [0-9]+)* ")"'})
    assert re.fullmatch(r"\(\d+(,\d+)*\)", grammar.choices[0].message.content)


def test_a_bad_spec_is_400_naming_the_field(oai):
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(model="", messages=ASK, max_tokens=8, extra_body={"guided_regex": "(ab"})
    assert err.value.body["param"] == "guided_regex"
    with pytest.raises(openai.NotFoundError) as err:
        oai.chat.completions.create(model="gpt-4o", messages=ASK, max_tokens=8)
    assert err.value.body["code"] == "model_not_found"
