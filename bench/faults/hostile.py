"""``pdserve bench hostile``: requests that try to take more than their share, against a running stack, while other
clients stream.

- ``chat_12mb``: a chat of twelve messages of a million characters each (within the per-message limit, 12 MB in all);
- ``n16_stalled``: ``n`` = 16 samples of 512 tokens with 20 logprobs each, whose reader takes the first chunk and then
  reads nothing for ``--stall-s``;
- ``prefetch_ttl``: 16 ``Decode.Prefetch`` calls straight to a decode worker, with a lease TTL of 1e9 s for blocks
  that never come, then a 17th after ``--stall-s``.

For each: how it was answered, the longest gap between two chunks that the other clients saw meanwhile (a router
stalled on one request stalls them all), and how much the router's resident memory grew (its peak while the case ran,
sampled every 50 ms, over its value before).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import grpc

from pdserve.bench.faults.chaos import rss_mb
from pdserve.client.client import AsyncPdserveClient
from pdserve.v1 import common_pb2, decode_pb2, decode_pb2_grpc

CASES = ("chat_12mb", "n16_stalled", "prefetch_ttl")


@dataclass
class HostileRow:
    case: str
    answer: str
    worst_gap_ms: float
    rss_growth_mb: float


class Watch:
    """Other clients streaming greedy answers, and the router's memory, while a case runs."""

    def __init__(self, target: str, router_pid: int) -> None:
        self.target, self.router_pid = target, router_pid
        self.worst_gap = 0.0
        self.peak = self.base = rss_mb(router_pid)
        self.stop = asyncio.Event()

    async def _stream(self, client: AsyncPdserveClient, i: int) -> None:
        while not self.stop.is_set():
            last = time.perf_counter()
            async for _ in client.generate(token_ids=list(range(100 + i, 140 + i)), max_tokens=64, temperature=0,
                                           ignore_eos=True, timeout=300):
                now = time.perf_counter()
                self.worst_gap = max(self.worst_gap, now - last)
                last = now

    async def _memory(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_mb(self.router_pid))
            await asyncio.sleep(0.05)

    async def run(self, clients: int) -> None:
        async with AsyncPdserveClient(self.target) as client:
            await asyncio.gather(self._memory(), *(self._stream(client, i) for i in range(clients)))


async def _chat_12mb(target: str, _decode: str, _stall_s: float) -> str:
    async with AsyncPdserveClient(target) as client:
        try:
            await client.complete(messages=[{"role": "user", "content": "x" * 1_000_000}] * 12, max_tokens=1,
                                  timeout=600)
            return "answered"
        except grpc.aio.AioRpcError as err:
            return f"{err.code().name}: {err.details()[:60]}"


async def _n16_stalled(target: str, _decode: str, stall_s: float) -> str:
    async with AsyncPdserveClient(target) as client:
        call = client.generate(token_ids=list(range(50, 90)), n=16, max_tokens=512, temperature=1.0, seed=1,
                               ignore_eos=True, logprobs=20, timeout=600)
        await call.read()
        await asyncio.sleep(stall_s)
        call.cancel()
    return f"read one chunk, stalled {stall_s:g} s, cancelled"


async def _prefetch_ttl(target: str, decode: Callable[[], grpc.aio.Channel], stall_s: float) -> str:
    async with AsyncPdserveClient(target) as client:
        fingerprint = (await client.list_models()).models[0].fingerprint
    handle = common_pb2.KVHandle(block_keys=["never-stored"] * 3, token_count=40, block_tokens=16, lease_id="hostile",
                                 lease_ttl_s=1e9, wait_s=600, model_fingerprint=fingerprint)
    async with decode() as ch:  # as the router: the one role that may call Prefetch
        stub = decode_pb2_grpc.DecodeStub(ch)
        calls, refused = [], 0
        for i in range(16):
            call = stub.Prefetch(decode_pb2.PrefetchRequest(request_id=f"hostile-{i}", kv=handle))
            calls.append(call)
        await asyncio.sleep(1.0)
        codes = []
        for call in calls:
            if call.done():
                codes.append((await call.code()).name)
                refused += 1
        await asyncio.sleep(stall_s)
        late = stub.Prefetch(decode_pb2.PrefetchRequest(request_id="hostile-17", kv=handle))
        await asyncio.sleep(1.0)
        late_code = (await late.code()).name if late.done() else "held"
        for call in [*calls, late]:
            call.cancel()
    return f"{16 - refused} of 16 held ({', '.join(sorted(set(codes))) or 'none refused'}); 17th after " \
           f"{stall_s:g} s: {late_code}"


async def run_case(case: str, target: str, decode: Callable[[], grpc.aio.Channel], router_pid: int, stall_s: float,
                   clients: int) -> HostileRow:
    watch = Watch(target, router_pid)
    others = asyncio.create_task(watch.run(clients))
    await asyncio.sleep(3.0)  # the other streams are running
    watch.worst_gap = 0.0
    answer = await {"chat_12mb": _chat_12mb, "n16_stalled": _n16_stalled,
                    "prefetch_ttl": _prefetch_ttl}[case](target, decode, stall_s)
    await asyncio.sleep(1.0)
    watch.stop.set()
    await others
    return HostileRow(case, answer, watch.worst_gap * 1e3, watch.peak - watch.base)


def format_rows(rows: list[HostileRow]) -> str:
    lines = [f"{'case':<13} {'others worst gap ms':>19} {'router RSS growth MiB':>21}  answer"]
    lines += [f"{r.case:<13} {r.worst_gap_ms:>19.0f} {r.rss_growth_mb:>21.0f}  {r.answer}" for r in rows]
    return "\n".join(lines)


def main(a) -> int:
    from pdserve.launcher.state import AttachedStack, default_state_path

    if a.router and a.decode and a.router_pid:
        target, pid = a.router, a.router_pid
        decode = partial(grpc.aio.insecure_channel, a.decode)  # (a stack run with --insecure-internal)
    else:
        stack = AttachedStack(a.state_file or default_state_path(a.port))
        target, pid = stack.router_target, stack.router.pid
        decode = partial(stack.aio_channel, stack.decodes[0], "router")  # the stack's router identity
    rows = []
    for case in [c for c in a.cases.split(",") if c]:
        if case not in CASES:
            print(f"pdserve bench hostile: --cases: {case!r} is not one of {', '.join(CASES)}")
            return 2
        rows.append(asyncio.run(run_case(case, target, decode, pid, a.stall_s, a.clients)))
        print(format_rows(rows[-1:]).splitlines()[-1], flush=True)
    print(format_rows(rows))
    return 0


def add_args(p) -> None:
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--port", type=int, default=50050, help="the pdserve up to attach to (its router port)")
    p.add_argument("--state-file", default=None, help="or its state file")
    p.add_argument("--router", default=None, help="instead of attaching: the router's address (with --decode and "
                   "--router-pid)")
    p.add_argument("--decode", default=None, help="a decode worker's address (plaintext: a stack run with --insecure-internal)")
    p.add_argument("--router-pid", type=int, default=0)
    p.add_argument("--stall-s", type=float, default=20.0)
    p.add_argument("--clients", type=int, default=2, help="other clients streaming meanwhile")
