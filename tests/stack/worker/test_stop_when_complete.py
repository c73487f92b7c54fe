"""The completeness rule through every entry point of a real stack (gRPC, the OpenAI edge, the CLI) on the tiny model
whose judge always reads P(yes) = 0.5 (tests/tiny_model.py, even_judge): seeded answers end with finish reason
``complete`` where the in-process engine ends them, per sample of n, under a KV budget that preempts, and the decode
worker's metrics count the checks and the tokens left."""

import asyncio
import subprocess
import sys

import grpc
import openai
import pytest

from pdserve.client.client import AsyncPdserveClient, PdserveClient
from pdserve.common.scrape import total
from pdserve.engine.params import SamplingParams, sample_params
from tests.helpers import reference, start_stack

PROMPT = list(range(3, 40))
BASE = dict(max_tokens=120, temperature=50.0, ignore_eos=True)  # near-uniform draws: sentence ends come often
PASSES, NEVER = 0.5, 0.51  # against the even judge's 0.5


@pytest.fixture(scope="module")
def stack(tiny_judge_model_path):
    """16 KV blocks on decode: two 157-token sequences (10 blocks each) cannot run together, so some are preempted."""
    stack = start_stack(model=str(tiny_judge_model_path), metrics=True, http_port=0, kv_blocks=16)
    yield stack
    stack.stop()


def decode_metrics(stack) -> dict[str, float]:
    samples = stack.scrape(stack.decodes[0])
    return {name: total(samples, name) for name in (
        "pdserve_decode_completion_checks_total", "pdserve_decode_completion_check_tokens_total",
        "pdserve_decode_completion_tokens_left_total", "pdserve_decode_num_preemptions_total")} | {
        "complete": total(samples, "pdserve_decode_requests_total", finished_reason="complete")}


def test_seeded_samples_end_complete_as_in_process_under_preemption(stack, tiny_judge_runtime):
    requests = [SamplingParams(**BASE, seed=0, n=2, stop_when_complete=PASSES, min_tokens=8),
                SamplingParams(**BASE, seed=7, n=2, stop_when_complete=PASSES, stop_when_complete_interval=4),
                SamplingParams(**BASE, seed=1, stop_when_complete=NEVER),
                SamplingParams(**BASE, seed=2, stop_when_complete=NEVER)]
    samples = [sample_params(p, i) for p in requests for i in range(p.n)]
    expected = reference(tiny_judge_runtime, [PROMPT] * len(samples), samples)
    before = decode_metrics(stack)

    async def one(client, params):
        return [c async for c in client.generate(token_ids=PROMPT, **vars(params))]

    async def run_all():
        async with AsyncPdserveClient(stack.router_target) as client:
            return await asyncio.gather(*(one(client, p) for p in requests))

    got = []
    for chunks, params in zip(asyncio.run(run_all()), requests):
        for i in range(params.n):
            mine = [c for c in chunks if c.index == i]
            got.append(([t for c in mine for t in c.token_ids], "".join(c.text for c in mine), mine[-1].finish_reason))
    assert got == [(s.output_ids, s.output_text, s.finish_reason.value) for s in expected]
    assert [s.finish_reason.value for s in expected] == ["complete"] * 4 + ["length"] * 2

    after = decode_metrics(stack)
    delta = {k: after[k] - before[k] for k in after}
    assert delta["pdserve_decode_num_preemptions_total"] >= 1
    assert delta["pdserve_decode_completion_checks_total"] == sum(s.completion.checks for s in expected)
    assert delta["pdserve_decode_completion_check_tokens_total"] == sum(s.completion.check_tokens for s in expected)
    assert delta["complete"] == 4
    assert delta["pdserve_decode_completion_tokens_left_total"] == sum(
        s.params.max_tokens - len(s.output_ids) for s in expected[:4])


def test_the_openai_edge_takes_the_rule_and_says_stop(stack, tiny_judge_runtime):
    params = SamplingParams(**BASE, seed=3, stop_when_complete=PASSES)
    [want] = reference(tiny_judge_runtime, [PROMPT], [params])
    with openai.OpenAI(base_url=stack.http_url + "/v1", api_key="unused", max_retries=0) as client:
        got = client.completions.create(model="tiny-judge", prompt=PROMPT, max_tokens=120, temperature=50.0, seed=3,
                                        extra_body={"ignore_eos": True, "stop_when_complete": PASSES})
    [choice] = got.choices
    assert choice.text == want.output_text and got.usage.completion_tokens == len(want.output_ids)
    assert choice.finish_reason == "stop" and choice.model_extra["pdserve_finish_reason"] == "complete"


def test_the_cli_takes_the_rule(stack, tiny_judge_runtime):
    question = "the end of the thing"
    params = SamplingParams(**BASE, seed=4, stop_when_complete=PASSES)
    [want] = reference(tiny_judge_runtime, [tiny_judge_runtime.tokenizer.encode_chat(
        [{"role": "user", "content": question}])], [params])
    out = subprocess.run([sys.executable, "-m", "pdserve.cli.main", "generate", question, "--target",
                          stack.router_target, "--max-tokens", "120", "--temperature", "50", "--seed", "4",
                          "--ignore-eos", "--stop-when-complete", str(PASSES)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert want.finish_reason.value == "complete"
    assert f"[finish_reason=complete prompt_tokens={len(want.prompt_ids)}" in out.stdout
    assert f"completion_tokens={len(want.output_ids)} " in out.stdout


def test_an_out_of_range_threshold_is_invalid_argument_naming_the_field(stack):
    with PdserveClient(stack.router_target) as c:
        with pytest.raises(grpc.RpcError) as err:
            c.complete(token_ids=PROMPT, max_tokens=4, stop_when_complete=1.5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("stop_when_complete:")
