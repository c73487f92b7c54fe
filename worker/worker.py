"""The model worker's loop, shared by prefill and decode.

The scheduler lives on the asyncio event loop, with the gRPC handlers: submitting, cancelling and reading the load
are plain method calls, with no locks and no mirrored counters. Only the numpy work of a step (and its pricing) runs in
a thread (numpy releases the GIL), so the event loop keeps streaming tokens and moving KV bytes meanwhile. A request
cancelled once its step is composed is removed right after that step: the forward never loses its KV mid-flight.

Each step is timed in both clocks; a request's :class:`Job` collects its queue, prefill and decode time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from pdserve.engine.runtime import Runtime
from pdserve.engine.sched.scheduler import Scheduler, SchedulerRole, Step, StepOutput
from pdserve.engine.sequence import Sequence
from pdserve.engine.text.stop import FinishReason, StepResult
from pdserve.v1 import common_pb2
from pdserve.worker.clock import StepClock
from pdserve.worker.forwards import DEFAULT_COMPUTE_CHUNK_TOKENS, compute_pieces
from pdserve.worker.job import Job
from pdserve.worker.metrics import ITL, PROMPT_FORWARDS

log = logging.getLogger("pdserve.worker")

DEFAULT_STEP_NICE = 5
class WorkerFull(Exception):
    """The worker holds as many requests as it may (``--max-queue``)."""


class WorkerDraining(Exception):
    """The worker is shutting down: it finishes what it holds and takes nothing new (answered UNAVAILABLE, so the
    router sends the request elsewhere)."""


def lower_thread_priority(nice: int) -> None:
    """Raise the calling thread's nice value by ``nice`` (Linux keeps one per thread; threads it starts inherit it).

    The model step is the one thread that would use a core for seconds on end; at a lower priority it yields to the
    process's event loop and to the kvstore, so that on shared cores the KV hand-off and token streaming are not
    starved while the next step computes. Raising a nice value needs no privilege."""
    if nice > 0 and hasattr(os, "setpriority"):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)


class Worker:
    def __init__(self, runtime: Runtime, scheduler: Scheduler, clock: StepClock, max_queue: int,
                 served_name: str = "", step_nice: int = 0,
                 compute_chunk_tokens: int = DEFAULT_COMPUTE_CHUNK_TOKENS) -> None:
        self.runtime = runtime
        self.compute_chunk_tokens = compute_chunk_tokens  # tokens per forward on this machine (not the step budget)
        self.forwards = 0  # prompt forwards run (more than prefill steps where steps are cut finer)
        self.scheduler = scheduler
        self.clock = clock
        self.max_queue = max_queue
        self.inflight = 0  # requests inside the service (including their KV transfers), for --max-queue
        self.draining = False
        self._idle = asyncio.Event()
        self._jobs: dict[int, Job] = {}  # id(sequence) -> job, while the scheduler holds the sequence
        self._awaiting_next_step: list[Job] = []  # prompts done in the last step, until the next one is priced
        self._wake = asyncio.Event()
        self._stepping = False
        self._cancel_after_step: list[Sequence] = []
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="model-step", initializer=lower_thread_priority,
                                            initargs=(step_nice,))
        self.served_name = served_name or runtime.model_name  # the model_name label, as the router names it
        self.on_preempted: Callable[[int], object] | None = None  # called with the number preempted by a step
        self._preemptions_seen = 0

    # --- what the service calls -------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def admission(self):
        """Hold one of the worker's ``max_queue`` request places for the duration of a request."""
        if self.draining:
            raise WorkerDraining("worker is draining (shutting down); send the request to another worker")
        if self.inflight >= self.max_queue:
            raise WorkerFull(f"worker is full ({self.inflight} of {self.max_queue} requests)")
        self.inflight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.inflight -= 1
            if not self.inflight:
                self._idle.set()

    async def drain(self, timeout_s: float) -> None:
        """Take no new requests and wait (at most ``timeout_s``) until those inside have finished."""
        self.draining = True
        if self.inflight:
            log.info("draining: waiting for %d requests (at most %.0fs)", self.inflight, timeout_s)
            try:
                await asyncio.wait_for(self._idle.wait(), timeout_s)
            except TimeoutError:
                log.warning("drain timed out with %d requests still running; they are cancelled", self.inflight)

    def submit(self, seq: Sequence) -> Job:
        """Queue a sequence; its tokens arrive on ``job.events``. Raises KVBudgetExceeded for one that can never run."""
        self.scheduler.add(seq)
        job = Job(seq, arrived_modeled_s=self.clock.now_modeled_s())
        self._jobs[id(seq)] = job
        self._wake.set()
        return job

    def cancel(self, job: Job) -> None:
        """Drop a request the caller gave up on: its KV is freed now, or right after the step that is using it."""
        if self._jobs.pop(id(job.seq), None) is None:
            return  # already finished
        if self._stepping:
            self._cancel_after_step.append(job.seq)
        else:
            self.scheduler.abort(job.seq)

    def load(self) -> common_pb2.WorkerLoad:
        s = self.scheduler
        return common_pb2.WorkerLoad(
            waiting=len(s.waiting), running=len(s.running), waiting_tokens=s.pending_tokens,
            kv_blocks_used=s.budget.used if s.budget else 0, kv_blocks_total=s.budget.total_blocks if s.budget else 0,
            model_fingerprint=self.runtime.config.fingerprint)

    # --- the loop ---------------------------------------------------------------------------------------------------
    async def run(self) -> None:
        try:
            while True:
                step = self.scheduler.schedule() if self.scheduler.has_work() else Step()
                if not step:
                    self._next_step_priced(0.0)  # idle: no step keeps a finished prompt's reply waiting
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                try:
                    await self._run_step(step)
                except Exception as exc:  # a bug in one step must not stop the worker, nor garble its requests
                    log.exception("step failed")
                    self._fail([seq for seq, _ in step.prefills] + step.decodes, exc)
        finally:
            self._next_step_priced(0.0)
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run_step(self, step: Step) -> None:
        """Compute the step, then move its sequences along and deliver their tokens. The cancels that arrived while it
        was in flight take effect after it, also when it failed."""
        try:
            output = await self._compute(step)
            for seq, result in self.scheduler.postprocess(step, output):
                self._deliver(seq, result)
            preempted = self.scheduler.num_preemptions - self._preemptions_seen
            if preempted and self.on_preempted is not None:
                self.on_preempted(preempted)
            self._preemptions_seen = self.scheduler.num_preemptions
        finally:
            cancelled, self._cancel_after_step = self._cancel_after_step, []
            for seq in cancelled:
                self._abort(seq)

    async def _compute(self, step: Step) -> StepOutput:
        started = time.perf_counter()  # the paced budget covers the whole iteration, scheduling included
        self._note_scheduled(step, started)
        # the scheduled requests, and whether each had its first token before this step (the step samples the next)
        had_output = {key: bool(job.seq.output_ids) for key, job in self._jobs.items() if job.scheduled_at is not None}
        output = StepOutput()
        self._stepping = True  # from here the step holds its sequences: a cancel waits for it, even during pricing
        try:
            # priced as composed, before running changes the KV lengths (off the event loop: a new shape prices for
            # ms)
            modeled = await asyncio.get_running_loop().run_in_executor(self._executor, self.clock.step_seconds, step)
            self.clock.step_began(started, modeled)
            self._next_step_priced(modeled)
            if step.prefills:
                output.prefills = await self._prefill_phase(step)
            if step.decodes:
                output.decodes = await self._decode_phase(step)
                modeled += self.clock.check_seconds(output.decodes)  # known once decoded: a check is one more forward
            if step:
                phase = "mixed" if step.prefills and step.decodes else "prefill" if step.prefills else "decode"
                timing = await self.clock.finish_step(phase, started, modeled,
                                                      sum(n for _, n in step.prefills) + len(step.decodes))
                self._account(step, had_output, modeled, timing.wall_s)
        finally:
            self._stepping = False
            self.clock.step_ended()
        return output

    async def _prefill_phase(self, step: Step) -> list[StepResult | None]:
        """The step's prompt chunks, computed in forwards of at most ``compute_chunk_tokens`` tokens: after each
        forward the KV it completed can move (a Put on the event loop) while the next forward computes. The step was
        composed, and is priced, as a whole: only this machine's computing is cut finer."""
        chunks = step.prefills
        seqs = [seq for seq, _ in chunks]
        results: dict[int, StepResult | None] = {}
        pieces = compute_pieces(chunks, self.compute_chunk_tokens)
        for i, piece in enumerate(pieces):
            out = await self._execute(lambda piece=piece: self.runtime.prefill(piece), seqs)
            if out is None:
                step.prefills = []
                return []
            self.forwards += 1
            PROMPT_FORWARDS.inc()
            for (seq, _), result in zip(piece, out):
                results[id(seq)] = result
                job = self._jobs.get(id(seq))  # before any pacing sleep: the KV of this piece can move now
                if job is not None and job.on_prefill_chunk is not None:
                    job.on_prefill_chunk(i < len(pieces) - 1)
        return [results[id(seq)] for seq in seqs]

    async def _decode_phase(self, step: Step) -> list[StepResult]:
        results = await self._execute(lambda: self.runtime.decode_step(step.decodes), step.decodes)
        if results is None:
            step.decodes = []
            return []
        return results

    def _account(self, step: Step, had_output: dict[int, bool], modeled: float, wall: float) -> None:
        """The step in both clocks: the wall time of the prompts it computed, and its modeled time to every request
        scheduled so far (the simulator's clock runs for all of them alike): prefill time until a request has its
        first token, decode time after (a recomputed prompt delays the next token)."""
        for seq, _ in step.prefills:
            job = self._jobs.get(id(seq))
            if job is not None:
                job.compute_wall_s += wall
        for key, decoding in had_output.items():
            job = self._jobs.get(key)
            if job is None:
                continue  # cancelled during the step
            if decoding:
                job.decode_modeled_s += modeled
            else:
                job.prefill_modeled_s += modeled

    async def _execute(self, work: Callable[[], list], seqs: list[Sequence]) -> list | None:
        """Run one phase's numpy work off the event loop.

        A failure ends these requests with an error, not the worker; the result is then None.
        """
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, work)
        except Exception as exc:
            log.exception("model step failed for %d sequences", len(seqs))
            self._fail(seqs, exc)
            return None

    def _fail(self, seqs: list[Sequence], exc: Exception) -> None:
        """End these requests with an error (their callers get ``exc``) and free their KV: a step that failed part
        way may have left their tokens undelivered, and a stream that skipped one would be a wrong answer."""
        for seq in seqs:
            job = self._jobs.pop(id(seq), None)
            if job is not None:
                job.events.put_nowait(exc)
            self._abort(seq, FinishReason.ERROR)

    def _abort(self, seq: Sequence, reason: FinishReason = FinishReason.ABORT) -> None:
        """Remove a sequence from the scheduler and free its KV. After a failed step its state may be broken: a
        failure here is logged, and never stops the loop every other request depends on."""
        try:
            self.scheduler.abort(seq, reason)
        except Exception:
            log.exception("could not free request %s", seq.request_id)

    def _note_scheduled(self, step: Step, now: float) -> None:
        for seq in [seq for seq, _ in step.prefills] + step.decodes:
            job = self._jobs.get(id(seq))
            if job is not None and job.scheduled_at is None:
                job.scheduled_at = now
                job.queue_modeled_s = self.clock.busy_modeled_s - job.arrived_modeled_s

    def _deliver(self, seq: Sequence, result: StepResult) -> None:
        job = self._jobs.get(id(seq))
        if job is None:
            return  # cancelled while the step ran
        job.events.put_nowait(([seq.output_ids[-1]], result))
        now, now_modeled = time.perf_counter(), self.clock.busy_modeled_s
        if job.last_token_at is not None:
            ITL.observe(now - job.last_token_at, now_modeled - job.last_token_modeled_s, self.served_name)
        job.last_token_at, job.last_token_modeled_s = now, now_modeled
        if result.finished or self.scheduler.config.role is SchedulerRole.PREFILL:
            del self._jobs[id(seq)]
            if self.scheduler.config.role is SchedulerRole.PREFILL:
                self._awaiting_next_step.append(job)

    def _next_step_priced(self, modeled: float) -> None:
        for job in self._awaiting_next_step:
            job.next_step_modeled_s = modeled
            job.next_step_known.set()
        self._awaiting_next_step.clear()
