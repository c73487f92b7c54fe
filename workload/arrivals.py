"""When each request is sent: offsets in seconds from the start of the run.

Open loop: a gamma process with mean gap 1 / rate and shape ``burstiness`` (1 = Poisson; below 1 burstier, above 1
more even), or everything at once for rate = inf. A trace brings its own offsets. A concurrency cap (closed loop)
is applied by the runner on top of any schedule.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator

import numpy as np


def arrival_stream(rate: float, burstiness: float = 1.0, seed: int = 0) -> Iterator[float]:
    """Endless start times: all 0 when ``rate`` is inf, else cumulative gamma gaps (the first request at 0)."""
    if rate <= 0:
        raise ValueError(f"--request-rate must be positive (or inf), got {rate}")
    if burstiness <= 0:
        raise ValueError(f"--burstiness must be positive, got {burstiness}")
    if math.isinf(rate):
        return itertools.repeat(0.0)
    rng = np.random.default_rng(seed)
    gaps = (rng.gamma(burstiness, 1.0 / (rate * burstiness)) for _ in itertools.count())
    next(gaps)  # the first request goes at 0
    return itertools.accumulate(gaps, initial=0.0)


def arrival_offsets(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    return list(itertools.islice(arrival_stream(rate, burstiness, seed), n))


def schedule(requests: list, rate: float, burstiness: float, seed: int) -> Iterator[float]:
    """The trace's own offsets when the requests carry them, else the arrival process."""
    if requests and all(r.arrival_s is not None for r in requests):
        return iter([r.arrival_s for r in requests])
    return arrival_stream(rate, burstiness, seed)


def modeled_makespan(offsets: list[float], durations: list[float], max_concurrency: int | None) -> float:
    """Seconds from the first arrival to the last finish if each request lasted ``durations[i]`` (its modeled e2e)
    and the same client sent the same schedule under the same concurrency cap: a small event replay."""
    if not offsets:
        return 0.0
    free = [offsets[0]] * min(max_concurrency or len(offsets), len(offsets))  # when each client slot is next free
    end = offsets[0]
    for arrival, duration in sorted(zip(offsets, durations)):
        finish = max(arrival, heapq.heappop(free)) + duration
        heapq.heappush(free, finish)
        end = max(end, finish)
    return end - offsets[0]
