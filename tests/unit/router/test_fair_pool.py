"""The tokenizer pool serves tenants in turn: one tenant's queue of prompts does not hold another's behind it."""

import asyncio
import threading

from pdserve.router.fair_pool import FairPool


def test_a_tenant_with_one_job_is_served_before_another_tenants_backlog():
    pool, order, gate = FairPool(1), [], threading.Event()

    def job(label: str) -> str:
        gate.wait(30)
        order.append(label)
        return label

    async def scenario():
        greedy = [asyncio.ensure_future(pool.run("greedy", job, f"greedy-{i}")) for i in range(5)]
        await asyncio.sleep(0)
        modest = asyncio.ensure_future(pool.run("modest", job, "modest-0"))
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*greedy, modest)

    asyncio.run(scenario())
    print(order)
    assert order.index("modest-0") == 1  # right after the job that was already running


def test_a_caller_that_leaves_while_waiting_gives_up_its_turn():
    pool, gate = FairPool(1), threading.Event()

    async def scenario():
        first = asyncio.ensure_future(pool.run("a", gate.wait, 30))
        await asyncio.sleep(0)
        leaving = asyncio.ensure_future(pool.run("b", lambda: "never"))
        await asyncio.sleep(0)
        leaving.cancel()
        last = asyncio.ensure_future(pool.run("c", lambda: "served"))
        await asyncio.sleep(0)
        gate.set()
        await first
        return await last

    assert asyncio.run(scenario()) == "served" and pool.free == 1
