"""The completed gRPC API: logprobs, n samples sharing one prefill, Abort from another connection, rich errors."""

import asyncio

import grpc
import numpy as np
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from pdserve.client.client import AsyncPdserveClient, PdserveClient
from pdserve.engine.llm_engine import LLMEngine
from pdserve.engine.params import InvalidParameter, SamplingParams, sample_params
from tests.helpers import decode_load, kv_leases, start_stack, wait_until

PROMPT = [1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


def reference_logprobs(runtime, ids: list[int]) -> np.ndarray:
    """log_softmax of the model's logits after ``ids``, from one fresh forward over all of them."""
    kv = runtime.model.new_kv(capacity=len(ids) + 1, block_tokens=runtime.block_tokens)
    return log_softmax(runtime.model.prefill([kv], [ids])[0])


def in_process_steps(runtime, prompt: list[int], params: SamplingParams):
    """(sequence, [StepResult per token]) of one request run by the in-process engine."""
    engine = LLMEngine(runtime)
    seq = engine.add_request(prompt, params)
    return seq, [result for s, result in engine.stream() if s is seq]


@pytest.mark.parametrize("params", [
    SamplingParams(max_tokens=8, temperature=0.0, logprobs=5),
    SamplingParams(max_tokens=8, temperature=0.7, seed=4, presence_penalty=1.5, top_k=20, logprobs=3),
], ids=["greedy", "sampled-with-penalties"])
def test_logprobs_are_the_raw_model_distribution(tiny_runtime, params):
    """Each token's logprob, rank and top alternatives equal a numpy log-softmax of the model's logits (before
    temperature, penalties and truncation)."""
    seq, results = in_process_steps(tiny_runtime, PROMPT, params)
    assert len(results) == len(seq.output_ids) == 8
    for i, (token, result) in enumerate(zip(seq.output_ids, results)):
        want = reference_logprobs(tiny_runtime, PROMPT + seq.output_ids[:i])
        lp = result.logprobs
        assert lp.token_id == token
        assert lp.logprob == pytest.approx(want[token], abs=1e-4)
        assert lp.rank == 1 + int(np.count_nonzero(want > want[token] + 1e-6))
        order = np.argsort(-want, kind="stable")[:params.logprobs]
        assert [t for t, _ in lp.top] == order.tolist()
        assert [v for _, v in lp.top] == pytest.approx(want[order].tolist(), abs=1e-4)


def test_no_logprobs_unless_asked(tiny_runtime):
    _, results = in_process_steps(tiny_runtime, PROMPT, SamplingParams(max_tokens=3, temperature=0.0))
    assert all(r.logprobs is None for r in results)
    _, results = in_process_steps(tiny_runtime, PROMPT, SamplingParams(max_tokens=3, temperature=0.0, logprobs=0))
    assert all(r.logprobs is not None and r.logprobs.top == [] for r in results)


@pytest.mark.parametrize("field,value", [("logprobs", 21), ("n", 0), ("n", 17)])
def test_limits_name_the_field(field, value):
    with pytest.raises(InvalidParameter) as err:
        SamplingParams(**{field: value}).validate()
    assert err.value.field == field


@pytest.fixture(scope="module")
def stack(tiny_long_model_path):
    """200 KV blocks (3,200 tokens) in decode: a long request fits, one of 4,000 new tokens never does."""
    stack = start_stack(model=str(tiny_long_model_path), metrics=True, kv_blocks=200)
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def long_runtime(tiny_long_model_path):
    from pdserve.engine.runtime import Runtime

    return Runtime.load(tiny_long_model_path)


@pytest.mark.parametrize("params", [
    dict(max_tokens=6, temperature=0.0, logprobs=4),
    dict(max_tokens=6, temperature=0.9, seed=11, frequency_penalty=0.5, logprobs=2),
], ids=["greedy", "sampled"])
def test_streamed_logprobs_match_in_process(stack, long_runtime, params):
    """Prefill's first token and every decoded one carry their logprobs, spelled by the router."""
    seq, results = in_process_steps(long_runtime, PROMPT, SamplingParams(**params))
    with PdserveClient(stack.router_target) as c:
        chunks = list(c.generate(token_ids=PROMPT, **params))
    got = [(t, lp) for ch in chunks for t, lp in zip(ch.token_ids, ch.logprobs, strict=True)]
    assert [t for t, _ in got] == seq.output_ids
    assert len(chunks[0].logprobs) == 1  # the first token, sampled by prefill
    tok = long_runtime.tokenizer
    for (token, lp), result in zip(got, results):
        want = result.logprobs
        assert lp.sampled.token_id == token and lp.rank == want.rank
        assert lp.sampled.logprob == pytest.approx(want.logprob, abs=1e-4)
        assert [a.token_id for a in lp.top] == [t for t, _ in want.top]
        assert [a.logprob for a in lp.top] == pytest.approx([v for _, v in want.top], abs=1e-4)
        assert lp.sampled.token_bytes == tok.token_bytes(token)
        assert all(a.token_bytes == tok.token_bytes(a.token_id) and a.token for a in lp.top)
    with PdserveClient(stack.router_target) as c:
        whole = c.complete(token_ids=PROMPT, **params)
    assert [lp.sampled.token_id for lp in whole.logprobs] == seq.output_ids


def prefill_counts(stack) -> tuple[float, float]:
    metrics = stack.scrape(stack.prefills[0])
    return (metrics.get(("pdserve_prefill_requests_total", (("outcome", "ok"),)), 0.0),
            metrics.get(("pdserve_prefill_prompt_tokens_total", ()), 0.0))


def test_n_samples_share_one_prefill_and_equal_seeded_runs(stack, long_runtime):
    params = dict(max_tokens=10, temperature=1.0, seed=7, ignore_eos=True)
    before = prefill_counts(stack)
    with PdserveClient(stack.router_target) as c:
        reply = c.complete(token_ids=PROMPT, n=3, **params)
    requests, tokens = (a - b for a, b in zip(prefill_counts(stack), before))
    assert (requests, tokens) == (1, len(PROMPT))  # the prompt was prefilled once for the three samples
    expected = [in_process_steps(long_runtime, PROMPT, sample_params(SamplingParams(**params), i))[0] for i in range(3)]
    assert [c.index for c in reply.choices] == [0, 1, 2]
    for choice, want in zip(reply.choices, expected):
        assert list(choice.token_ids) == want.output_ids  # sample i == a single request with seed 7 + i
        assert choice.text == want.output_text and choice.finish_reason == "length"
    assert len({tuple(c.token_ids) for c in reply.choices}) > 1
    assert list(reply.token_ids) == list(reply.choices[0].token_ids)
    assert reply.usage.prompt_tokens == len(PROMPT)  # counted once
    assert reply.usage.completion_tokens == 30 and reply.usage.total_tokens == 30 + len(PROMPT)
    wait_until(lambda: kv_leases(stack) == 0, what="every sample's lease released")


def test_n_samples_stream_tagged_by_index(stack):
    with PdserveClient(stack.router_target) as c:
        chunks = list(c.generate(token_ids=PROMPT, n=2, max_tokens=5, temperature=0.8, ignore_eos=True, logprobs=1))
    for index in (0, 1):
        mine = [ch for ch in chunks if ch.index == index]
        assert sum(len(ch.token_ids) for ch in mine) == 5
        assert sum(len(ch.logprobs) for ch in mine) == 5
        assert mine[-1].finish_reason == "length" and mine[-1].timings.e2e_wall_s > 0
    assert [ch.HasField("usage") for ch in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1].usage.completion_tokens == 10 and chunks[-1].usage.prompt_tokens == len(PROMPT)


@pytest.mark.parametrize("n", [1, 2])
def test_abort_from_another_connection_frees_kv_and_leases(stack, n):
    decode = stack.decodes[0]
    aborted_before = stack.scrape(decode).get(("pdserve_decode_requests_total", (("finished_reason", "abort"),)), 0)

    async def scenario():
        async with AsyncPdserveClient(stack.router_target) as client, AsyncPdserveClient(stack.router_target) as proxy:
            call = client.generate(token_ids=PROMPT, max_tokens=3000, ignore_eos=True, temperature=0, n=n,
                                   request_id="abort-me")
            chunks = []
            while any(sum(ch.index == i for ch in chunks) < 2 for i in range(n)):  # every sample is decoding
                chunks.append(await call.read())
            answer = await proxy.abort(["abort-me", "never-was"])
            while (chunk := await call.read()) is not grpc.aio.EOF:
                chunks.append(chunk)
            again = await proxy.abort(["abort-me"])
            return answer, again, chunks

    answer, again, chunks = asyncio.run(scenario())
    assert list(answer.aborted) == ["abort-me"] and list(answer.not_found) == ["never-was"]
    assert list(again.not_found) == ["abort-me"]  # finished: no longer in flight
    last = {ch.index: ch for ch in chunks if ch.finish_reason}
    assert {i: ch.finish_reason for i, ch in last.items()} == {i: "abort" for i in range(n)}
    assert chunks[-1].usage.completion_tokens == sum(len(ch.token_ids) for ch in chunks) < 6000
    wait_until(lambda: decode_load(stack, decode).running == 0, what="decode running == 0")
    assert decode_load(stack, decode).kv_blocks_used == 0
    wait_until(lambda: kv_leases(stack) == 0, what="leases released")
    metrics = stack.scrape(decode)
    assert metrics[("pdserve_decode_requests_total", (("finished_reason", "abort"),))] == aborted_before + n


def rich(err: grpc.RpcError):
    status = rpc_status.from_call(err)
    assert status is not None, "no google.rpc.Status in the trailers"
    return status


@pytest.mark.parametrize("kwargs,field", [
    (dict(max_tokens=100000), "max_tokens"),
    (dict(temperature=-1.0), "temperature"),
    (dict(n=20), "n"),
    (dict(logprobs=25), "logprobs"),
])
def test_invalid_argument_carries_a_field_violation(stack, kwargs, field):
    with PdserveClient(stack.router_target) as c:
        with pytest.raises(grpc.RpcError) as err:
            c.complete(token_ids=PROMPT, **kwargs)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(field + ":")  # the plain string is unchanged
    [detail] = rich(err.value).details
    bad_request = error_details_pb2.BadRequest()
    assert detail.Unpack(bad_request)
    [violation] = bad_request.field_violations
    assert violation.field == field and violation.description in err.value.details()


def test_resource_exhausted_carries_retry_info(stack):
    """A request that can never fit the decode worker's KV budget: RESOURCE_EXHAUSTED with RetryInfo."""
    with PdserveClient(stack.router_target) as c:
        with pytest.raises(grpc.RpcError) as err:
            c.complete(token_ids=PROMPT, max_tokens=4000)
    if err.value.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        pytest.fail(f"expected RESOURCE_EXHAUSTED, got {err.value.code()}: {err.value.details()}")
    [detail] = rich(err.value).details
    retry = error_details_pb2.RetryInfo()
    assert detail.Unpack(retry) and retry.retry_delay.ToNanoseconds() > 0
