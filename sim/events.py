"""The virtual clock: a heap of timed callbacks, run in time order (ties: lower priority first, then FIFO)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

ARRIVAL, KICK = 0, 1  # at equal times, arrivals and completions come before an idle instance starts its next step


class EventQueue:
    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list = []
        self._order = itertools.count()
        self.processed = 0

    def at(self, when: float, callback: Callable[..., None], *args, priority: int = ARRIVAL) -> None:
        if when < self.now:
            raise ValueError(f"event at {when} is in the past (now {self.now})")
        heapq.heappush(self._heap, (when, priority, next(self._order), callback, args))

    def run(self) -> float:
        """Run every event (callbacks may add more); returns the virtual time of the last one."""
        heap = self._heap
        while heap:
            when, _, _, callback, args = heapq.heappop(heap)
            self.now = when
            callback(*args)
            self.processed += 1
        return self.now
