"""The fault matrix's load: a workload whose right answers are known (greedy and seeded sampling, EOS ignored), the
clients that send it (steady load, or a storm of requests cancelled at random moments), and the per-fault row every
answer is counted into."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field

import grpc

from pdserve.client.client import AsyncPdserveClient

ANSWERS = ("correct", "cancelled", "failed_clean", "lost", "duplicated", "wrong")  # what became of each request
LEAKS = ("leaked_leases", "leaked_blocks", "leaked_inflight")  # what the stack still holds once idle
COLUMNS = ("sent", *ANSWERS, *LEAKS, "resumed", "kv_recomputed", "restarted")


@dataclass
class Row:
    """One fault's outcome. ``answers``: requests by what became of them (``correct``: the whole answer, token for
    token; ``cancelled``: by the client on purpose; ``failed_clean``: a gRPC status after a correct prefix; ``lost``: no
    answer within the deadline; ``duplicated``: more tokens than the answer has; ``wrong``: anything else)."""

    fault: str
    sent: int = 0
    answers: Counter = field(default_factory=Counter)
    leaked: tuple[int, int, int] = (0, 0, 0)  # kvstore leases, decode blocks + sequences, router requests in flight
    resumed: int = 0  # streams moved to another decode worker mid-stream (the router's count)
    kv_recomputed: int = 0  # prompts a decode worker recomputed because their KV could not be fetched
    restarted: int = 0  # processes the supervisor started again (the rows under pdserve up)
    codes: Counter = field(default_factory=Counter)  # status codes of the clean failures
    errors: Counter = field(default_factory=Counter)  # "CODE: details" of every failure, and where each wrong answer
    # left the right one, for the record

    def column(self, name: str) -> int:
        if name in ANSWERS:
            return self.answers[name]
        if name in LEAKS:
            return self.leaked[LEAKS.index(name)]
        return getattr(self, name)

    @property
    def ok(self) -> bool:
        """Nothing lost, duplicated, wrong or leaked."""
        return not (self.answers["lost"] or self.answers["duplicated"] or self.answers["wrong"] or any(self.leaked))


@dataclass
class Workload:
    prompts: list[list[int]]
    params: list[dict]  # generate() keyword arguments per prompt
    expected: list[list[int]] = field(default_factory=list)  # from the fault-free run


def make_workload(vocab_size: int, n: int, max_tokens: int, seed: int = 0) -> Workload:
    """``n`` random prompts of 20..60 tokens, alternately greedy and seeded; EOS ignored so every answer is long."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(3, vocab_size) for _ in range(rng.randrange(20, 61))] for _ in range(n)]
    params = [dict(max_tokens=max_tokens, ignore_eos=True, temperature=0.0) if i % 2 == 0 else
              dict(max_tokens=max_tokens, ignore_eos=True, temperature=0.8, top_p=0.95, seed=1000 + i)
              for i in range(n)]
    return Workload(prompts, params)


async def fault_free(target: str, workload: Workload, concurrency: int = 8) -> None:
    """Fill ``workload.expected`` from a run with no fault."""
    sem = asyncio.Semaphore(concurrency)
    async with AsyncPdserveClient(target) as client:
        async def one(i: int) -> list[int]:
            async with sem:
                reply = await client.complete(token_ids=workload.prompts[i], timeout=120, **workload.params[i])
                return list(reply.token_ids)
        workload.expected = list(await asyncio.gather(*(one(i) for i in range(len(workload.prompts)))))


async def send_one(client: AsyncPdserveClient, workload: Workload, i: int, row: Row, timeout_s: float,
                   cancel_after_s: float | None) -> bool:
    """One request, classified into ``row``. Returns False when it failed (the caller backs off)."""
    row.sent += 1
    expected = workload.expected[i]
    ids: list[int] = []
    call = client.generate(token_ids=workload.prompts[i], timeout=timeout_s, **workload.params[i])
    cancel = asyncio.get_running_loop().call_later(cancel_after_s, call.cancel) if cancel_after_s is not None else None
    try:
        async for chunk in call:
            ids.extend(chunk.token_ids)
    except asyncio.CancelledError:
        if cancel is None or not call.cancelled():
            raise
        row.answers["cancelled"] += 1
        return True
    except grpc.aio.AioRpcError as err:
        row.errors[f"{err.code().name}: {err.details()}"[:160]] += 1
        if err.code() == grpc.StatusCode.CANCELLED and cancel is not None:
            row.answers["cancelled"] += 1
        elif err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            row.answers["lost"] += 1
        elif ids == expected[:len(ids)]:
            row.answers["failed_clean"] += 1
            row.codes[err.code().name] += 1
        else:
            row.answers["wrong"] += 1
            row.errors[describe_wrong(i, ids, expected)] += 1
        return False
    finally:
        if cancel is not None:
            cancel.cancel()
    if ids == expected:
        row.answers["correct"] += 1
    elif len(ids) > len(expected):
        row.answers["duplicated"] += 1
    else:
        row.answers["wrong"] += 1
        row.errors[describe_wrong(i, ids, expected)] += 1
    return True


def describe_wrong(i: int, ids: list[int], expected: list[int]) -> str:
    """Where a wrong answer left the right one, for the record: a short answer and a diverging one have different
    causes."""
    at = next((k for k, (got, want) in enumerate(zip(ids, expected)) if got != want), min(len(ids), len(expected)))
    return f"wrong: prompt {i}, {len(ids)} of {len(expected)} tokens, first difference at token {at}"


async def steady_load(target: str, workload: Workload, row: Row, stop: asyncio.Event, concurrency: int,
                      cancel_fraction: float = 0.0, timeout_s: float = 60.0, seed: int = 0) -> None:
    """``concurrency`` clients sending the workload round robin until ``stop``; a fraction cancelled at a random
    moment (from right away to well into decode)."""
    rng = random.Random(seed)
    counter = iter(range(1 << 62))
    async with AsyncPdserveClient(target) as client:
        async def user() -> None:
            while not stop.is_set():
                i = next(counter) % len(workload.prompts)
                cancel_after = rng.uniform(0.0, 0.8) if rng.random() < cancel_fraction else None
                if not await send_one(client, workload, i, row, timeout_s, cancel_after):
                    await asyncio.sleep(0.2)
        await asyncio.gather(*(user() for _ in range(concurrency)))


async def storm(target: str, workload: Workload, n: int, concurrency: int, cancel_fraction: float,
                max_cancel_after_s: float = 1.0, seed: int = 0) -> Row:
    """Exactly ``n`` requests from ``concurrency`` clients, ``cancel_fraction`` of them cancelled at a random moment
    in [0, max_cancel_after_s) (queued, in prefill, between prefill and decode, or mid-decode)."""
    rng = random.Random(seed)
    row = Row("cancel_storm")
    todo = iter(range(n))
    async with AsyncPdserveClient(target) as client:
        async def user() -> None:
            for k in todo:
                cancel_after = rng.uniform(0.0, max_cancel_after_s) if rng.random() < cancel_fraction else None
                await send_one(client, workload, k % len(workload.prompts), row, 120.0, cancel_after)
        await asyncio.gather(*(user() for _ in range(concurrency)))
    return row
