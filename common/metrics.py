"""Prometheus metrics shared by the services: per-RPC metrics from one aio interceptor, plus vLLM-like buckets.

Names of the per-RPC metrics follow py-grpc-prometheus so existing dashboards work:
``grpc_server_started_total``, ``grpc_server_handled_total{grpc_code}`` and ``grpc_server_handling_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import time
from typing import Protocol

import grpc
from prometheus_client import Counter, Histogram, Info

from pdserve.common.metrics_http import start_metrics_http

# Bucket edges. Two clocks, two ranges: the modeled (GPU) clock must tell a 10.9 ms decode step from an 18.4 ms one
# and place a ~100 ms request within 10%; the wall (CPU) clock of a numpy model runs 10-100x slower. Per-RPC latency
# starts at 100 us (kvstore RPCs are sub-millisecond on loopback).
MODELED_STEP_BUCKETS = (0.001, 0.002, 0.004, 0.006, 0.008, 0.009, 0.01, 0.011, 0.012, 0.013, 0.014, 0.016, 0.018,
                        0.02, 0.022, 0.025, 0.03, 0.035, 0.04, 0.045, 0.05, 0.06, 0.07, 0.08, 0.1, 0.125, 0.15, 0.2,
                        0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
MODELED_REQUEST_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1,
                           0.11, 0.125, 0.15, 0.175, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.25, 1.5,
                           2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0)
WALL_STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5,
                     2.0, 3.0, 5.0, 10.0, 20.0)
WALL_REQUEST_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0,
                        20.0, 30.0, 45.0, 60.0, 120.0, 300.0, 600.0)
RPC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
               10.0, 30.0, 60.0, 120.0, 300.0)
TOKEN_COUNT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

PROCESS_INFO = Info("pdserve_deployment", "What this process serves and models: its service, the real model's name and "
                    "fingerprint, and the modeled deployment (perf model, hardware, GPUs, TP/EP, software profile)")
INFO_LABELS = ("service", "model_name", "model_fingerprint", "perf_model", "perf_hardware", "perf_gpus", "perf_tp",
               "perf_ep", "perf_software", "perf_dp_attention", "perf_kv_precision", "pace", "time_scale")

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")

RPC_STARTED = Counter("grpc_server_started_total", "RPCs started on the server",
                      ["grpc_type", "grpc_service", "grpc_method"])
RPC_HANDLED = Counter("grpc_server_handled_total", "RPCs completed on the server, by status code",
                      ["grpc_type", "grpc_service", "grpc_method", "grpc_code"])
RPC_SECONDS = Histogram("grpc_server_handling_seconds", "Time from RPC start to its end",
                        ["grpc_type", "grpc_service", "grpc_method"], buckets=RPC_BUCKETS)


class ClockPair:
    """One quantity in both clocks: ``<name>_seconds`` (wall) and ``<name>_modeled_seconds``, same labels."""

    def __init__(self, name: str, doc: str, labels: tuple[str, ...] = (), wall_buckets=WALL_REQUEST_BUCKETS,
                 modeled_buckets=MODELED_REQUEST_BUCKETS) -> None:
        self.wall = Histogram(f"{name}_seconds", f"{doc} (wall clock)", labels, buckets=wall_buckets)
        self.modeled = Histogram(f"{name}_modeled_seconds", f"{doc} (modeled clock)", labels,
                                 buckets=modeled_buckets)

    def touch(self, *labels: str) -> None:
        """Create the labelled series now (all zero), so the first rate() window already sees them."""
        self.wall.labels(*labels)
        self.modeled.labels(*labels)

    def observe(self, wall_s: float, modeled_s: float, *labels: str) -> None:
        (self.wall.labels(*labels) if labels else self.wall).observe(wall_s)
        (self.modeled.labels(*labels) if labels else self.modeled).observe(modeled_s)


class ProcessConfig(Protocol):
    def info_labels(self) -> dict[str, str]: ...


def set_process_info(service: str, model_name: str = "", fingerprint: str = "",
                     config: ProcessConfig | None = None) -> None:
    """Publish ``pdserve_deployment_info``: one series per process, every label always present (empty if n/a).

    ``config``: a worker's settings (``worker/config.py``), whose modeled deployment and pacing fill the rest of the
    labels; the router and kvstore pass none.
    """
    labels = dict.fromkeys(INFO_LABELS, "")
    labels.update(service=service, model_name=model_name, model_fingerprint=fingerprint)
    if config is not None:
        labels.update(config.info_labels())
    PROCESS_INFO.info(labels)


def start_metrics_server(port: int, host: str, identity=None):
    """Serve /metrics on ``host:port`` (loopback unless told otherwise). Under an identity (a ``common.identity.Identity``)
    the page is HTTPS and asks for a client certificate from the stack's CA, and only the prometheus and admin roles
    may read it (``common/metrics_http.py``); without one, plain HTTP."""
    return start_metrics_http(port, host, identity)


def _rpc_type(handler: grpc.RpcMethodHandler) -> str:
    if handler.request_streaming and handler.response_streaming:
        return "bidi_stream"
    if handler.request_streaming:
        return "client_stream"
    if handler.response_streaming:
        return "server_stream"
    return "unary"


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every RPC and puts the caller's x-request-id into ``request_id_var``."""

    def __init__(self, service_label: str) -> None:
        self.service_label = service_label

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        full = handler_call_details.method.lstrip("/")
        service, _, method = full.partition("/")
        labels = (_rpc_type(handler), service, method)
        request_id = dict(handler_call_details.invocation_metadata or ()).get("x-request-id", "")

        @contextlib.contextmanager
        def observed(context):
            """Counts the RPC, times it, and records its final status code."""
            request_id_var.set(request_id)
            RPC_STARTED.labels(*labels).inc()
            start = time.perf_counter()
            code = None
            try:
                yield
            except (asyncio.CancelledError, GeneratorExit):  # the caller went away
                code = grpc.StatusCode.CANCELLED
                raise
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except BaseException:
                code = grpc.StatusCode.UNKNOWN
                raise
            finally:
                code = code or context.code() or grpc.StatusCode.OK
                RPC_HANDLED.labels(*labels, code.name).inc()
                RPC_SECONDS.labels(*labels).observe(time.perf_counter() - start)

        if handler.response_streaming:
            inner = handler.unary_stream or handler.stream_stream

            async def streaming(request, context):
                with observed(context):
                    result = inner(request, context)
                    if inspect.isasyncgen(result):
                        async for item in result:
                            yield item
                    else:  # a handler that writes with context.write() (e.g. health Watch)
                        await result

            wrapped, kind = streaming, ("unary_stream" if handler.unary_stream else "stream_stream")
        else:
            inner = handler.unary_unary or handler.stream_unary

            async def unary(request, context):
                with observed(context):
                    return await inner(request, context)

            wrapped, kind = unary, ("unary_unary" if handler.unary_unary else "stream_unary")
        factory = getattr(grpc, f"{kind}_rpc_method_handler")
        return factory(wrapped, request_deserializer=handler.request_deserializer,
                       response_serializer=handler.response_serializer)
