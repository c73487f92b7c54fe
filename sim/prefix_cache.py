"""The cluster's prefix cache (the kvstore's role): full prompt blocks by chained content key, least recently used
out first. A prefill reuses the leading blocks it finds, never the block holding the last prompt token (its logits
are needed), as prefill_server does."""

from __future__ import annotations

from collections import OrderedDict

from pdserve.engine.kv.blocks import leading_hits


def block_keys(token_ids: list[int], block_tokens: int) -> list[int]:
    """One key per full block, chained: equal keys mean equal prefixes up to and including that block."""
    keys, h = [], 0
    for i in range(0, len(token_ids) - block_tokens + 1, block_tokens):
        h = hash((h, tuple(token_ids[i:i + block_tokens])))
        keys.append(h)
    return keys


class PrefixCache:
    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = max(0, capacity_blocks)
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def reusable_tokens(self, keys: list[int], prompt_len: int, block_tokens: int) -> int:
        """Prompt tokens whose KV the cache holds (leading blocks, at most all but the last token's block)."""
        if not self.capacity:
            return 0
        limit = (prompt_len - 1) // block_tokens
        hits = leading_hits(keys[:limit], self._blocks)
        for key in keys[:hits]:
            self._blocks.move_to_end(key)
        return hits * block_tokens

    def store(self, keys: list[int]) -> None:
        if not self.capacity:
            return
        blocks = self._blocks
        for key in keys:
            blocks[key] = None
            blocks.move_to_end(key)
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
