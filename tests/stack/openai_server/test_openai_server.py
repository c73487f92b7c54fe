"""The HTTP edge in front of a real stack on the tiny model: the official ``openai`` client, plain HTTP, the router's
Tokenize/Detokenize and max_tokens/x-request-id rules (clients that go away: test_openai_disconnects.py)."""

import json

import grpc
import httpx
import openai
import pytest

from pdserve.client.client import PdserveClient
from pdserve.v1 import router_pb2, router_pb2_grpc
from tests import REPO_ROOT
from tests.helpers import decode_load, wait_until

ROOT = REPO_ROOT
CONTEXT = 4096  # the tiny long model's
CHAT = [{"role": "user", "content": "the end of the thing"}]


@pytest.fixture(scope="module")
def stack(long_stack):
    return long_stack


@pytest.fixture(scope="module")
def oai(stack):
    with openai.OpenAI(base_url=stack.http_url + "/v1", api_key="unused", max_retries=0) as client:
        yield client


def sse_events(response: httpx.Response) -> list[str]:
    lines = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines), lines
    return [line[len("data: "):] for line in lines]


# --- the official openai client -----------------------------------------------------------------------------------
def test_completion_matches_the_grpc_api(stack, oai):
    with PdserveClient(stack.router_target) as c:
        want = c.complete("the end of the", max_tokens=12, temperature=0)
    got = oai.completions.create(model="tiny-long", prompt="the end of the", max_tokens=12, temperature=0)
    [choice] = got.choices
    assert choice.text == want.text and choice.finish_reason == want.finish_reason == "length"
    assert got.usage.prompt_tokens == want.usage.prompt_tokens and got.usage.completion_tokens == 12
    assert got.usage.total_tokens == want.usage.total_tokens == want.usage.prompt_tokens + 12
    assert got.object == "text_completion" and got.model == "tiny-long"
    timings = got.model_extra["pdserve"]["timings"]
    assert timings["wall"]["ttft_s"] > 0 and timings["modeled"]["ttft_s"] > 0 and timings["modeled"]["tpot_s"] > 0


def test_completion_stream_equals_the_whole_answer(stack, oai):
    whole = oai.completions.create(model="tiny-long", prompt=[5, 6, 7, 8], max_tokens=10, temperature=0)
    chunks = list(oai.completions.create(model="tiny-long", prompt=[5, 6, 7, 8], max_tokens=10, temperature=0,
                                         stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks[:-1]) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks[:-1]][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-2])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10  # include_usage's last chunk
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens == 4


