"""A worker's KV budget: how many blocks of KV memory it may hold, and which sequence holds how many.

This is accounting, not a paged cache: each sequence keeps its KV in its own arrays (or a slab slot) and holds
ceil(tokens / block_tokens) blocks of the budget. The scheduler asks before it admits a sequence or lets one grow,
and preempts when the answer is no.
"""

from __future__ import annotations

DEFAULT_KV_BLOCKS = 4096  # a decode worker's budget unless told otherwise (65,536 tokens at 16 per block)


class KVBudgetExceeded(Exception):
    """A request needs more KV than the whole budget: it can never run on this worker."""


class KVBudget:
    def __init__(self, total_blocks: int, block_tokens: int) -> None:
        if total_blocks <= 0:
            raise ValueError(f"kv blocks: must be positive, got {total_blocks}")
        self.total_blocks = total_blocks
        self.block_tokens = block_tokens
        self.held: dict[int, int] = {}  # holder (the scheduler passes id(sequence)) -> blocks
        self.used = 0

    @property
    def free(self) -> int:
        return self.total_blocks - self.used

    @property
    def usage(self) -> float:
        return self.used / self.total_blocks

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_tokens)

    def grow(self, holder: int, tokens: int) -> bool:
        """Hold enough blocks for ``tokens`` tokens of this holder; False (and nothing more held) if the budget cannot."""
        need = self.blocks_for(tokens) - self.held.get(holder, 0)
        if need <= 0:
            return True
        if need > self.free:
            return False
        self.held[holder] = self.held.get(holder, 0) + need
        self.used += need
        return True

    def release(self, holder: int) -> None:
        self.used -= self.held.pop(holder, 0)
