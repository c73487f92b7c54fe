"""Which worker gets a request.

Prefill: ``round_robin``; ``least_loaded`` (fewest queued prompt tokens, from the worker's own report plus what this
router sent since); ``cache_aware`` (most leading prompt blocks the worker recently computed, so its local prefix
cache hits, minus its queued tokens: a hot prefix does not pile everything onto one worker).
Decode: least KV usage, then fewest running requests.
"""

from __future__ import annotations

import itertools

from pdserve.router.workers import Upstream

PREFILL_POLICIES = ("round_robin", "least_loaded", "cache_aware")


class PrefillPolicy:
    def __init__(self, name: str, block_tokens: int, balance: float = 1.0) -> None:
        if name not in PREFILL_POLICIES:
            raise ValueError(f"policy: {name!r} is not one of {', '.join(PREFILL_POLICIES)}")
        self.name = name
        self.block_tokens = block_tokens
        self.balance = balance  # queued tokens that outweigh one matched token
        self._rr = itertools.count()

    @staticmethod
    def queued_tokens(w: Upstream) -> int:
        return max(w.load.waiting_tokens, w.inflight_tokens)

    def choose(self, workers: list[Upstream], block_keys: list[str]) -> Upstream:
        if self.name == "round_robin":
            return workers[next(self._rr) % len(workers)]
        if self.name == "least_loaded":
            return min(workers, key=lambda w: (self.queued_tokens(w), w.inflight))
        return max(workers, key=lambda w: (w.matched_blocks(block_keys) * self.block_tokens
                                           - self.balance * self.queued_tokens(w), -w.inflight))


def choose_decode(workers: list[Upstream]) -> Upstream:
    def usage(w: Upstream) -> float:
        total = w.load.kv_blocks_total or 1
        return w.load.kv_blocks_used / total
    return min(workers, key=lambda w: (round(usage(w), 2), max(w.load.running + w.load.waiting, w.inflight)))
