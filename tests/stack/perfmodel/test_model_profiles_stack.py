"""A paced stack with a modeled deployment of another family and GPU: the services keep computing with the small real
model (here the synthetic one), and only the modeled clock follows the named profile."""

import pytest

from pdserve.client.client import PdserveClient
from pdserve.common.scheduling import modeled_scheduling
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.perfmodel.deployment import parse_deployment
from pdserve.worker.clock import StepClock
from tests.helpers import start_stack

DEPLOYMENT = "model=openai/gpt-oss-20b,hardware=B200,gpus=1,tp=1,ep=1"


def test_paced_stack_models_gpt_oss_on_b200():
    deployment = parse_deployment(DEPLOYMENT)
    timing = deployment.timing()
    prefill = modeled_scheduling(deployment, SchedulerRole.PREFILL).config  # the hand-off as the workers price it
    clock = StepClock(timing, handoff=deployment.handoff(),
                      chunk_tokens=prefill.max_num_batched_tokens if prefill.policy.chunked else 0)
    stack = start_stack(model="synthetic", pace="realtime", time_scale=0.01, deployment=DEPLOYMENT)
    try:
        with PdserveClient(stack.router_target) as c:
            reply = c.complete(token_ids=list(range(100, 400)), max_tokens=8, temperature=0, ignore_eos=True)
    finally:
        stack.stop()
    t = reply.timings
    assert reply.usage.completion_tokens == 8
    # the first token reaches the client after the front end, the prompt's steps and the KV hand-off into decode
    handoff = clock.handoff_seconds(300, "auto")
    assert handoff > 0
    frontend = timing.overheads.request_overhead_s
    assert t.ttft_modeled_s == pytest.approx(frontend + timing.prefill_time([300], [0]).seconds + handoff, rel=1e-6)
    steps = sum(timing.decode_step_time([300 + i + 1]).seconds for i in range(7))
    assert t.e2e_modeled_s - t.ttft_modeled_s == pytest.approx(steps, rel=1e-6)
