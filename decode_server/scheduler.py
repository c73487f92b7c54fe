"""Continuous batching for decode.

Every step: drop cancelled sequences, admit waiting ones while the KV budget and the batch size allow (prefilling
those that need it: colocated requests and preempted ones, which are recomputed), make sure every running sequence has
room for one more token (preempting the newest when the budget runs out), then run one batched decode step and stream
each sequence's new token. New requests join between steps.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field

from common.step_loop import StepLoop
from decode_server.block_manager import BlockManager
from engine.kv_cache import KVSlab
from engine.runtime import Runtime
from engine.sequence import Sequence
from engine.stop import FinishReason, StepResult
from perfmodel.clock import StepClock

log = logging.getLogger("pdserve.decode")


@dataclass
class DecodeJob:
    seq: Sequence
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    needs_prefill: bool = False  # colocated: the prompt has not been run yet
    needs_recompute: bool = False  # preempted: its KV was dropped
    enqueued_at: float = field(default_factory=time.perf_counter)
    admitted_at: float | None = None
    cancelled: bool = False
    preemptions: int = 0
    modeled_mark: float = 0.0  # the worker's modeled busy clock at arrival
    queue_modeled_s: float = 0.0
    prefill_modeled_s: float = 0.0  # colocated prefill (and recomputation) in this worker
    decode_modeled_s: float = 0.0  # modeled duration of every decode step this sequence was part of

    def emit(self, item: tuple[list[int], StepResult] | BaseException) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


class DecodeScheduler:
    def __init__(self, runtime: Runtime, clock: StepClock, kv_blocks: int, max_num_seqs: int = 64,
                 max_num_batched_tokens: int = 2048, slab_tokens: int = 2048) -> None:
        self.runtime = runtime
        self.clock = clock
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.blocks = BlockManager(kv_blocks, runtime.block_tokens)
        self.slab = KVSlab(runtime.config, max_num_seqs, min(slab_tokens, runtime.config.context_length),
                           runtime.block_tokens)
        self.waiting: deque[DecodeJob] = deque()
        self.running: list[DecodeJob] = []
        self.preemptions = 0
        self.thread: StepLoop[DecodeJob] = StepLoop("decode-steps", self.step)
        # load figures, written by the step thread, read by the event loop
        self.n_waiting = 0
        self.n_running = 0
        self.blocks_used = 0

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.thread.stop()

    def submit(self, job: DecodeJob) -> None:
        job.modeled_mark = self.clock.busy_modeled_s
        self.thread.submit(job)

    # --- bookkeeping ------------------------------------------------------------------------------------------------
    def _free(self, job: DecodeJob) -> None:
        if job.seq.kv.slab is not None:
            job.seq.kv.slab.remove(job.seq.kv)
        else:
            job.seq.kv.truncate(0)
        self.blocks.release(job.seq.request_id)

    def _finish(self, job: DecodeJob) -> None:
        self.running.remove(job)
        self._free(job)

    def _fail(self, jobs: list[DecodeJob], exc: BaseException) -> None:
        """End these requests with an error; the worker keeps serving the others."""
        for job in jobs:
            job.seq.abort(FinishReason.ERROR)
            if job in self.running:
                self.running.remove(job)
            self._free(job)
            job.emit(exc)

    def _preempt_newest(self) -> DecodeJob:
        victim = self.running.pop()  # the most recently admitted
        self._free(victim)
        victim.needs_recompute = True
        victim.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(victim)
        log.info("preempted %s (KV budget exhausted); it will be recomputed", victim.seq.request_id)
        return victim

    def _tokens_in_kv_after_admit(self, job: DecodeJob) -> int:
        # after admission the KV holds every token but the newest, and the next step writes that one
        return len(job.seq.prompt_ids) + max(1, len(job.seq.output_ids))

    # --- one step ---------------------------------------------------------------------------------------------------
    def step(self, new_jobs: list[DecodeJob]) -> bool:
        step_start = time.perf_counter()  # the paced budget covers the whole iteration, bookkeeping included
        self.waiting.extend(new_jobs)
        for job in [j for j in self.running if j.cancelled]:
            job.seq.abort()
            self._finish(job)
        for job in [j for j in self.waiting if j.cancelled]:
            self.waiting.remove(job)
            self._free(job)

        to_prefill = self._admit()
        if to_prefill:
            self._prefill(to_prefill)
            step_start = time.perf_counter()
        self._reserve_next_token()
        if self.running:
            self._decode(step_start)
        self.n_waiting, self.n_running, self.blocks_used = len(self.waiting), len(self.running), self.blocks.used
        return bool(self.running or self.waiting)

    def _admit(self) -> list[DecodeJob]:
        to_prefill: list[DecodeJob] = []
        budget = self.max_num_batched_tokens
        while self.waiting and len(self.running) < self.max_num_seqs:
            job = self.waiting[0]
            tokens = self._tokens_in_kv_after_admit(job)
            prefill_tokens = tokens - 1 if (job.needs_prefill or job.needs_recompute) else 0
            if prefill_tokens and to_prefill and prefill_tokens > budget:
                break  # next step
            if not self.blocks.can_allocate(tokens):
                if not self.running and not to_prefill:
                    self.waiting.popleft()
                    job.seq.abort(FinishReason.ERROR)
                    job.emit(MemoryError(f"the request needs {self.blocks.blocks_for(tokens)} KV blocks; this "
                                         f"decode worker has {self.blocks.total_blocks}"))
                    continue
                break
            self.waiting.popleft()
            self.blocks.allocate(job.seq.request_id, tokens)
            if job.admitted_at is None:
                job.admitted_at = time.perf_counter()
                job.queue_modeled_s = self.clock.busy_modeled_s - job.modeled_mark
            budget -= prefill_tokens
            if prefill_tokens:
                to_prefill.append(job)
            else:
                self._join(job)
        return to_prefill

    def _join(self, job: DecodeJob) -> None:
        self.running.append(job)
        kv = job.seq.kv
        if self.slab.can_add(kv.length + 1):
            self.slab.add(kv)

    def _prefill(self, jobs: list[DecodeJob]) -> None:
        fresh = [j for j in jobs if j.needs_prefill]
        again = [j for j in jobs if j.needs_recompute]
        start = time.perf_counter()
        work = [(len(j.seq.prompt_ids), 0) for j in fresh] + [(len(j.seq.all_ids) - 1, 0) for j in again]
        try:
            results = self.runtime.prefill([(j.seq, len(j.seq.prompt_ids)) for j in fresh]) if fresh else []
            if again:
                self.runtime.recompute([j.seq for j in again])
        except Exception as exc:  # fail these requests, keep the worker serving
            log.exception("prefill in decode worker failed")
            self._fail(jobs, exc)
            return
        modeled = self.clock.prefill_seconds(work)
        self.clock.finish_step("prefill", start, modeled, sum(n for n, _ in work))
        for job in fresh:
            job.prefill_modeled_s += modeled
        for job in again:  # recomputation delays this sequence's next token: decode time
            job.decode_modeled_s += modeled
        for job in jobs:
            job.needs_prefill = job.needs_recompute = False
        for job, result in zip(fresh, results):  # colocated: prompt -> first token, streamed like any other
            job.emit(([job.seq.output_ids[-1]], result))
        for job in jobs:
            if job.seq.finished:
                self._free(job)
            else:
                self._join(job)

    def _reserve_next_token(self) -> None:
        i = 0
        while i < len(self.running):
            job = self.running[i]
            if self.blocks.may_append(job.seq.request_id, job.seq.kv.length + 1):
                i += 1
                continue
            victim = self._preempt_newest()
            if victim is job:
                continue  # the sequence itself was the newest; i now points past the end or at the next one

    def _decode(self, start: float) -> None:
        jobs = list(self.running)
        contexts = [j.seq.kv.length + 1 for j in jobs]
        try:
            results = self.runtime.decode_step([j.seq for j in jobs])
        except Exception as exc:
            log.exception("decode step failed")
            self._fail(jobs, exc)
            return
        modeled = self.clock.decode_seconds(contexts)
        self.clock.finish_step("decode", start, modeled, len(jobs))
        for job, result in zip(jobs, results):
            job.decode_modeled_s += modeled
            job.emit(([job.seq.output_ids[-1]], result))
            if result.finished:
                self._finish(job)
