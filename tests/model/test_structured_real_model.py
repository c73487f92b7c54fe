"""Structured outputs and token masks with the real model, in process: every answer matches its spec, whatever the
temperature, and a sequence continued from tokens sampled elsewhere (prefill, another decode worker) keeps its
grammar's place."""

import json
import re

import numpy as np
import pytest

from pdserve.engine.llm_engine import LLMEngine
from pdserve.engine.params import InvalidParameter, SamplingParams

pytestmark = pytest.mark.real_model

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def matches_person(text: str) -> bool:
    value = json.loads(text)
    return set(value) == {"name", "age"} and isinstance(value["name"], str) and type(value["age"]) is int


@pytest.fixture(scope="module")
def engine(real_runtime):
    return LLMEngine(real_runtime)


@pytest.fixture(scope="module")
def prompt(real_runtime):
    return real_runtime.tokenizer.encode_chat([{"role": "user", "content": "Give a person as JSON with name and age."}])


def run(engine, prompt, max_tokens=64, temperatures=(0.0, 0.6), **params):
    """Greedy and one seeded sample at temperature 0.6, each to its end (a cut-off answer could not match)."""
    samples = [SamplingParams(max_tokens=max_tokens, **params, temperature=t, seed=7) for t in temperatures]
    seqs = engine.generate([prompt] * len(samples), samples)
    assert not params or all(seq.finish_reason.value == "stop" for seq in seqs), [s.output_text for s in seqs]
    return [seq.output_text for seq in seqs]


def test_json_schema_answers_parse_and_match(engine, prompt):
    for text in run(engine, prompt, guided_json=json.dumps(PERSON)):
        assert matches_person(text), text


def test_json_object_answers_are_objects(engine, prompt):
    for text in run(engine, prompt, temperatures=(0.0,), guided_json_object=True):  # sampled: objects grow long
        assert isinstance(json.loads(text), dict), text


def test_regex_choice_and_grammar(engine, prompt):
    assert all(re.fullmatch(r"[0-9]{3}-[a-z]{2}", t) for t in run(engine, prompt, guided_regex=r"[0-9]{3}-[a-z]{2}"))
    assert all(t in ("red", "green", "blue") for t in run(engine, prompt, guided_choice=["red", "green", "blue"]))
    for text in run(engine, prompt, guided_grammar='root ::= "(" [0-9]+ ("," [0-9]+)* ")"'):
        assert re.fullmatch(r"\(\d+(,\d+)*\)", text), text


def test_free_text_is_not_json(engine, prompt):
    """The model left alone does not answer the schema's JSON (so the tests above test the constraint)."""
    text = run(engine, prompt)[0]
    with pytest.raises(ValueError):
        matches_person(text)


def test_a_continued_sequence_re_advances_its_grammar(real_runtime, engine, prompt):
    params = SamplingParams(max_tokens=48, temperature=0.0, guided_json=json.dumps(PERSON))
    [whole] = engine.generate([prompt], params)
    # as decode takes over after prefill sampled the first token, or a worker resumes another's sequence
    taken = real_runtime.new_sequence(prompt, params)
    taken.resume_from(whole.output_ids[:5])
    allowed = taken.sampler.grammar.allowed()
    assert allowed[whole.output_ids[5]]
    assert not allowed[whole.output_ids[0]]  # "{" again would break the JSON: the grammar is past it


def test_allowed_token_ids_and_bad_words(real_runtime, engine, prompt):
    [seq] = engine.generate([prompt], SamplingParams(max_tokens=8, temperature=1.0, seed=2,
                                                     allowed_token_ids=[28, 29, 30]))
    assert set(seq.output_ids) <= {28, 29, 30}
    free = engine.generate([prompt], SamplingParams(max_tokens=24, temperature=0.0))[0].output_text
    word = re.findall(r"[A-Za-z]{4,}", free)[0]
    banned = engine.generate([prompt], SamplingParams(max_tokens=24, temperature=0.0, bad_words=[word]))[0]
    assert word in free and word not in banned.output_text


@pytest.mark.parametrize("fields,field", [
    ({"guided_json": "{not json"}, "guided_json"),
    ({"guided_regex": "(ab"}, "guided_regex"),
    ({"guided_grammar": "root ::= ("}, "guided_grammar"),
    ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_choice"),
    ({"allowed_token_ids": [10**6]}, "allowed_token_ids"),
])
def test_bad_specs_are_refused_naming_the_field(fields, field):
    with pytest.raises(InvalidParameter) as err:
        SamplingParams(**fields).validate(vocab_size=49152)
    assert err.value.field == field


def test_the_mask_ends_a_broken_grammar(real_runtime):
    seq = real_runtime.new_sequence([1, 2, 3], SamplingParams(guided_regex="[0-9]+"))
    seq.sampler.record(real_runtime.tokenizer.encode("abc")[0])  # a token from outside the grammar
    assert set(np.flatnonzero(seq.sampler.grammar.allowed())) == set(real_runtime.tokenizer.eos_ids)
