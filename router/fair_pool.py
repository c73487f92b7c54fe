"""The tokenizer pool's turns, taken round-robin by tenant.

A thread pool serves jobs first come, first served: a tenant that queues a hundred long prompts makes every other
tenant's short one wait behind all of them. Here each tenant has its own queue, and a freed worker goes to the next
tenant in turn, so a tenant's wait depends on how many tenants are waiting, not on how much one of them queued.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class FairPool:
    def __init__(self, workers: int, name: str = "tokenize") -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self.free = workers
        self.waiting: OrderedDict[str, deque[asyncio.Future]] = OrderedDict()

    async def run(self, tenant: str, fn: Callable[..., T], *args) -> T:
        """``fn(*args)`` in a worker thread once it is ``tenant``'s turn."""
        if self.free and not self.waiting:
            self.free -= 1
        else:
            turn = asyncio.get_running_loop().create_future()
            self.waiting.setdefault(tenant, deque()).append(turn)
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():  # the turn came as the caller left: pass it on
                    self._release(tenant)
                raise
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)
        finally:
            self._release(tenant)

    def _release(self, finished: str) -> None:
        """Give the freed worker to the next tenant in turn (each tenant's own jobs in order); the tenant whose job
        just ended goes behind the others."""
        if finished in self.waiting and len(self.waiting) > 1:
            self.waiting.move_to_end(finished)
        while self.waiting:
            tenant, queue = next(iter(self.waiting.items()))
            turn = queue.popleft()
            if queue:
                self.waiting.move_to_end(tenant)
            else:
                del self.waiting[tenant]
            if not turn.done():
                turn.set_result(None)
                return
        self.free += 1
