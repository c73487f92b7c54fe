"""The two clocks inside a worker: what a step took here (wall) and what it would take on the modeled deployment.

Every prefill or decode step asks :class:`StepClock` for its modeled duration, computed by perfmodel/ from the batch
it really ran. With ``pace=realtime`` the step then lasts at least modeled x time_scale of wall time, so queues build
up the way they would on the modeled cluster; a step whose real compute is already longer than that budget is counted
as lagging. Modeled figures are always reported in modeled seconds (time_scale divided back out).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from pdserve.engine.sched.scheduler import Step
from pdserve.engine.text.stop import StepResult
from pdserve.perfmodel.handoff import LINKS, HandOff, placed_link
from pdserve.perfmodel.timing import TimingModel
from pdserve.worker.metrics import LAG_SECONDS, LAGGED_STEPS, STEP_MODELED, STEP_TOKENS, STEP_WALL

PACE_MODES = ("off", "realtime")
# the hand-off paths perfmodel/handoff.py prices; auto: where the simulator would place a prefill and a decode
# instance of this deployment (NVLink when both fit in one node, RDMA otherwise)
KV_LINKS = ("auto", *LINKS)

@dataclass
class StepTiming:
    wall_s: float
    modeled_s: float


class StepClock:
    def __init__(self, timing: TimingModel, pace: str = "off", time_scale: float = 1.0,
                 handoff: HandOff | None = None, chunk_tokens: int = 0) -> None:
        """``handoff``: the KV hand-off into this (decode) worker (default: from a prefill of the same deployment
        with its software's transfer engine); ``chunk_tokens``: the prefill's chunk, whose earlier chunks' KV has
        left before the prefill ends (SGLang)."""
        if pace not in PACE_MODES:
            raise ValueError(f"pace: {pace!r} is not one of {', '.join(PACE_MODES)}")
        if not time_scale > 0:
            raise ValueError(f"time_scale: must be positive, got {time_scale}")
        self.timing = timing
        self.handoff = handoff or HandOff.between(timing, timing)
        self.chunk_tokens = chunk_tokens
        p = timing.parallel
        self.auto_link = placed_link(p.gpus, p.gpus, p.gpus_per_node)
        self.pace = pace
        self.time_scale = time_scale
        self.busy_modeled_s = 0.0  # modeled seconds of all steps so far (a worker-local modeled clock)
        self._step_began_at: float | None = None  # the step in progress: when it began (perf_counter), its price
        self._step_modeled_s = 0.0
        for phase in ("prefill", "decode"):  # present from the start, so a lag alert has a series to watch
            LAGGED_STEPS.labels(phase)
            LAG_SECONDS.labels(phase)

    def step_began(self, started_at: float, modeled_s: float) -> None:
        """A step priced at ``modeled_s`` is in progress since ``started_at`` (perf_counter)."""
        self._step_began_at, self._step_modeled_s = started_at, modeled_s

    def step_ended(self) -> None:
        """No step in progress (it finished, failed or had nothing left to run)."""
        self._step_began_at = None

    def now_modeled_s(self) -> float:
        """The worker's modeled clock now. When pacing, a request that arrives during a step waits only for the rest
        of it, as in the simulator: the part of the step that has passed (wall / time_scale) counts as before its
        arrival. Unpaced, wall time says nothing of the modeled step, so the whole step counts as after it."""
        if self.pace != "realtime" or self._step_began_at is None:
            return self.busy_modeled_s
        passed = (time.perf_counter() - self._step_began_at) / self.time_scale
        return self.busy_modeled_s + min(passed, self._step_modeled_s)

    async def finish_step(self, phase: str, started_at: float, modeled_s: float, tokens: int) -> StepTiming:
        """Record a step that began at ``started_at`` (perf_counter) and, when pacing, wait out its budget."""
        wall = time.perf_counter() - started_at
        if self.pace == "realtime":
            budget = modeled_s * self.time_scale
            if wall < budget:
                await asyncio.sleep(budget - wall)
            else:
                LAGGED_STEPS.labels(phase).inc()
                LAG_SECONDS.labels(phase).inc(wall - budget)
        self.busy_modeled_s += modeled_s
        STEP_WALL.labels(phase).observe(time.perf_counter() - started_at)
        STEP_MODELED.labels(phase).observe(modeled_s)
        STEP_TOKENS.labels(phase).observe(tokens)
        return StepTiming(wall, modeled_s)

    def step_seconds(self, step: Step) -> float:
        """Modeled duration of a step as the scheduler composed it: every attention rank's prompt chunks and decodes in
        one forward (the simulator prices it alike: sim/steptime.py)."""
        return self.timing.step_time(step.rank_batches()).seconds

    def check_seconds(self, results: list[StepResult]) -> float:
        """The completeness checks a decode step ran (engine/text/completion.py): one more forward, priced as a prefill of
        each check's tokens after its sequence's cached context."""
        checks = [r.check for r in results if r.check is not None]
        if not checks:
            return 0.0
        return self.timing.prefill_time([c.tokens for c in checks], [c.context for c in checks]).seconds

    def handoff_seconds(self, tokens: int, link: str) -> float:
        """The modeled hand-off of a ``tokens``-token prompt's KV into this worker (the simulator's, to the
        microsecond: perfmodel/handoff.py)."""
        return self.handoff.seconds(tokens, self.auto_link if link == "auto" else link, self.chunk_tokens)

    async def pace_frontend(self) -> float:
        """The modeled deployment's per-request front end (its software's fitted HTTP, tokenization and scheduler
        hops), spent before a request reaches this worker's scheduler, as the simulator admits it (sim/cluster.py);
        when pacing, the request waits it out. Returns the modeled seconds."""
        modeled = self.timing.overheads.request_overhead_s
        if self.pace == "realtime" and modeled > 0:
            await asyncio.sleep(modeled * self.time_scale)
        return modeled

    async def pace_transfer(self, tokens: int, link: str, wall_s: float) -> float:
        """Modeled KV hand-off of ``tokens`` tokens; when pacing, the hand-off lasts at least its budget."""
        modeled = self.handoff_seconds(tokens, link)
        if self.pace == "realtime" and wall_s < modeled * self.time_scale:
            await asyncio.sleep(modeled * self.time_scale - wall_s)
        return modeled
