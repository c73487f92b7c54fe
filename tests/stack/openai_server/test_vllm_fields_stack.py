"""Each vLLM field a newcomer sends, against the real edge in front of a stack (the tiny model): either it does what
vLLM does, or the answer is a 400 naming it; never a 200 that silently ignored it."""

import json
import re

import httpx
import pytest

CHAT = [{"role": "user", "content": "the end of the thing"}]


@pytest.fixture(scope="module")
def http(long_stack):
    with httpx.Client(base_url=long_stack.http_url, timeout=120) as client:
        yield client


def chat(http, **fields):
    return http.post("/v1/chat/completions", json=dict({"messages": CHAT, "max_tokens": 12, "temperature": 0}, **fields))


def completion(http, **fields):
    return http.post("/v1/completions", json=dict({"prompt": "the end of the", "max_tokens": 12, "temperature": 0},
                                                  **fields))


def content(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("fields,check", [
    ({"guided_json": {"type": "boolean"}}, lambda t: isinstance(json.loads(t), bool)),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "b", "schema": {"type": "boolean"}}}},
     lambda t: isinstance(json.loads(t), bool)),
    ({"guided_choice": ["the end", "a thing"]}, lambda t: t in ("the end", "a thing")),
    ({"guided_regex": "[a-z]{1,6}"}, lambda t: re.fullmatch("[a-z]{1,6}", t)),
    ({"guided_grammar": 'root ::= "the" (" end")?'}, lambda t: t in ("the", "the end")),
    ({"structured_outputs": {"choice": ["yes", "no"]}}, lambda t: t in ("yes", "no")),
    ({"structured_outputs": {"regex": "(ab)+"}}, lambda t: re.fullmatch("(ab)+", t)),
])
def test_structured_output_fields_constrain_the_answer(http, fields, check):
    def holds(text: str) -> bool:
        try:
            return bool(check(text))
        except ValueError:
            return False

    text = content(chat(http, **fields))
    assert holds(text), text
    assert not holds(content(chat(http)))  # the model alone would not have answered so


def test_token_masks(http):
    free = completion(http).json()["choices"][0]["text"]
    word = free.split()[0]
    assert word not in completion(http, bad_words=[word]).json()["choices"][0]["text"].split()
    ids = http.post("/tokenize", json={"prompt": " end"}).json()["tokens"]
    r = completion(http, allowed_token_ids=ids, logprobs=0)
    texts = {http.post("/detokenize", json={"tokens": [i]}).json()["prompt"] for i in ids}
    assert r.status_code == 200 and set(r.json()["choices"][0]["logprobs"]["tokens"]) <= texts


def test_prompt_fields(http):
    with_prompt = chat(http).json()["usage"]["prompt_tokens"]
    without = chat(http, add_generation_prompt=False).json()["usage"]["prompt_tokens"]
    assert without < with_prompt
    assert completion(http, truncate_prompt_tokens=2).json()["usage"]["prompt_tokens"] == 2


@pytest.mark.parametrize("fields,param", [
    ({"chat_template": "{{ messages }}"}, "chat_template"),
    ({"chat_template_kwargs": {"enable_thinking": False}}, "chat_template_kwargs"),
    ({"prompt_logprobs": 1}, "prompt_logprobs"),
    ({"echo": True}, "echo"),
    ({"use_beam_search": True}, "use_beam_search"),
    ({"stream": True, "stream_options": {"continuous_usage_stats": True}}, "stream_options.continuous_usage_stats"),
    ({"guided_regex": "(unclosed"}, "guided_regex"),  # the router compiles it: its field name comes back as sent
    ({"structured_outputs": {"grammar": "root ::= ("}}, "structured_outputs.grammar"),
])
def test_unserved_fields_are_400_naming_them(http, fields, param):
    r = chat(http, **fields)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_an_unknown_model_is_404(http):
    r = chat(http, model="meta-llama/Llama-3-8B")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_request_level_metrics_on_the_edges_own_metrics(http):
    """vLLM's users read TTFT, TPOT and token counts from the server's /metrics: the edge's carries them."""
    def count(text: str, name: str) -> float:
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))

    before = http.get("/metrics").text
    assert completion(http, max_tokens=5, ignore_eos=True).status_code == 200
    assert chat(http, max_tokens=5, ignore_eos=True, stream=True).status_code == 200
    after = http.get("/metrics").text
    for name in ("pdserve_http_time_to_first_token_seconds_count", "pdserve_http_time_to_first_token_modeled_seconds_count",
                 "pdserve_http_time_per_output_token_seconds_count", "pdserve_http_e2e_request_latency_seconds_count"):
        assert count(after, name) - count(before, name) == 2, name
    assert count(after, "pdserve_http_generation_tokens_total") - count(before, "pdserve_http_generation_tokens_total") \
        == 10


def test_completions_echo_puts_the_prompt_first(http):
    plain = completion(http).json()["choices"][0]["text"]
    assert completion(http, echo=True).json()["choices"][0]["text"] == "the end of the" + plain
    ids = http.post("/tokenize", json={"prompt": "the end of the"}).json()["tokens"]
    streamed = http.post("/v1/completions", json={"prompt": ids, "max_tokens": 12, "temperature": 0, "echo": True,
                                                  "stream": True})
    texts = [json.loads(line[6:])["choices"][0]["text"] for line in streamed.text.splitlines()
             if line.startswith("data: {")]
    assert "".join(texts) == "the end of the" + plain and texts[0].startswith("the end of the")


def test_continue_final_message_continues_the_assistants_text(http):
    messages = CHAT + [{"role": "assistant", "content": "the end of"}]
    closed = http.post("/tokenize", json={"messages": messages, "add_generation_prompt": False}).json()["count"]
    r = chat(http, messages=messages, continue_final_message=True, add_generation_prompt=False, max_tokens=6)
    assert r.status_code == 200, r.text
    rendered = http.post("/detokenize", json={"tokens": http.post("/tokenize", json={
        "messages": messages, "add_generation_prompt": False}).json()["tokens"]}).json()["prompt"]
    # the prompt stops right after "the end of": the end-of-turn the template writes after it is not sent
    assert r.json()["usage"]["prompt_tokens"] < closed and not rendered.endswith("the end of")
    for fields in ({"continue_final_message": True},  # add_generation_prompt left true: vLLM refuses both
                   {"continue_final_message": True, "add_generation_prompt": False, "messages": CHAT}):  # last: user
        r = chat(http, **fields)
        assert r.status_code == 400 and r.json()["error"]["param"] == "continue_final_message"
