"""The shared worker loop: a failed step ends its requests with an error and the worker keeps serving; a
cancelled request is removed from the scheduler and its KV freed."""

import asyncio
import threading
import time
from dataclasses import replace

import pytest

from pdserve.engine.params import SamplingParams
from pdserve.engine.runtime import Runtime
from pdserve.engine.sched.policy import StepPolicy
from pdserve.engine.sched.scheduler import Scheduler, SchedulerConfig, SchedulerRole
from pdserve.engine.text.stop import FinishReason
from pdserve.perfmodel.parallel import ParallelConfig
from pdserve.perfmodel.timing import TimingModel
from pdserve.worker.clock import StepClock
from pdserve.worker.forwards import compute_pieces
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


TIMING = TimingModel("deepseek-r1", "H20-141G", ParallelConfig(8, 8, 8), "sglang")


def make_worker(runtime, clock: StepClock | None = None, **config) -> Worker:
    """A decode-role worker with a 256-block KV budget; ``config``: more SchedulerConfig fields."""
    scheduler = Scheduler(SchedulerConfig(SchedulerRole.DECODE, kv_blocks=256, **config), runtime.free)
    return Worker(runtime, scheduler, clock or StepClock(TIMING), max_queue=8)


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


class GatedClock(StepClock):
    """A clock whose pricing of a chosen step waits for the test: a window in which the step is composed but its
    forward has not run (pricing runs off the event loop, so the loop serves cancellations meanwhile)."""

    def __init__(self, timing, gate_when, failure: Exception | None = None) -> None:
        super().__init__(timing)
        self.gate_when = gate_when
        self.failure = failure  # raised by that pricing once the gate opens
        self.gate = threading.Event()
        self.pricing: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def step_seconds(self, step) -> float:
        if self.gate_when(step):
            self.gate_when = lambda _: False
            self.loop.call_soon_threadsafe(self.pricing.set)
            self.gate.wait(30)
            if self.failure is not None:
                raise self.failure
        return super().step_seconds(step)


def test_a_request_cancelled_while_its_step_is_priced_harms_no_other(tiny_model_path):
    """A cancel that arrives after a step was composed but before its forward ran (the pricing await) waits for the
    step, like one that arrives during the forward: freeing the sequence at once let the forward put it back into the
    decode slab (a slot never freed again) and, when it was its last token, failed the step's bookkeeping, so the
    other sequences of the step lost that step's token. Fails when Worker.cancel frees at once during pricing."""
    short = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)
    runtime = Runtime.load(tiny_model_path)  # a decode slab of its own: nothing else's sequences in it

    async def scenario():
        clock = GatedClock(TIMING, lambda step: any(len(s.output_ids) == short.max_tokens - 1 for s in step.decodes))
        clock.pricing, clock.loop = asyncio.Event(), asyncio.get_running_loop()
        worker = make_worker(runtime, clock)
        loop = asyncio.create_task(worker.run())
        doomed = worker.submit(runtime.new_sequence(list(range(3, 30)), short))
        other = worker.submit(runtime.new_sequence(list(range(5, 40)), PARAMS))
        await clock.pricing.wait()  # the step that would give `doomed` its last token is composed, not yet run
        worker.cancel(doomed)
        clock.gate.set()
        delivered: list[int] = []
        finished = False
        while not finished:
            ids, result = await asyncio.wait_for(other.events.get(), 30)
            delivered.extend(ids)
            finished = result.finished
        loop.cancel()
        return worker, doomed, other, delivered

    worker, doomed, other, delivered = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert delivered == other.seq.output_ids and len(delivered) == PARAMS.max_tokens  # every token, once, in order
    # the cancel waited for the step, which gave the request its last token; its KV is freed either way
    assert doomed.seq.finish_reason is FinishReason.LENGTH and doomed.seq.kv.slot is None
    assert runtime.slab.members == [] and not worker.scheduler.has_work() and worker.scheduler.budget.used == 0


