"""The one readiness wait: poll a probe until it holds, failing at once when the process being waited for exits.

Probes: :func:`grpc_serving` (grpc.health.v1 answers SERVING) for the services, :func:`http_ok` (200) for HTTP
endpoints (the OpenAI edge's /health, Prometheus' /-/ready). The launcher, the benchmarks that start processes and the
tests all wait through :func:`wait_for`; the deadline only bounds a failure, it never paces a success.
"""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

POLL_S = 0.05


def wait_for(condition: Callable[[], object], timeout_s: float = 15.0, what: str = "condition",
             process: subprocess.Popen | None = None, log_tail: Callable[[], str] = lambda: ""):
    """Poll ``condition()`` until it returns something truthy, and return that. Raises RuntimeError at once if
    ``process`` exits meanwhile, and TimeoutError after ``timeout_s`` (both with ``log_tail()`` for context)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with code {process.returncode}\n{log_tail()}".rstrip())
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not hold within {timeout_s:g}s (last value {value!r})\n{log_tail()}"
                               .rstrip())
        time.sleep(POLL_S)


def grpc_serving(target: str, credentials: grpc.ChannelCredentials | None = None,
                 timeout_s: float = 1.0, server_name: str | None = None, any_status: bool = False) -> bool:
    """Whether the server at ``target`` answers grpc.health.v1 with SERVING (``any_status``: answers at all; False
    for any error); over TLS the server's certificate must be valid for ``server_name`` when given (else for the
    target's host)."""
    options = [("grpc.ssl_target_name_override", server_name)] if credentials and server_name else None
    with grpc.secure_channel(target, credentials, options) if credentials else grpc.insecure_channel(target) as ch:
        try:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return any_status or reply.status == health_pb2.HealthCheckResponse.SERVING


def http_ok(url: str, timeout_s: float = 1.0, cafile: str | None = None, any_status: bool = False) -> bool:
    """Whether ``url`` answers 200 (``any_status``: answers at all; an https URL verified with ``cafile`` when
    given)."""
    context = ssl.create_default_context(cafile=cafile) if cafile else None
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=context) as reply:
            return reply.status == 200
    except urllib.error.HTTPError:
        return any_status
    except OSError:
        return False
