"""The simulator and the workers share the scheduler and its pricing: the same workload through a simulated instance
and through the worker loop (the tiny model computing every token) gives the same steps, step by step, with the
same modeled durations, for each scheduling profile and with data-parallel attention's ranks. This is what makes
``pdserve up --model synthetic --pace realtime`` serve as the simulated engine does."""

from __future__ import annotations

import asyncio

import pytest

from pdserve.common.scheduling import modeled_scheduling
from pdserve.engine.params import SamplingParams
from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.engine.sched.scheduler import SchedulerRole, Step
from pdserve.perfmodel.deployment import parse_deployment
from pdserve.sim.instance import Instance
from pdserve.sim.sequence import SimSequence
from pdserve.sim.steptime import StepTimer
from pdserve.worker.clock import StepClock
from pdserve.worker.worker import Worker

PROMPTS = [(23, 6), (90, 9), (41, 12), (130, 5), (17, 8), (64, 7), (99, 10), (30, 6), (75, 11), (52, 9)]


def shape(step: Step) -> tuple:
    """Per attention rank: (request id, tokens) of each prompt chunk and the ids that decode."""
    return tuple((tuple((seq.request_id, n) for seq, n in r.prefills), tuple(seq.request_id for seq in r.decodes))
                 for r in (step.ranks or [step]))


def worker_steps(runtime, scheduling) -> tuple[list[tuple[tuple, float]], int]:
    clock = StepClock(scheduling.deployment.timing())
    seen = []
    price = clock.step_seconds

    def recording(step: Step) -> float:
        seconds = price(step)
        seen.append((shape(step), seconds))
        return seconds
    clock.step_seconds = recording

    async def run() -> int:
        worker = Worker(runtime, scheduling.build(runtime.free), clock, max_queue=64)
        jobs = [worker.submit(runtime.new_sequence(list(range(3, 3 + n)),
                                                   SamplingParams(max_tokens=out, temperature=0.0, ignore_eos=True),
                                                   f"sim-{i}")) for i, (n, out) in enumerate(PROMPTS)]
        loop = asyncio.create_task(worker.run())
        for job in jobs:
            while not (await job.events.get())[1].finished:
                pass
        loop.cancel()
        return worker.scheduler.num_preemptions
    return seen, asyncio.run(asyncio.wait_for(run(), 120))


def simulated_steps(scheduling) -> tuple[list[tuple[tuple, float]], int]:
    inst = Instance("c0", SchedulerRole.BOTH, scheduling, 0, StepTimer(scheduling.deployment.timing()))
    for i, (n, out) in enumerate(PROMPTS):
        inst.scheduler.add(SimSequence(i, list(range(3, 3 + n)), out, 1 << 20, [], 0.0))
    seen, now = [], 0.0
    while (begun := inst.begin_step(now)) is not None:
        step, seconds = begun
        seen.append((shape(step), seconds))
        now += seconds
        inst.end_step(step, now)
    return seen, inst.scheduler.num_preemptions


@pytest.mark.parametrize("deployment, kv_blocks, preempted", [
    ("software=sglang", 14, False),  # SGLang's admission reserves enough for these short outputs
    ("software=vllm", 14, True),
    ("software=vllm-0.7", 14, True),
    ("software=sglang-0.5.23", 14, False),
    ("software=vllm-0.34", 14, True),
    ("software=sglang,dp_attention=1", 8 * 10, True),  # ten blocks per rank: one retraction
])
def test_worker_and_simulator_run_the_same_steps(tiny_runtime, deployment, kv_blocks, preempted):
    # a small step budget and KV budget so that prompts chunk and requests give way
    scheduling = modeled_scheduling(parse_deployment(deployment), SchedulerRole.BOTH,
                                    SchedulerOverrides(max_num_batched_tokens=48, max_num_seqs=6), kv_blocks=kv_blocks)
    simulated, sim_preempted = simulated_steps(scheduling)
    served, served_preempted = worker_steps(tiny_runtime, scheduling)
    assert [s for s, _ in served] == [s for s, _ in simulated]
    assert [t for _, t in served] == pytest.approx([t for _, t in simulated], rel=1e-9)
    assert served_preempted == sim_preempted and bool(sim_preempted) is preempted
    if scheduling.ranks > 1:
        assert len(simulated[0][0]) == 8  # every step is all eight ranks' (idle ones included)


def test_a_worker_schedules_with_its_deployments_software_profile():
    from pdserve.worker.config import WorkerConfig
    from pdserve.worker.flags import worker_parser

    def scheduling(*flags: str):
        args = worker_parser("decode_server", 0, 8).parse_args(list(flags))
        return WorkerConfig.from_args(args, SchedulerRole.DECODE).scheduling()

    paced = scheduling("--model", "synthetic", "--deployment", "software=vllm,hardware=H200")
    assert paced.config.policy.mixed and paced.config.max_num_batched_tokens == 8192  # vLLM 0.11's on H200
    assert paced.config.max_num_seqs == 1024 and paced.config.kv_blocks == paced.kv_tokens_per_rank // 16
    local = scheduling("--deployment", "software=sglang")  # the real model on this CPU: its own limits
    assert not local.config.policy.mixed and (local.config.max_num_seqs, local.config.max_num_batched_tokens) == (64, 2048)
    ranks = scheduling("--model", "synthetic", "--deployment", "dp_attention=1", "--max-num-batched-tokens", "512")
    assert ranks.ranks == 8 and ranks.config.max_num_batched_tokens == 512
    assert type(ranks.build(lambda seq: None)).__name__ == "AttentionRanks"
