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

import grpc
from prometheus_client import Counter, Histogram

# Bucket edges in the spirit of vLLM's: TTFT and per-token latencies span ms to minutes.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.01, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0, 960.0, 1920.0, 7680.0)
STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24)
TOKEN_COUNT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")

RPC_STARTED = Counter("grpc_server_started_total", "RPCs started on the server",
                      ["grpc_type", "grpc_service", "grpc_method"])
RPC_HANDLED = Counter("grpc_server_handled_total", "RPCs completed on the server, by status code",
                      ["grpc_type", "grpc_service", "grpc_method", "grpc_code"])
RPC_SECONDS = Histogram("grpc_server_handling_seconds", "Time from RPC start to its end",
                        ["grpc_type", "grpc_service", "grpc_method"], buckets=E2E_BUCKETS)


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
