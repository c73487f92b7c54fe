"""The shared worker loop: a failed step ends its requests with an error and the worker keeps serving; a
cancelled request is removed from the scheduler and its KV freed."""

import asyncio
from dataclasses import replace

import pytest

from pdserve.engine.params import SamplingParams
from pdserve.engine.scheduler import Role, Scheduler, SchedulerConfig
from pdserve.engine.stop import FinishReason
from pdserve.perfmodel.parallel import ParallelConfig
from pdserve.perfmodel.timing import TimingModel
from pdserve.worker.clock import StepClock
from pdserve.worker.worker import Worker

PARAMS = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)


class FailingDecode:
    """The tiny runtime, except that decode steps fail while ``failing`` is set."""

    def __init__(self, runtime) -> None:
        self._runtime = runtime
        self.failing = True

    def __getattr__(self, name):
        return getattr(self._runtime, name)

    def decode_step(self, seqs):
        if self.failing:
            raise RuntimeError("boom")
        return self._runtime.decode_step(seqs)


def make_worker(runtime) -> Worker:
    clock = StepClock(TimingModel("deepseek-r1", "H20-141G", ParallelConfig(8, 8, 8), "sglang"))
    scheduler = Scheduler(SchedulerConfig(Role.DECODE, kv_blocks=256), runtime.free)
    return Worker(runtime, scheduler, clock, max_queue=8)


def test_a_failed_step_is_an_error_for_its_requests_and_the_worker_goes_on(tiny_runtime):
    runtime = FailingDecode(tiny_runtime)

    async def scenario():
        worker = make_worker(runtime)
        loop = asyncio.create_task(worker.run())
        seq = runtime.new_sequence(list(range(3, 20)), PARAMS)
        job = worker.submit(seq)  # colocated: prefill here, then decode
        first = await job.events.get()
        failure = await job.events.get()
        runtime.failing = False
        again = runtime.new_sequence(list(range(3, 20)), PARAMS)
        job2 = worker.submit(again)
        events = [await job2.events.get() for _ in range(PARAMS.max_tokens)]
        loop.cancel()
        return worker, seq, first, failure, again, events

    worker, seq, first, failure, again, events = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert not isinstance(first, BaseException)  # the prefill step worked
    assert isinstance(failure, RuntimeError) and "boom" in str(failure)
    assert seq.finish_reason is FinishReason.ERROR
    assert events[-1][1].finish_reason is FinishReason.LENGTH and len(again.output_ids) == PARAMS.max_tokens
    assert not worker.scheduler.has_work() and worker.scheduler.budget.used == 0


def test_cancel_removes_the_request_and_frees_its_kv(tiny_runtime):
    async def scenario():
        worker = make_worker(tiny_runtime)
        loop = asyncio.create_task(worker.run())
        seq = tiny_runtime.new_sequence(list(range(3, 40)), SamplingParams(max_tokens=300, temperature=0.0,
                                                                            ignore_eos=True))
        job = worker.submit(seq)
        for _ in range(3):
            await job.events.get()
        worker.cancel(job)  # possibly while a step that uses it runs
        for _ in range(200):
            if not worker.scheduler.has_work():
                break
            await asyncio.sleep(0.05)
        loop.cancel()
        return worker, seq

    worker, seq = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert not worker.scheduler.has_work() and worker.scheduler.budget.used == 0
    assert seq.finish_reason is FinishReason.ABORT and seq.kv.length == 0 and seq.kv.slot is None


def test_decode_steps_pay_for_completeness_checks_in_the_modeled_clock(tiny_judge_runtime):
    """The same tokens with and without checks (the even judge's 0.5 never reaches 0.51): the modeled decode time
    differs by exactly each check priced as a prefill of its tokens after its context."""
    params = SamplingParams(max_tokens=120, temperature=50.0, seed=0, ignore_eos=True)

    async def decode(p):
        worker = make_worker(tiny_judge_runtime)
        loop = asyncio.create_task(worker.run())
        job = worker.submit(tiny_judge_runtime.new_sequence(list(range(3, 40)), p))
        results = []
        while not results or not results[-1].finished:
            results.append((await job.events.get())[1])
        loop.cancel()
        return worker.clock, job, results

    clock, plain, _ = asyncio.run(asyncio.wait_for(decode(params), 60))
    _, checked, results = asyncio.run(asyncio.wait_for(decode(replace(params, stop_when_complete=0.51)), 60))
    checks = [r.check for r in results if r.check is not None]
    assert checks and checked.seq.output_ids == plain.seq.output_ids
    extra = sum(clock.timing.prefill_time([c.tokens], [c.context]).seconds for c in checks)
    assert checked.decode_modeled_s - plain.decode_modeled_s == pytest.approx(extra, rel=1e-9)
    assert checked.prefill_modeled_s == plain.prefill_modeled_s
