"""A prefill worker's own small cache of recently used full KV blocks (LRU under a byte budget).

Blocks are content-addressed, so a hit is always valid. It saves the kvstore round trip for hot prefixes (shared
system prompts) on the worker that the router's cache_aware policy keeps sending them to.
"""

from __future__ import annotations

from collections import OrderedDict

from pdserve.engine.kv.blocks import leading_hits


class LocalPrefixCache:
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.bytes_used = 0
        self._blocks: OrderedDict[str, bytes] = OrderedDict()

    def leading_hits(self, keys: list[str]) -> int:
        return leading_hits(keys, self._blocks)

    def get(self, key: str) -> bytes | memoryview:
        self._blocks.move_to_end(key)
        return self._blocks[key]

    def add(self, key: str, data: bytes | memoryview) -> None:
        if key in self._blocks or len(data) > self.capacity_bytes:
            return
        while self.bytes_used + len(data) > self.capacity_bytes:
            _, old = self._blocks.popitem(last=False)
            self.bytes_used -= len(old)
        self._blocks[key] = data
        self.bytes_used += len(data)
