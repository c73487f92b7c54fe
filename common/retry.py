"""One retry policy for calls to upstream services: the router's workers and leases, the kvstore client's shards.

- **What is retried.** UNAVAILABLE means the target is down or restarting and did not run the call: the call moves
  to another target (a prefill worker, a decode worker that streamed nothing yet, a kvstore shard next in the key's
  ranking). Each path may add what it knows is safe to repeat (a full prefill queue, a block missing from one shard);
  every other code is the caller's answer.
- **Marking a target down.** A target that answered UNAVAILABLE is skipped for ``down_for_s`` (:class:`DownMark`),
  unless every candidate is down: then all of them are tried, since one may be back already.
- **Rounds.** When every target of a pool was unavailable (one restarting while the channel to it is still in its
  reconnect backoff, the other draining), the pool is tried again after a pause that grows each round, ``rounds``
  passes in all.
- **A lost lease.** A prefill whose kvstore no longer knows the request's lease (it restarted, empty) is run again
  under a new lease, ``lease_attempts`` times in all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import grpc

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    rounds: int = 3  # passes over a pool's targets while every one answers UNAVAILABLE
    round_pause_s: float = 0.5  # the pause before pass r (counted from 0) is r times this
    down_for_s: float = 2.0  # a target that answered UNAVAILABLE is skipped this long
    lease_attempts: int = 2  # a request's lease made (and its prompt prefilled) at most this often

    @staticmethod
    def unavailable(err: object) -> bool:
        """The call did not run: the target is down or restarting (worth another target, or another round)."""
        return isinstance(err, grpc.aio.AioRpcError) and err.code() == grpc.StatusCode.UNAVAILABLE

    async def pause(self, round_: int) -> None:
        """Wait before pass ``round_`` over a pool (none before the first)."""
        if round_:
            await asyncio.sleep(self.round_pause_s * round_)

    def mark_down(self, mark: DownMark) -> bool:
        """Skip a target for ``down_for_s``; True if it was up until now (its first failure: worth a log line)."""
        return mark.mark(self.down_for_s)

    async def call(self, attempt: Callable[[], Awaitable[T]],
                   on_retry: Callable[[grpc.aio.AioRpcError], None] | None = None) -> T:
        """``attempt()`` against a single target (or one that fails over by itself, as the kvstore client does):
        again after a pause while it answers UNAVAILABLE, ``rounds`` times in all; the last error is raised."""
        for round_ in range(self.rounds):
            await self.pause(round_)
            try:
                return await attempt()
            except grpc.aio.AioRpcError as err:
                if on_retry is not None:
                    on_retry(err)
                if not self.unavailable(err) or round_ == self.rounds - 1:
                    raise
        raise AssertionError("unreachable: the last round raises")  # pragma: no cover


DEFAULT_RETRY = RetryPolicy()


class DownMark:
    """Whether one target is being skipped: it answered UNAVAILABLE less than the policy's ``down_for_s`` ago."""

    __slots__ = ("until", "clock")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.until = 0.0
        self.clock = clock

    @property
    def down(self) -> bool:
        return self.clock() < self.until

    def mark(self, for_s: float) -> bool:
        was_up = not self.down
        self.until = self.clock() + for_s
        return was_up

    def clear(self) -> bool:
        """Up again (a health check found it serving); True if it had been marked."""
        marked = self.until != 0.0
        self.until = 0.0
        return marked


def live_first(candidates: Iterable[T], live: Callable[[T], bool]) -> list[T]:
    """The candidates ``live`` accepts, or, when it accepts none, all of them (one may be back already)."""
    candidates = list(candidates)
    return [c for c in candidates if live(c)] or candidates
