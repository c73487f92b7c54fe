"""Clients per role on a stack's kvstores, and the blocks the kvstore tests store."""

import asyncio

from pdserve.kvstore.client import BlockData


def run(coro):
    return asyncio.run(coro)


class Roles:
    """One client per role on a stack's kvstores: leases are made (and given up) by the router, blocks put by prefill,
    read under a lease, Stats and Corrupt by the test identity."""

    def __init__(self, stack, targets: list[str]) -> None:
        self.router, self.prefill, self.test = (stack.kv_client(role, targets=targets)
                                                for role in ("router", "prefill", "test"))

    async def lease(self, name: str) -> str:
        await self.router.create_lease(name, 60)
        return name

    async def close(self) -> None:
        await asyncio.gather(self.router.close(), self.prefill.close(), self.test.close())


def block(i: int, fill: bytes = b"") -> BlockData:
    return BlockData(f"blk{i:03d}", 16, (fill or bytes([i % 256])) * 300)


async def used(kv: Roles) -> int:
    return (await kv.test.stats())[0].bytes_used


async def put_released(kv: Roles, blocks: list[BlockData], name: str) -> int:
    """Store blocks under a lease of their own and give it up at once (they may be evicted from then on)."""
    stored = await kv.prefill.put(blocks, await kv.lease(name), 60)
    await kv.router.release(name)
    return stored


async def wait_for_async(read, holds, timeout_s: float = 30.0):
    """Poll the coroutine ``read()`` until ``holds(value)``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not holds(value := await read()):
        assert asyncio.get_running_loop().time() < deadline, f"last value {value}"
        await asyncio.sleep(0.05)
    return value
