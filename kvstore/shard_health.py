"""Which kvstore shards a client is skipping for now: those that answered UNAVAILABLE lately (the retry policy's
``down_for_s``, ``common/retry.py``). A shard down is logged once, when it goes down, not at every call it misses."""

from __future__ import annotations

import logging

from pdserve.common.retry import DownMark, RetryPolicy

log = logging.getLogger("pdserve.kvstore.client")


class ShardHealth:
    def __init__(self, targets: list[str], retry: RetryPolicy) -> None:
        self.targets = targets
        self.retry = retry
        self.marks = [DownMark() for _ in targets]

    def unavailable(self, result: object) -> bool:
        """A shard's answer that it is down or restarting (the policy's rule)."""
        return self.retry.unavailable(result)

    def mark_down(self, shard: int) -> None:
        if self.retry.mark_down(self.marks[shard]):
            log.warning("kvstore shard %s unavailable; using the others", self.targets[shard])

    def live(self, shard: int) -> bool:
        return not self.marks[shard].down
