"""The router's view of its workers: stubs, load (polled and counted locally), health, and recent failures.

A worker whose health says NOT_SERVING is draining (it got SIGTERM and finishes what it runs): it gets nothing new.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from common.server import channel
from protos import common_pb2, decode_pb2_grpc, prefill_pb2_grpc

log = logging.getLogger("pdserve.router")

DOWN_FOR_S = 2.0  # a worker that answered UNAVAILABLE is skipped this long


@dataclass
class Worker:
    target: str
    stub: object
    channel: grpc.aio.Channel
    load: common_pb2.WorkerLoad = field(default_factory=common_pb2.WorkerLoad)
    inflight: int = 0  # requests this router has sent and not finished
    inflight_tokens: int = 0  # prompt tokens of those requests (prefill)
    down_until: float = 0.0
    draining: bool = False  # its health said NOT_SERVING at the last poll
    # approximate record of the block keys this worker computed or reused recently (cache_aware routing)
    recent_keys: OrderedDict = field(default_factory=OrderedDict)

    @property
    def available(self) -> bool:
        return time.monotonic() >= self.down_until and not self.draining

    def mark_down(self) -> None:
        self.down_until = time.monotonic() + DOWN_FOR_S

    def remember(self, keys: list[str], limit: int = 100_000) -> None:
        for key in keys:
            self.recent_keys[key] = None
            self.recent_keys.move_to_end(key)
        while len(self.recent_keys) > limit:
            self.recent_keys.popitem(last=False)

    def matched_blocks(self, keys: list[str]) -> int:
        for i, key in enumerate(keys):
            if key not in self.recent_keys:
                return i
        return len(keys)


class WorkerPool:
    def __init__(self, targets: list[str], stub_class) -> None:
        self.workers = []
        for t in targets:
            ch = channel(t)
            self.workers.append(Worker(t, stub_class(ch), ch))

    def available(self, exclude: set[str] = frozenset()) -> list[Worker]:
        live = [w for w in self.workers if w.target not in exclude and w.available]
        return live or [w for w in self.workers if w.target not in exclude]

    async def poll_loads(self, period_s: float = 0.25) -> None:
        while True:
            await asyncio.gather(*(self._poll(w) for w in self.workers))
            await asyncio.sleep(period_s)

    @staticmethod
    async def _poll(worker: Worker) -> None:
        try:
            health = await health_pb2_grpc.HealthStub(worker.channel).Check(health_pb2.HealthCheckRequest(),
                                                                            timeout=1.0)
            worker.draining = health.status != health_pb2.HealthCheckResponse.SERVING
            worker.load = await worker.stub.GetLoad(common_pb2.LoadRequest(), timeout=1.0)
        except grpc.aio.AioRpcError:
            worker.mark_down()

    async def close(self) -> None:
        await asyncio.gather(*(w.channel.close() for w in self.workers))


def prefill_pool(targets: list[str]) -> WorkerPool:
    return WorkerPool(targets, prefill_pb2_grpc.PrefillStub)


def decode_pool(targets: list[str]) -> WorkerPool:
    return WorkerPool(targets, decode_pb2_grpc.DecodeStub)
