"""A model-stepping thread beside the asyncio event loop.

numpy releases the GIL inside its kernels, so a step running here leaves the event loop free to stream tokens and
move KV bytes. Work arrives through :meth:`submit` from the event loop; results go back with
``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger("pdserve.step_loop")

Job = TypeVar("Job")


class StepLoop(threading.Thread, Generic[Job]):
    def __init__(self, name: str, step: Callable[[list[Job]], bool]) -> None:
        """``step(new_jobs)`` takes the jobs submitted since the last call and returns whether work remains."""
        super().__init__(name=name, daemon=True)
        self._step = step
        self._inbox: deque[Job] = deque()
        self._cv = threading.Condition()
        self._stopped = False
        self._busy = False

    def submit(self, job: Job) -> None:
        with self._cv:
            self._inbox.append(job)
            self._cv.notify()

    def wake(self) -> None:
        with self._cv:
            self._cv.notify()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()

    def run(self) -> None:
        busy = False
        while True:
            with self._cv:
                while not busy and not self._inbox and not self._stopped:
                    self._cv.wait()
                if self._stopped:
                    return
                new_jobs = list(self._inbox)
                self._inbox.clear()
            try:
                busy = self._step(new_jobs)
            except Exception:  # a bug in a step must not kill the worker silently
                log.exception("%s: step failed", self.name)
                busy = False
