"""The modeled clock inside the services: exact modeled figures, pacing, lag accounting, the synthetic backend."""

import pytest

from pdserve.client.client import PdserveClient
from pdserve.engine.llm_engine import LLMEngine
from pdserve.engine.params import SamplingParams
from pdserve.engine.runtime import Runtime
from pdserve.perfmodel.deployment import Deployment
from pdserve.perfmodel.parallel import ParallelConfig
from pdserve.perfmodel.timing import TimingModel
from tests.helpers import start_stack

DEFAULT_TIMING = TimingModel("deepseek-r1", "H20-141G", ParallelConfig(8, 8, 8), "sglang")
# two 8-GPU instances sit on two nodes: the default --kv-link auto is RDMA, as the simulator places them
DEFAULT_HANDOFF = Deployment().handoff()


def test_modeled_timings_follow_the_timing_model(tiny_stack):
    """A lone request: its modeled front end, prefill, hand-off and decode steps are exactly what perfmodel says."""
    prompt = list(range(173, 213))  # 40 tokens no other test of the shared stack sends: nothing of it is cached
    n_out = 6
    with PdserveClient(tiny_stack.router_target) as c:
        reply = c.complete(token_ids=prompt, max_tokens=n_out, temperature=0, ignore_eos=True)
    t = reply.timings
    assert reply.usage.completion_tokens == n_out and reply.usage.cached_prompt_tokens == 0
    frontend = DEFAULT_TIMING.overheads.request_overhead_s  # SGLang's fitted HTTP, tokenization and scheduler hops
    prefill = DEFAULT_TIMING.prefill_time([40], [0]).seconds
    transfer = DEFAULT_HANDOFF.seconds(40, "rdma")  # the handshake and the wire
    steps = sum(DEFAULT_TIMING.decode_step_time([40 + i + 1]).seconds for i in range(n_out - 1))
    # the first token leaves from the decode side once the KV is there (as SGLang's and vLLM's P/D serving)
    assert t.ttft_modeled_s == pytest.approx(frontend + prefill + transfer, rel=1e-6)
    assert t.frontend_modeled_s == pytest.approx(frontend, rel=1e-6) and frontend > 0
    assert t.kv_transfer_modeled_s == pytest.approx(transfer, rel=1e-6)
    assert t.e2e_modeled_s == pytest.approx(frontend + prefill + transfer + steps, rel=1e-6)
    assert t.tpot_modeled_s == pytest.approx(steps / (n_out - 1), rel=1e-6)
    assert t.queue_modeled_s == 0.0


@pytest.fixture(scope="module")
def synthetic_paced_stack():
    stack = start_stack(model="synthetic", pace="realtime", time_scale=0.5, metrics=True)
    yield stack
    stack.stop()


def test_synthetic_backend_serves_the_same_tokens_as_in_process():
    runtime = Runtime.load("synthetic")
    prompts = ["What is the capital of France?", "巴黎是法国的", "Tell me about prefill."]
    params = SamplingParams(max_tokens=40, temperature=0.0, stop=["decode"])
    ids = [runtime.tokenizer.encode_chat([{"role": "user", "content": p}]) for p in prompts]
    expected = LLMEngine(runtime).generate(ids, params)
    stack = start_stack(model="synthetic")
    try:
        with PdserveClient(stack.router_target) as c:
            [card] = c.list_models().models
            assert card.id == "synthetic"
            for prompt, want in zip(prompts, expected):
                got = c.complete(messages=[{"role": "user", "content": prompt}], **vars(params))
                assert list(got.token_ids) == want.output_ids
                assert got.text == want.output_text and got.finish_reason == want.finish_reason.value
    finally:
        stack.stop()


def test_realtime_pacing_stretches_wall_time_to_the_modeled_budget(synthetic_paced_stack):
    """Each paced step lasts at least modeled x time_scale: a guaranteed lower bound, not a timing race."""
    with PdserveClient(synthetic_paced_stack.router_target) as c:
        reply = c.complete(token_ids=list(range(100, 400)), max_tokens=20, temperature=0, ignore_eos=True)
    t = reply.timings
    scale = 0.5
    assert t.frontend_modeled_s > 0  # paced too: the wall TTFT covers it
    assert t.ttft_wall_s >= scale * t.ttft_modeled_s * 0.999
    assert t.e2e_wall_s - t.ttft_wall_s >= scale * (t.e2e_modeled_s - t.ttft_modeled_s) * 0.999
    # the modeled figures are in modeled seconds, the scale divided back out
    steps = sum(DEFAULT_TIMING.decode_step_time([300 + i + 1]).seconds for i in range(19))
    assert t.e2e_modeled_s - t.ttft_modeled_s == pytest.approx(steps, rel=1e-6)
    assert t.kv_transfer_modeled_s == pytest.approx(DEFAULT_HANDOFF.seconds(300, "rdma"), rel=1e-6)


def test_steps_slower_than_their_budget_are_counted_as_lag(tiny_model_path):
    stack = start_stack(model=str(tiny_model_path), pace="realtime", time_scale=1e-9, metrics=True)
    try:
        with PdserveClient(stack.router_target) as c:
            c.complete("the end", max_tokens=5, temperature=0, ignore_eos=True)
        metrics = stack.scrape(stack.decodes[0])
        assert metrics[("pdserve_pacing_lagged_steps_total", (("phase", "decode"),))] >= 4
        assert metrics[("pdserve_pacing_lag_seconds_total", (("phase", "decode"),))] > 0
        assert metrics[("pdserve_step_modeled_seconds_count", (("phase", "decode"),))] >= 4
    finally:
        stack.stop()


def test_a_worker_refuses_a_modeled_deployment_that_cannot_run():
    """DeepSeek-R1's weights on one H20: the worker stops at start-up with the reason, before loading a model."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "pdserve.decode_server", "--model", "synthetic", "--insecure-internal",
                           "--deployment", "gpus=1,tp=1,ep=1"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "modeled deployment: gpus: weights of" in done.stderr and "Traceback" not in done.stderr


def test_decode_takes_its_kv_budget_from_the_modeled_deployment():
    from pdserve.common.scheduling import modeled_scheduling
    from pdserve.engine.sched.scheduler import SchedulerRole
    from pdserve.perfmodel.deployment import Deployment, kv_capacity_tokens
    from tests.helpers import decode_load

    stack = start_stack(model="synthetic", extra={"decode": ["--kv-budget", "modeled"]})
    try:
        load = decode_load(stack, stack.decodes[0])
        modeled = modeled_scheduling(Deployment(), SchedulerRole.DECODE).deployment  # with its software's memory fraction
        assert load.kv_blocks_total == kv_capacity_tokens(modeled) // 16
        with PdserveClient(stack.router_target) as c:
            assert c.complete("Hello", max_tokens=3, temperature=0, ignore_eos=True).usage.completion_tokens == 3
    finally:
        stack.stop()
