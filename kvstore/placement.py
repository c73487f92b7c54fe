"""Where a block lives: rendezvous (highest random weight) hashing of its key over the shard addresses.

Every client computes the same placement with no coordination, and adding a shard moves only the keys that now rank
it highest. A shard that is down (:class:`~pdserve.kvstore.shard_health.ShardHealth`) gives its keys to the next
shard in their ranking: the same fallback every client computes.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

from pdserve.common.retry import live_first
from pdserve.kvstore.shard_health import ShardHealth


def rendezvous_ranking(key: str, shards: list[str]) -> list[int]:
    """Shard indices from the one that ranks highest for this key to the lowest."""
    def weight(shard: str) -> int:
        return int.from_bytes(hashlib.sha256(f"{shard}|{key}".encode()).digest()[:8], "big")
    return sorted(range(len(shards)), key=lambda i: weight(shards[i]), reverse=True)


def rendezvous_shard(key: str, shards: list[str]) -> int:
    """Index of the shard that ranks highest for this key."""
    return rendezvous_ranking(key, shards)[0]


class Placement:
    def __init__(self, targets: list[str], health: ShardHealth) -> None:
        self.targets = targets
        self.health = health

    def choose(self, key: str, tried: frozenset[int] = frozenset()) -> int | None:
        """The key's highest-ranked shard not tried yet, live shards before those recently down."""
        ranking = [0] if len(self.targets) == 1 else rendezvous_ranking(key, self.targets)
        candidates = live_first((i for i in ranking if i not in tried), self.health.live)
        return candidates[0] if candidates else None

    def split(self, keys: list[str]) -> dict[int, list[int]]:
        """Shard -> positions (in order) of the keys it holds."""
        groups: dict[int, list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            groups[self.choose(key)].append(i)
        return groups