def test_chat_whole_and_streamed_with_a_stop_string(stack, oai):
    probe = oai.chat.completions.create(model="tiny-long", messages=CHAT, max_tokens=20, temperature=0)
    text = probe.choices[0].message.content
    assert probe.choices[0].message.role == "assistant" and probe.object == "chat.completion" and text
    stop = text[len(text) // 2:][:2]  # a stop string the answer reaches
    whole = oai.chat.completions.create(model="tiny-long", messages=CHAT, max_completion_tokens=20, temperature=0,
                                        stop=[stop])
    assert whole.choices[0].finish_reason == "stop"
    assert whole.choices[0].model_extra["stop_reason"] == stop
    assert whole.choices[0].message.content == text[:text.index(stop)]
    chunks = list(oai.chat.completions.create(model="tiny-long", messages=CHAT, max_tokens=20, temperature=0,
                                              stop=[stop], stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].object == "chat.completion.chunk"
    assert chunks[-1].model_extra["pdserve"]["timings"]["modeled"]["e2e_s"] > 0


def test_shared_prefix_is_reported_as_cached_tokens(oai):
    system = {"role": "system", "content": "the thing is in the end and at the start it is the thing " * 3}
    first = oai.chat.completions.create(model="tiny-long", messages=[system, {"role": "user", "content": "one"}],
                                        max_tokens=2, temperature=0)
    second = oai.chat.completions.create(model="tiny-long", messages=[system, {"role": "user", "content": "two"}],
                                         max_tokens=2, temperature=0)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert 32 <= second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens


def test_openai_client_raises_the_matching_errors(oai):
    with pytest.raises(openai.BadRequestError) as err:
        oai.completions.create(model="tiny-long", prompt="hi", max_tokens=CONTEXT + 1)
    assert err.value.body["param"] == "max_tokens" and "context length" in err.value.body["message"]
    with pytest.raises(openai.NotFoundError) as err:  # as OpenAI and vLLM answer
        oai.chat.completions.create(model="gpt-5", messages=CHAT)
    assert err.value.body["param"] == "model" and err.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(model="tiny-long", messages=CHAT, n=99)
    assert err.value.body["param"] == "n" and "1..16" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(model="tiny-long", messages=CHAT, logprobs=True, top_logprobs=21)
    assert err.value.body["param"] == "top_logprobs"


def test_chat_n_samples_with_logprobs_match_the_grpc_api(stack, oai):
    params = dict(max_tokens=6, temperature=0.8, seed=3, ignore_eos=True)
    with PdserveClient(stack.router_target) as c:
        want = c.complete(messages=CHAT, n=2, logprobs=2, **params)
    got = oai.chat.completions.create(model="tiny-long", messages=CHAT, n=2, logprobs=True, top_logprobs=2,
                                      max_completion_tokens=6, temperature=0.8, seed=3, extra_body={"ignore_eos": True})
    assert [c.index for c in got.choices] == [0, 1]
    for choice, w in zip(got.choices, want.choices):
        assert choice.message.content == w.text
        content = choice.logprobs.content
        # abs 1e-4: the second request reuses the first's prompt blocks, so its forward runs in other shapes
        # (float32 summation order); the sampled tokens themselves are compared exactly above
        assert [t.logprob for t in content] == pytest.approx([lp.sampled.logprob for lp in w.logprobs], abs=1e-4)
        assert [t.bytes for t in content] == [list(lp.sampled.token_bytes) for lp in w.logprobs]
        assert all(len(t.top_logprobs) == 2 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
                   for t in content)
    assert got.usage.prompt_tokens == want.usage.prompt_tokens  # the prompt counted once
    assert got.usage.completion_tokens == 12
    stream = oai.chat.completions.create(model="tiny-long", messages=CHAT, n=2, logprobs=True, stream=True,
                                         max_completion_tokens=6, temperature=0.8, seed=3,
                                         extra_body={"ignore_eos": True})
    texts = {0: "", 1: ""}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            assert choice.logprobs is not None and len(choice.logprobs.content) == 1
    assert texts == {0: want.choices[0].text, 1: want.choices[1].text}


def test_completion_logprobs(oai):
    got = oai.completions.create(model="tiny-long", prompt="the end of the", max_tokens=5, temperature=0, logprobs=3)
    lp = got.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 5
    assert "".join(lp.tokens) == got.choices[0].text  # the tiny model's tokens are whole characters
    for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):  # greedy: the top-1 token
        assert len(top) == 3 and max(top, key=top.get) == token and value == pytest.approx(top[token]) and value < 0


def test_models(oai):
    [model] = oai.models.list().data
    assert model.id == "tiny-long" and model.model_extra["max_model_len"] == CONTEXT


# --- plain HTTP ----------------------------------------------------------------------------------------------------
def test_sse_wire_format_and_request_id(stack):
    body = {"prompt": "the end", "max_tokens": 4, "temperature": 0, "stream": True}
    with httpx.stream("POST", stack.http_url + "/v1/completions", json=body,
                      headers={"x-request-id": "trace-42"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-request-id"] == "trace-42"
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["id"] for c in chunks} == {"cmpl-trace-42"}
    assert chunks[-1]["pdserve"]["request_id"] == "trace-42" and chunks[-1]["choices"][0]["finish_reason"]


def test_too_long_request_id_is_refused_by_the_router(stack):
    r = httpx.post(stack.http_url + "/v1/completions", json={"prompt": "x", "max_tokens": 1},
                   headers={"x-request-id": "r" * 129})
    assert r.status_code == 400 and r.json()["error"]["param"] == "x-request-id"
    assert "128" in r.json()["error"]["message"]


def test_unset_max_tokens_runs_to_the_end_of_the_context(stack):
    prompt = [5 + i % 200 for i in range(CONTEXT - 20)]
    r = httpx.post(stack.http_url + "/v1/completions", json={"prompt": prompt, "ignore_eos": True, "temperature": 0},
                   timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 20 and r.json()["choices"][0]["finish_reason"] == "length"


def test_tokenize_and_detokenize_over_http(stack, oai):
    tok = httpx.post(stack.http_url + "/tokenize", json={"messages": CHAT, "return_token_strs": True}).json()
    answer = oai.chat.completions.create(model="tiny-long", messages=CHAT, max_tokens=1)
    assert tok["count"] == len(tok["tokens"]) == len(tok["token_strs"]) == answer.usage.prompt_tokens
    assert tok["max_model_len"] == CONTEXT
    text = httpx.post(stack.http_url + "/tokenize", json={"prompt": "the end of it"}).json()["tokens"]
    assert httpx.post(stack.http_url + "/detokenize", json={"tokens": text}).json() == {"prompt": "the end of it"}
    bad = httpx.post(stack.http_url + "/detokenize", json={"tokens": [10**6]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"


def test_health_and_metrics(stack):
    assert httpx.get(stack.http_url + "/health").status_code == 200
    metrics = httpx.get(stack.http_url + "/metrics").text
    assert 'pdserve_http_requests_total{route="/health",status="200"}' in metrics


def test_a_request_id_already_in_flight_is_refused(stack):
    """Workers key a request's KV by its id: two at once under one id would corrupt each other."""
    long = {"prompt": list(range(3, 30)), "max_tokens": 4000, "ignore_eos": True, "temperature": 0, "stream": True}
    headers = {"x-request-id": "dup-1"}
    with httpx.stream("POST", stack.http_url + "/v1/completions", json=long, headers=headers) as r:
        lines = r.iter_lines()  # kept: a dropped iterator would close the stream
        next(line for line in lines if line)
        twin = httpx.post(stack.http_url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, headers=headers)
        assert twin.status_code == 409 and twin.json()["error"]["param"] == "x-request-id"
        with PdserveClient(stack.router_target) as c, pytest.raises(grpc.RpcError) as err:
            c.complete("x", max_tokens=1, request_id="dup-1")
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    wait_until(lambda: decode_load(stack, stack.decodes[0]).running == 0, what="the first one was cancelled")
    again = httpx.post(stack.http_url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, headers=headers)
    assert again.status_code == 200 and again.json()["id"] == "cmpl-dup-1"


# --- the router's gRPC API ----------------------------------------------------------------------------------------
def test_router_tokenize_matches_generate(stack):
    with PdserveClient(stack.router_target) as c:
        chat = c.tokenize(messages=CHAT)
        used = c.complete(messages=CHAT, max_tokens=1).usage.prompt_tokens
        bare = c.tokenize(messages=CHAT, add_generation_prompt=False)
        text = c.tokenize("the end of it")
        assert chat.count == len(chat.token_ids) == used and chat.context_length == CONTEXT
        assert bare.count < chat.count and list(chat.token_ids[:bare.count]) == list(bare.token_ids)
        assert c.detokenize(list(text.token_ids)).text == "the end of it"
        with pytest.raises(grpc.RpcError) as err:
            c.tokenize(messages=[{"role": "wizard", "content": "x"}])
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("prompt.chat.messages[0].role:")


def test_router_unset_max_tokens_fits_a_long_prompt(stack):
    """Before, the default of 256 refused any prompt longer than context - 256 that left max_tokens unset."""
    with PdserveClient(stack.router_target) as c:
        reply = c.complete(token_ids=[7] * (CONTEXT - 5), ignore_eos=True, temperature=0)
    assert reply.usage.completion_tokens == 5 and reply.finish_reason == "length"
    assert reply.usage.total_tokens == CONTEXT


def test_router_honours_x_request_id_metadata(stack):
    request = router_pb2.GenerateRequest(text="the end")
    request.sampling.max_tokens = 2
    with grpc.insecure_channel(stack.router_target) as ch:
        stub = router_pb2_grpc.RouterStub(ch)
        chunks = list(stub.Generate(request, metadata=(("x-request-id", "from-metadata"),)))
        assert {c.request_id for c in chunks} == {"from-metadata"}
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Generate(request, metadata=(("x-request-id", "m" * 129),)))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("request_id:")
        request.request_id = "caf\u00e9"  # not ASCII: it could not travel on as metadata to the workers
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Generate(request, timeout=30))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("request_id:")