def test_a_step_whose_bookkeeping_fails_ends_its_requests_with_an_error(tiny_runtime):
    """A bug after the forward (here: postprocess raising once, then freeing the request failing too) must not leave
    a request's stream one token short: the step's requests end with the error, and the worker serves the next
    request. Fails when the worker only logs the failed step (the request then hangs, its token sampled but never
    sent), and when a failure to free the request stops the worker's loop before its caller heard of the error."""
    async def scenario():
        worker = make_worker(tiny_runtime)
        real = worker.scheduler.postprocess
        broken = {"left": 1, "abort": 1}

        def postprocess_failing_once(step, output):
            if step.decodes and broken["left"]:
                broken["left"] -= 1
                raise RuntimeError("bookkeeping bug")
            return real(step, output)

        worker.scheduler.postprocess = postprocess_failing_once
        real_abort = worker.scheduler.abort

        def abort_failing_once(seq, reason=FinishReason.ABORT):  # freeing after a failed step may fail too
            if reason is FinishReason.ERROR and broken["abort"]:
                broken["abort"] -= 1
                raise RuntimeError("broken state")
            return real_abort(seq, reason)

        worker.scheduler.abort = abort_failing_once
        loop = asyncio.create_task(worker.run())
        job = worker.submit(tiny_runtime.new_sequence(list(range(3, 20)), PARAMS))
        events = [await asyncio.wait_for(job.events.get(), 30) for _ in range(2)]  # the first token, then the error
        again = worker.submit(tiny_runtime.new_sequence(list(range(3, 20)), PARAMS))
        tokens = [await asyncio.wait_for(again.events.get(), 30) for _ in range(PARAMS.max_tokens)]
        loop.cancel()
        return worker, job, events, tokens

    worker, job, events, tokens = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert isinstance(events[1], RuntimeError) and "bookkeeping bug" in str(events[1])
    # freeing it failed, so it ran on to its length with nobody listening; the worker served the next request
    assert job.seq.finish_reason is FinishReason.LENGTH and tokens[-1][1].finish_reason is FinishReason.LENGTH
    assert not worker.scheduler.has_work() and worker.scheduler.budget.used == 0


def test_cancels_deferred_by_a_step_that_fails_still_take_effect(tiny_model_path):
    """A request cancelled while a step is in flight is removed after that step, also when the step fails (here its
    pricing raises). The cancelled request is not in the step: one sequence runs at a time and it waits. Fails when
    the deferred cancels are applied only after a step that succeeded (the queued request would be computed next)."""
    runtime = Runtime.load(tiny_model_path)

    async def scenario():
        clock = GatedClock(TIMING, lambda step: any(len(s.output_ids) == 3 for s in step.decodes),
                           failure=RuntimeError("pricing bug"))
        clock.pricing, clock.loop = asyncio.Event(), asyncio.get_running_loop()
        worker = make_worker(runtime, clock, max_num_seqs=1)
        loop = asyncio.create_task(worker.run())
        running = worker.submit(runtime.new_sequence(list(range(3, 30)), PARAMS))
        queued = worker.submit(runtime.new_sequence(list(range(5, 40)), PARAMS))
        await clock.pricing.wait()
        worker.cancel(queued)  # deferred: a step is in flight
        clock.gate.set()
        events = [await asyncio.wait_for(running.events.get(), 30) for _ in range(4)]  # 3 tokens, then the error
        held = worker.scheduler.has_work()  # the loop has gone on to its next step (if any) by now
        loop.cancel()
        return worker, events, held, queued

    worker, events, held, queued = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert isinstance(events[-1], RuntimeError) and "pricing bug" in str(events[-1])
    assert not held and queued.seq.finish_reason is FinishReason.ABORT and queued.seq.output_ids == []
    assert worker.scheduler.budget.used == 0


def test_compute_pieces_cut_a_steps_prompt_chunks_into_forwards_in_order():
    a, b, c = object(), object(), object()
    assert compute_pieces([(a, 300), (b, 500), (c, 100)], 512) == [[(a, 300), (b, 212)], [(b, 288), (c, 100)]]
    assert compute_pieces([(a, 1100)], 512) == [[(a, 512)], [(a, 512)], [(a, 76)]]
    assert compute_pieces([(a, 10), (b, 20)], 512) == [[(a, 10), (b, 20)]]


