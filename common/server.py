"""Server scaffolding every pdserve service shares: grpc.aio server, health, reflection, metrics, graceful stop, and
the channels between services (mutual TLS under the process's identity, ``common/tls.py``)."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from pdserve.common import tls
from pdserve.common.authz import RoleAuthorizer
from pdserve.common.identity import Identity
from pdserve.common.metrics import MetricsInterceptor, request_id_var, start_metrics_server

log = logging.getLogger("pdserve")

# Big enough for KV chunks plus headers; KV itself is always streamed in chunks far below it.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
]


# Between services: reconnect quickly after a peer (re)starts instead of gRPC's default 1 s .. 120 s backoff.
CHANNEL_OPTIONS = GRPC_OPTIONS + [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def channel(target: str, server_role: str, identity: Identity | None = None) -> grpc.aio.Channel:
    """An aio channel to another pdserve service, with the same message limits. Under an identity (``identity``, else
    the process's): mutual TLS, and the peer must hold a certificate valid for ``server_role``'s name (a kvstore's key
    cannot pose as a prefill worker); without one (--insecure-internal), plaintext."""
    identity = identity or tls.identity()
    if identity is None:
        return grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
    return grpc.aio.secure_channel(target, identity.channel_credentials,
                                   options=CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", server_role)])


class RequestIdFilter(logging.Filter):
    """Adds the x-request-id of the RPC being served (or "-") to every log record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get() or "-"
        return True


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s [%(request_id)s] %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])


PARENT_ENV = "PDSERVE_PARENT_PID"  # set by a launcher whose services must not outlive it (pdserve up)
PR_SET_PDEATHSIG = 1


def follow_parent() -> None:
    """Where the launcher asked for it (``PDSERVE_PARENT_PID``), get SIGTERM when the launcher dies, even by SIGKILL,
    so that no service is left holding its ports (Linux; elsewhere a no-op)."""
    parent = os.environ.get(PARENT_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG,
                                                                                        signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # it died before the line above ran
        os.kill(os.getpid(), signal.SIGTERM)


def request_metadata(request_id: str) -> tuple[tuple[str, str], ...]:
    """gRPC metadata that carries the request id to the next service."""
    return (("x-request-id", request_id),)


READINESS_PERIOD_S = 0.25


async def _follow_readiness(health_servicer, services: list[str], ready: Callable[[], bool] | None) -> None:
    """SERVING now (no ``ready``), or SERVING / NOT_SERVING as ``ready`` says, checked every READINESS_PERIOD_S."""
    current = None
    while True:
        ok = True if ready is None else ready()
        if ok != current:
            status = health_pb2.HealthCheckResponse.SERVING if ok else health_pb2.HealthCheckResponse.NOT_SERVING
            for service in services:
                await health_servicer.set(service, status)
            current = ok
        if ready is None:
            return
        await asyncio.sleep(READINESS_PERIOD_S)


async def serve(
    name: str,
    port: int,
    register: Callable[[grpc.aio.Server], Iterable[str]],
    metrics_port: int = 0,
    host: str = "127.0.0.1",
    on_stop: Callable[[], object] | None = None,
    grace_s: float = 5.0,
    interceptors: Iterable[grpc.aio.ServerInterceptor] = (),
    options: Iterable[tuple[str, object]] = (),
    public: bool = False,
    metrics_host: str = "127.0.0.1",
    maximum_concurrent_rpcs: int | None = None,
    ready: Callable[[], bool] | None = None,
) -> None:
    """Start a service and run until SIGTERM/SIGINT.

    ``register`` adds the servicers to the server and returns their full service names (for health and reflection).
    Health reports SERVING for each once the server has started (and, with ``ready``, only while it says the service
    can serve: the router's workers answer), NOT_SERVING while it drains. An internal service
    (``public`` False) run with an identity serves mutual TLS and authorizes every RPC by the caller's role; a public
    one (the router) serves TLS when ``--tls-cert`` is set and leaves callers to its own interceptors (bearer
    tokens), which run after the metrics one. ``options`` replace the defaults of the same name;
    ``maximum_concurrent_rpcs`` bounds calls in flight over all connections (more are refused RESOURCE_EXHAUSTED).
    """
    follow_parent()
    identity = tls.identity()
    guard = [RoleAuthorizer()] if identity is not None and not public else []
    merged = dict(GRPC_OPTIONS) | dict(options)
    server = grpc.aio.server(interceptors=[MetricsInterceptor(name), *guard, *interceptors],
                             options=list(merged.items()), maximum_concurrent_rpcs=maximum_concurrent_rpcs)
    service_names = list(register(server))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        service_names + [health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME], server
    )
    config = tls.current()
    if public and config.serves_tls:
        bound, how = server.add_secure_port(f"{host}:{port}", config.server_credentials()), " with TLS"
    elif not public and identity is not None:
        bound, how = server.add_secure_port(f"{host}:{port}", identity.server_credentials), " with mutual TLS as " + \
            identity.role
    else:
        bound, how = server.add_insecure_port(f"{host}:{port}"), " in plaintext"
    if bound == 0:
        raise OSError(f"{name}: cannot bind {host}:{port}")
    if metrics_port:
        start_metrics_server(metrics_port, metrics_host, identity)
    await server.start()
    gate = asyncio.create_task(_follow_readiness(health_servicer, service_names + [""], ready))
    log.info("%s serving on %s:%d%s (metrics on %s)", name, host, bound, how,
             f"{metrics_host}:{metrics_port}" + (" over HTTPS" if identity else "") if metrics_port else "-")

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("%s stopping (grace %.1fs)", name, grace_s)
    gate.cancel()
    await health_servicer.enter_graceful_shutdown()
    if on_stop is not None:
        result = on_stop()
        if asyncio.iscoroutine(result):
            await result
    await server.stop(grace_s)
