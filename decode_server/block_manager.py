"""The decode worker's KV budget: a fixed number of blocks, the only owner of who holds how many.

Sequences hold ceil(tokens / block_tokens) blocks and grow one block at a time; the scheduler asks before it admits
a request or lets a sequence grow, and preempts when the answer is no.
"""

from __future__ import annotations


class BlockManager:
    def __init__(self, total_blocks: int, block_tokens: int) -> None:
        if total_blocks <= 0:
            raise ValueError(f"kv blocks: must be positive, got {total_blocks}")
        self.total_blocks = total_blocks
        self.block_tokens = block_tokens
        self.held: dict[str, int] = {}  # request id -> blocks

    @property
    def used(self) -> int:
        return sum(self.held.values())

    @property
    def free(self) -> int:
        return self.total_blocks - self.used

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_tokens)

    def can_allocate(self, tokens: int) -> bool:
        return self.blocks_for(tokens) <= self.free

    def allocate(self, request_id: str, tokens: int) -> None:
        need = self.blocks_for(tokens)
        if need > self.free:
            raise MemoryError(f"{need} blocks needed, {self.free} free")
        self.held[request_id] = need

    def may_append(self, request_id: str, tokens: int) -> bool:
        """Grow the sequence's holding to cover ``tokens``; False if the budget cannot."""
        need = self.blocks_for(tokens) - self.held[request_id]
        if need <= 0:
            return True
        if need > self.free:
            return False
        self.held[request_id] += need
        return True

    def release(self, request_id: str) -> None:
        self.held.pop(request_id, None)
