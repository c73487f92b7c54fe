"""A paced stack with a modeled deployment of another family and GPU: the services keep computing with the small real
model (here the synthetic one), and only the modeled clock follows the named profile."""

import pytest

from pdserve.client.client import PdserveClient
from pdserve.perfmodel.deployment import parse_deployment
from tests.helpers import start_stack

DEPLOYMENT = "model=openai/gpt-oss-20b,hardware=B200,gpus=1,tp=1,ep=1"


def test_paced_stack_models_gpt_oss_on_b200():
    timing = parse_deployment(DEPLOYMENT).timing()
    stack = start_stack(model="synthetic", pace="realtime", time_scale=0.01, deployment=DEPLOYMENT)
    try:
        with PdserveClient(stack.router_target) as c:
            reply = c.complete(token_ids=list(range(100, 400)), max_tokens=8, temperature=0, ignore_eos=True)
    finally:
        stack.stop()
    t = reply.timings
    assert reply.usage.completion_tokens == 8
    assert t.ttft_modeled_s == pytest.approx(timing.prefill_time([300], [0]).seconds, rel=1e-6)
    steps = sum(timing.decode_step_time([300 + i + 1]).seconds for i in range(7))
    assert t.e2e_modeled_s - t.ttft_modeled_s == pytest.approx(timing.kv_transfer_time(300) + steps, rel=1e-6)