def test_a_step_computes_in_forwards_whose_kv_can_move_before_the_step_ends(tiny_runtime):
    """Three 40-token prompts in one step of 120 tokens, computed in forwards of 32: after each forward the requests
    it touched are told (their KV can be stored while the next forward computes), the first prompt before the step
    is over; the step is still priced as composed, and the answers are those of one forward."""
    prompts = [list(range(3 + i, 43 + i)) for i in range(3)]
    greedy = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)

    def first_tokens(worker):
        async def scenario():
            loop = asyncio.create_task(worker.run())
            told: list[tuple[int, int, bool]] = []  # (request, forwards run when told, whether the step goes on)
            jobs = []
            for i, p in enumerate(prompts):
                job = worker.submit(tiny_runtime.new_sequence(p, greedy))
                job.on_prefill_chunk = lambda more, i=i: told.append((i, worker.forwards, more))
                jobs.append(job)
            events = [await job.events.get() for job in jobs]
            loop.cancel()
            return told, [tokens for tokens, _ in events], [job.prefill_modeled_s for job in jobs]
        return asyncio.run(asyncio.wait_for(scenario(), 60))

    def worker_of(chunk: int) -> Worker:
        scheduler = Scheduler(SchedulerConfig(SchedulerRole.PREFILL, max_num_batched_tokens=120), tiny_runtime.free)
        return Worker(tiny_runtime, scheduler, StepClock(TIMING), max_queue=8, compute_chunk_tokens=chunk)

    told, tokens, modeled = first_tokens(worker_of(32))
    whole_told, whole_tokens, whole_modeled = first_tokens(worker_of(4096))
    # 40 tokens cross forwards 1-2, 2-3, 3-4; the first two prompts end before the step's last forward
    assert told == [(0, 1, True), (0, 2, True), (1, 2, True), (1, 3, True), (2, 3, True), (2, 4, False)]
    assert whole_told == [(0, 1, False), (1, 1, False), (2, 1, False)]
    assert tokens == whole_tokens and modeled == whole_modeled


def test_a_request_is_charged_every_step_it_waits_through(tiny_runtime):
    """Prefill in steps of their own (SGLang's policy): a decoding request waits through another's prompt step, and its
    modeled time is the worker's modeled clock from its arrival to its last token, as in the simulator, not only the
    steps it was in."""

    async def scenario():
        worker = make_worker(tiny_runtime, policy=StepPolicy(mixed=False))
        loop = asyncio.create_task(worker.run())
        first = worker.submit(tiny_runtime.new_sequence(list(range(3, 20)), PARAMS))
        await first.events.get()
        second = worker.submit(tiny_runtime.new_sequence(list(range(3, 200)), PARAMS))  # its prompt step comes next
        for job in (first, second):
            while not (await job.events.get())[1].finished:
                pass
        loop.cancel()
        return worker, first, second

    worker, first, second = asyncio.run(asyncio.wait_for(scenario(), 60))
    for job in (first, second):
        spent = job.queue_modeled_s + job.prefill_modeled_s + job.decode_modeled_s
        assert spent == pytest.approx(job.last_token_modeled_s - job.arrived_modeled_s, rel=1e-9)
    prompt_step = worker.clock.timing.prefill_time([197], [0]).seconds
    assert first.decode_modeled_s > prompt_step  # the other's prompt step delayed its tokens



def test_a_request_arriving_during_a_paced_step_waits_only_for_its_rest():
    """The simulator's arrival mid-step waits for the step's remainder; the paced worker's modeled clock at arrival
    counts the part that has passed (never more than the step), and unpaced none of it."""
    paced, unpaced = StepClock(TIMING, pace="realtime", time_scale=2.0), StepClock(TIMING)
    for clock in (paced, unpaced):
        clock.busy_modeled_s = 1.0
        clock.step_began(time.perf_counter() - 0.2, 0.5)  # 0.2 s of wall = 0.1 modeled seconds at time scale 2
    assert 1.1 <= paced.now_modeled_s() < 1.5 and unpaced.now_modeled_s() == 1.0
    paced.step_began(time.perf_counter() - 10.0, 0.5)  # a step lagging behind its budget: at most its own length
    assert paced.now_modeled_s() == 1.5
    paced.step_ended()
    assert paced.now_modeled_s() == 1.0


def test_a_finished_prompt_learns_the_prefill_workers_next_step(tiny_runtime):
    """SGLang's prefill replies at its loop's next turn: a prompt done while another is queued gets the price of the
    step that follows; one done with nothing left gets 0 (the worker goes idle)."""
    scheduler = Scheduler(SchedulerConfig(SchedulerRole.PREFILL, kv_blocks=256, max_num_batched_tokens=64,
                                          policy=StepPolicy(mixed=False)), tiny_runtime.free)

    async def scenario():
        worker = Worker(tiny_runtime, scheduler, StepClock(TIMING), max_queue=8)
        first = worker.submit(tiny_runtime.new_sequence(list(range(3, 40)), PARAMS))
        second = worker.submit(tiny_runtime.new_sequence(list(range(3, 100)), PARAMS))  # its rest runs after
        loop = asyncio.create_task(worker.run())
        for job in (first, second):
            await job.events.get()
            await asyncio.wait_for(job.next_step_known.wait(), 30)
        loop.cancel()
        return first, second

    first, second = asyncio.run(scenario())
    assert first.next_step_modeled_s > 0 and second.next_step_modeled_s == 0.0
