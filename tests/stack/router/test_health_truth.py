"""Health that tells the truth: with the services started one by one (as an orchestrator may), the router answers
NOT_SERVING and the edge's /health 503 until a prefill and a decode worker answer; SERVING / 200 once they do; and
NOT_SERVING again when the last decode worker is gone."""

import signal
import time
import urllib.error
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pdserve.common import healthcheck
from pdserve.launcher.stack import Stack, StackSpec
from tests.helpers import wait_until


def router_health(stack: Stack) -> str | None:
    """The router's health status name, or None while it does not answer."""
    with grpc.secure_channel(stack.router.target, stack.credentials()) if stack.credentials() else \
            grpc.insecure_channel(stack.router.target) as ch:
        try:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=2.0)
        except grpc.RpcError:
            return None
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def edge_health(stack: Stack) -> int | None:
    try:
        with urllib.request.urlopen(f"{stack.http_url}/health", timeout=2.0) as reply:
            return reply.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


def test_health_waits_for_a_worker_of_each_role(tiny_model_path):
    stack = Stack(StackSpec(model=str(tiny_model_path), http_port=0))
    try:
        for p in stack.kvstores + [stack.router, stack.edge]:  # no workers yet
            stack.launch(p)
        wait_until(lambda: router_health(stack) is not None, 60, "the router answering")
        wait_until(lambda: edge_health(stack) is not None, 60, "the edge answering")
        assert router_health(stack) == "NOT_SERVING" and edge_health(stack) == 503
        # the probes: not ready, but alive (a liveness probe must not restart a router that waits for its workers)
        assert healthcheck.main([stack.router.target]) == 1 and healthcheck.main(["--live", stack.router.target]) == 0
        for p in stack.decodes:  # a decode worker alone cannot serve a disaggregated request
            stack.launch(p)
        stack.wait_ready(stack.decodes, time.monotonic() + 120)
        assert router_health(stack) == "NOT_SERVING" and edge_health(stack) == 503
        for p in stack.prefills:
            stack.launch(p)
        wait_until(lambda: router_health(stack) == "SERVING", 120, "the router SERVING")
        wait_until(lambda: edge_health(stack) == 200, 30, "the edge's /health 200")
        for p in stack.decodes:
            stack.kill(p, signal.SIGKILL)
        wait_until(lambda: router_health(stack) == "NOT_SERVING", 30, "the router NOT_SERVING without decode")
        assert edge_health(stack) == 503
    finally:
        stack.stop()
