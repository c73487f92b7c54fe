"""A run as the load tool and the simulator record it: how it was sent (:class:`LoadSpec`, :class:`Sampling`), each
request's outcome (:class:`RequestRecord`, what every statistic is computed from) and the whole run (:class:`RunResult`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    index: int
    scheduled_s: float = 0.0  # planned start, seconds after the run began
    start_s: float = 0.0      # real start (later than planned when the concurrency cap held it back)
    ok: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)  # every gap between chunks that carried tokens
    finish_reason: str = ""
    error_code: str = ""  # gRPC status name, "HTTP 503", "connection", ...
    error: str = ""
    server: dict[str, float] = field(default_factory=dict)  # the server's per-request timings, both clocks

    @property
    def tpot_s(self) -> float:
        """Mean time per output token after the first, as vLLM defines it: (e2e - ttft) / (n - 1)."""
        return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1) if self.completion_tokens > 1 else 0.0

    def modeled(self, name: str) -> float | None:
        """A modeled-clock figure from the server's final chunk (``ttft``, ``tpot``, ``e2e``), None if absent."""
        value = self.server.get(f"{name}_modeled_s")
        return float(value) if value is not None else None


class Stopwatch:
    """Turns chunk arrival instants into TTFT, ITLs and e2e for one record (perf_counter seconds)."""

    def __init__(self, record: RequestRecord, start: float) -> None:
        self.record = record
        self.start = start
        self.last: float | None = None
        self.chunks_with_tokens = 0

    def tokens(self, n: int, now: float) -> None:
        if n <= 0:
            return
        if self.last is None:
            self.record.ttft_s = now - self.start
        else:
            self.record.itl_s.append(now - self.last)
        self.last = now
        self.chunks_with_tokens += 1
        self.record.completion_tokens += n

    def done(self, now: float) -> None:
        self.record.e2e_s = now - self.start
        self.record.ok = True


@dataclass
class Sampling:
    temperature: float = 0.0
    ignore_eos: bool = False


@dataclass
class LoadSpec:
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    duration_s: float | None = None  # with it the dataset repeats until this many seconds have passed
    warmup: int = 0
    seed: int = 0
    sampling: Sampling = field(default_factory=Sampling)
    progress: bool = True

    def __post_init__(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"--max-concurrency must be at least 1, got {self.max_concurrency}")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError(f"--duration must be positive, got {self.duration_s}")
        if self.duration_s and math.isinf(self.request_rate) and not self.max_concurrency:
            raise ValueError("--duration needs a finite --request-rate or a --max-concurrency")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup}")


@dataclass
class RunResult:
    records: list[RequestRecord]
    duration_s: float  # first send to last finish, wall clock
    spec: LoadSpec
