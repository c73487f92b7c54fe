"""The router's view of its workers: stubs, load (polled and counted locally), health, and recent failures.

A worker whose health says NOT_SERVING is draining (it got SIGTERM and finishes what it runs): it gets nothing new. One
that does not answer is down until a health poll finds it serving again (restarted, by ``pdserve up`` or its
orchestrator).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pdserve.common.server import channel
from pdserve.engine.kv.blocks import leading_hits
from pdserve.v1 import common_pb2, decode_pb2_grpc, prefill_pb2_grpc

log = logging.getLogger("pdserve.router")

DOWN_FOR_S = 2.0  # a worker that answered UNAVAILABLE is skipped this long
DRAIN_S = 60.0  # a worker whose address left DNS keeps its channel this long for calls in flight


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
        return leading_hits(keys, self.recent_keys)


Resolver = Callable[[str, int], Awaitable[list[str]]]  # (host, port) -> IP addresses


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address the name resolves to now (DNS A/AAAA records, /etc/hosts), sorted."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({info[4][0] for info in infos})


def split_target(target: str) -> tuple[str, int]:
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"target: {target!r} is not host:port")
    return host.strip("[]"), int(port)


def join_target(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def is_discovered(host: str) -> bool:
    """A name (not an IP literal, not localhost) stands for however many workers it resolves to."""
    if host == "localhost":
        return False
    try:
        ipaddress.ip_address(host)
        return False
    except ValueError:
        return True


class WorkerPool:
    """The workers behind the configured targets. An IP target is one worker; a DNS name is every address it
    resolves to (a Kubernetes headless Service, a compose service with replicas), re-resolved by ``discover_loop`` so
    replicas that come and go are picked up without a restart. A failed lookup keeps the name's previous workers."""

    def __init__(self, targets: list[str], stub_class, resolver: Resolver = system_resolver,
                 role: str = "prefill") -> None:
        """``role``: what the workers are (their certificates must say so)."""
        self.stub_class = stub_class
        self.role = role
        self.resolver = resolver
        self.workers: list[Worker] = []
        self.names: list[tuple[str, int]] = []
        self.fixed: list[str] = []
        self._resolved: dict[tuple[str, int], list[str]] = {}
        for t in targets:
            host, port = split_target(t)
            if is_discovered(host):
                self.names.append((host, port))
            else:
                self.fixed.append(t)
                self.workers.append(self._new_worker(t))

    def _new_worker(self, target: str) -> Worker:
        ch = channel(target, self.role)
        return Worker(target, self.stub_class(ch), ch)

    async def refresh(self) -> None:
        """Resolve every name again; add workers for new addresses, drop (and later close) those gone."""
        if not self.names:
            return
        wanted = list(self.fixed)
        for host, port in self.names:
            try:
                self._resolved[(host, port)] = [join_target(a, port) for a in await self.resolver(host, port)]
            except OSError as exc:
                log.warning("resolving %s failed (%s); keeping its %d workers", host, exc,
                            len(self._resolved.get((host, port), [])))
            wanted += self._resolved.get((host, port), [])
        current = {w.target: w for w in self.workers}
        wanted = list(dict.fromkeys(wanted))
        for target in set(current) - set(wanted):
            log.info("worker %s left", target)
            asyncio.ensure_future(current[target].channel.close(grace=DRAIN_S))  # in-flight calls may finish
        for target in set(wanted) - set(current):
            log.info("worker %s joined", target)
        self.workers = [current.get(t) or self._new_worker(t) for t in wanted]

    async def discover_loop(self, period_s: float) -> None:
        while True:
            await asyncio.sleep(period_s)
            await self.refresh()

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
            return
        if worker.down_until and not worker.draining:  # back (e.g. restarted by pdserve up): route to it again now
            log.info("worker %s is serving again", worker.target)
            worker.down_until = 0.0

    async def close(self) -> None:
        await asyncio.gather(*(w.channel.close() for w in self.workers))


def prefill_pool(targets: list[str], resolver: Resolver = system_resolver) -> WorkerPool:
    return WorkerPool(targets, prefill_pb2_grpc.PrefillStub, resolver, "prefill")


def decode_pool(targets: list[str], resolver: Resolver = system_resolver) -> WorkerPool:
    return WorkerPool(targets, decode_pb2_grpc.DecodeStub, resolver, "decode")
