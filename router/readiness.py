"""The router's own readiness: SERVING only while a request would find a worker of each role it needs.

A router whose prefill or decode workers are all away (not started yet, restarting, or gone) answers its health check
NOT_SERVING, so an orchestrator's readiness probe, ``pdserve up``'s start-up wait and the HTTP edge's ``/health`` do
not send traffic that can only fail. Liveness is another question (``common/healthcheck.py --live``).
"""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

PROBE_TIMEOUT_S = 1.0


class Readiness:
    """Probes the workers' health every period; ``ready()`` says whether each needed pool has one SERVING."""

    def __init__(self, pools: list) -> None:
        self.pools = pools  # the router's WorkerPools whose workers it needs (decode; prefill unless colocated)
        self._serving = [False] * len(pools)

    def ready(self) -> bool:
        return all(self._serving)

    async def loop(self, period_s: float) -> None:
        while True:
            self._serving = list(await asyncio.gather(*(self._any_serving(pool) for pool in self.pools)))
            await asyncio.sleep(period_s)

    @staticmethod
    async def _any_serving(pool) -> bool:
        async def serving(worker) -> bool:
            try:
                reply = await health_pb2_grpc.HealthStub(worker.channel).Check(health_pb2.HealthCheckRequest(),
                                                                               timeout=PROBE_TIMEOUT_S)
            except grpc.aio.AioRpcError:
                return False
            return reply.status == health_pb2.HealthCheckResponse.SERVING
        return any(await asyncio.gather(*(serving(w) for w in list(pool.workers))))
