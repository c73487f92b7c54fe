"""One request inside a worker: where its tokens go, and its times in both clocks (the worker's loop fills them in:
worker/worker.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pdserve.engine.sequence import Sequence
from pdserve.engine.text.stop import StepResult

TokenEvent = tuple[list[int], StepResult]


@dataclass
class Job:
    """One request inside a worker: where its tokens go, and its times in both clocks."""

    seq: Sequence
    events: asyncio.Queue[TokenEvent | BaseException] = field(default_factory=asyncio.Queue)  # per token, or a failure
    arrived_at: float = field(default_factory=time.perf_counter)
    scheduled_at: float | None = None  # first step that included it
    arrived_modeled_s: float = 0.0  # the worker's modeled busy clock at arrival
    queue_modeled_s: float = 0.0
    compute_wall_s: float = 0.0  # wall time of the prefill steps it was part of
    # the worker's modeled clock from its first step to its first token, and from there to its last (every step counts
    # while it is scheduled: one it waits through, another prompt's, delays it as much as one it is in)
    prefill_modeled_s: float = 0.0
    decode_modeled_s: float = 0.0
    last_token_at: float | None = None  # both clocks at its previous token (inter-token latency)
    last_token_modeled_s: float = 0.0
    on_prefill_chunk: Callable[[bool], object] | None = None  # after each forward over its prompt: does the step go on
    # a prefill worker's next step after this prompt's last (0.0 when it went idle): SGLang's reply leaves at that
    # loop turn (perfmodel/handoff.py TransferEngine.first_token)
    next_step_modeled_s: float = 0.0
    next_step_known: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def queue_wall_s(self) -> float:
        return (self.scheduled_at or self.arrived_at) - self.arrived_at
