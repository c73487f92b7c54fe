"""One simulated serving instance: a modeled deployment running the real scheduler on the virtual clock.

The instance is a worker loop (worker/worker.py) without the I/O: while it has work it asks the scheduler (one, or
one per data-parallel attention rank, as its software's profile says: common/scheduling.py) for a step, prices it
with perfmodel as the workers' clock does (the step as composed: prompt chunks and decodes of every rank), lets the
virtual clock run for that long, applies what the runtime would have done and hands the step back to
``postprocess``. It also answers the questions the router's policies ask (router/policy.py) and records what it did
over time and where each request's time went.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from pdserve.common.scheduling import ModeledScheduling
from pdserve.engine.sched.scheduler import SchedulerRole, Step, StepOutput
from pdserve.router.workers import Upstream
from pdserve.sim.sequence import SimSequence, free_kv, run_decode, run_prefill
from pdserve.sim.steptime import StepTimer
from pdserve.v1 import common_pb2


@dataclass
class InstanceStats:
    """What an instance did: one row per step and per KV transfer, and the totals."""

    # one row per step: (start, duration, queued (waiting, not in this step), running, kv blocks used)
    trace: list[tuple[float, float, int, int, int]] = field(default_factory=list)
    transfers: list[tuple[float, float]] = field(default_factory=list)  # (time sent, bytes)
    steps: int = 0
    busy_s: float = 0.0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    transfer_bytes: float = 0.0  # KV sent from this instance


class Instance:
    remember = Upstream.remember  # the router's bookkeeping of recently computed prefix blocks (cache_aware)
    matched_blocks = Upstream.matched_blocks

    def __init__(self, name: str, role: SchedulerRole, scheduling: ModeledScheduling, node: int, timer: StepTimer) -> None:
        self.name = name
        self.role = SchedulerRole(role)
        self.scheduling = scheduling
        self.deployment = scheduling.deployment
        self.node = node  # first node this instance occupies
        self.nodes = max(1, self.deployment.gpus // self.deployment.gpus_per_node)
        self.timer = timer
        self.scheduler = scheduling.build(free_kv)
        self.busy = False
        self.lanes_free_at: list[float] = [0.0]  # when each of the outgoing KV transfer lanes (NICs) is free
        c = scheduling.config
        self.chunk_tokens = c.max_num_batched_tokens if c.policy.chunked else 0  # a prompt's KV leaves per chunk
        self.busy_until = 0.0  # end of the step in progress
        self.stats = InstanceStats()
        self.inflight = 0  # requests the router sent here and that are not finished
        self.inflight_tokens = 0
        self.recent_keys: OrderedDict = OrderedDict()
        self._seconds = 0.0  # the running step's duration

    @property
    def load(self) -> common_pb2.WorkerLoad:
        """What a worker's GetLoad answers (the fields the router's policies read), taken live from the scheduler."""
        s = self.scheduler
        return common_pb2.WorkerLoad(waiting=len(s.waiting), running=len(s.running), waiting_tokens=s.pending_tokens,
                                     kv_blocks_used=s.budget.used if s.budget else 0,
                                     kv_blocks_total=s.budget.total_blocks if s.budget else 0)

    def shares_node(self, other: "Instance") -> bool:
        return self.node < other.node + other.nodes and other.node < self.node + self.nodes

    def begin_step(self, now: float) -> tuple[Step, float] | None:
        """The next step and its modeled duration, or None when there is nothing to run."""
        s = self.scheduler
        if not s.has_work():
            return None
        step = s.schedule()
        if not step:
            return None
        seconds = self.timer.step_seconds(step)
        for seq, _ in step.prefills:
            if seq.first_step_s is None:
                seq.first_step_s = now
            if not seq.output_ids:  # its own prompt (a recomputation is a wait between its tokens)
                seq.prefill_s += seconds
        st = self.stats
        st.prefill_tokens += sum(n for _, n in step.prefills)
        st.decode_tokens += len(step.decodes)
        st.steps += 1
        st.busy_s += seconds
        queued = len(s.waiting) - len(step.prefills)  # prompts being computed stay in ``waiting`` until done
        st.trace.append((now, seconds, queued, len(s.running), s.budget.used if s.budget else 0))
        self.busy = True
        self.busy_until = now + seconds
        self._seconds = seconds
        return step, seconds

    def end_step(self, step: Step, now: float) -> list[tuple[SimSequence, object]]:
        """Apply the step's effects at its end and let the scheduler move sequences on."""
        output = StepOutput(run_prefill(step.prefills, now) if step.prefills else [],
                            run_decode(step.decodes, now) if step.decodes else [])
        for seq in step.decodes:  # the step that made the token was decoding, the rest of the gap was waiting
            seq.decode_s += self._seconds
            seq.stall_s -= self._seconds
        self.busy = False
        return self.scheduler.postprocess(step, output)

    def describe(self) -> str:
        return self.deployment.shape_label()
