"""Batched prefill: waiting prompts are packed into one forward per step, up to a token budget.

A prompt longer than the budget is processed in chunks over several steps (its KV grows in place between them).
First come, first served: the head of the queue always gets tokens, so a long prompt cannot starve.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

from common.step_loop import StepLoop
from engine.runtime import Runtime
from engine.sequence import Sequence
from engine.stop import StepResult
from perfmodel.clock import StepClock


@dataclass
class PrefillJob:
    seq: Sequence
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    enqueued_at: float = field(default_factory=time.perf_counter)
    started_at: float | None = None
    compute_s: float = 0.0
    modeled_s: float = 0.0  # modeled duration of the steps this prompt was part of
    modeled_mark: float = 0.0  # the worker's modeled busy clock when the job arrived
    queue_modeled_s: float | None = None
    cancelled: bool = False

    @property
    def tokens_left(self) -> int:
        return len(self.seq.prompt_ids) - self.seq.kv.length


class PrefillScheduler:
    def __init__(self, runtime: Runtime, clock: StepClock, max_num_batched_tokens: int = 2048,
                 max_num_seqs: int = 64) -> None:
        self.runtime = runtime
        self.clock = clock
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.waiting: list[PrefillJob] = []  # owned by the step thread
        self._counts = threading.Lock()  # guards the two load figures below, updated from both threads
        self.queued = 0  # jobs submitted and not finished
        self.waiting_tokens = 0  # prompt tokens still to compute
        self.thread: StepLoop[PrefillJob] = StepLoop("prefill-steps", self.step)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.thread.stop()

    def _count(self, jobs: int, tokens: int) -> None:
        with self._counts:
            self.queued += jobs
            self.waiting_tokens += tokens

    def submit(self, job: PrefillJob) -> None:
        job.modeled_mark = self.clock.busy_modeled_s
        self._count(1, job.tokens_left)
        self.thread.submit(job)

    def _resolve(self, job: PrefillJob, result: StepResult | BaseException) -> None:
        self._count(-1, -job.tokens_left)

        def set_result() -> None:
            if job.future.done():
                return
            if isinstance(result, BaseException):
                job.future.set_exception(result)
            else:
                job.future.set_result(result)
        job.loop.call_soon_threadsafe(set_result)

    def step(self, new_jobs: list[PrefillJob]) -> bool:
        self.waiting.extend(new_jobs)
        for job in [j for j in self.waiting if j.cancelled]:
            self.waiting.remove(job)
            self._resolve(job, asyncio.CancelledError())
        budget = self.max_num_batched_tokens
        batch: list[PrefillJob] = []
        chunks: list[tuple[Sequence, int]] = []
        for job in self.waiting[:self.max_num_seqs]:
            if budget <= 0:
                break
            n = min(job.tokens_left, budget)
            batch.append(job)
            chunks.append((job.seq, n))
            budget -= n
        if not batch:
            return False
        start = time.perf_counter()
        cached = [job.seq.kv.length for job in batch]
        for job in batch:
            job.started_at = job.started_at or start
            if job.queue_modeled_s is None:
                job.queue_modeled_s = self.clock.busy_modeled_s - job.modeled_mark
        try:
            results = self.runtime.prefill(chunks)
        except Exception as exc:  # fail this batch, keep serving
            for job in batch:
                self.waiting.remove(job)
                self._resolve(job, exc)
            return bool(self.waiting)
        modeled = self.clock.prefill_seconds([(n, c) for (_, n), c in zip(chunks, cached)])
        timing = self.clock.finish_step("prefill", start, modeled, sum(n for _, n in chunks))
        self._count(0, -sum(n for _, n in chunks))
        for job, result in zip(batch, results):
            job.compute_s += timing.wall_s
            job.modeled_s += modeled
            if result is not None:
                self.waiting.remove(job)
                self._resolve(job, result)
        return bool(self.waiting)
