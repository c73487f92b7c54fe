"""No plaintext side doors: metrics pages are HTTPS for clients holding a stack identity (Prometheus's), the HTTP edge
serves HTTPS with --tls, every edge route but /health checks the token on every call (/v1/models and /metrics too),
and error texts name the role that failed, never its address."""

import re
import ssl
import urllib.error
import urllib.request

import grpc
import httpx
import pytest

from pdserve.client.client import PdserveClient
from pdserve.v1 import router_pb2, router_pb2_grpc
from tests.helpers import start_stack
from tests.stack.conftest import TENANTS

ADDRESS = re.compile(r"127\.0\.0\.1|localhost|:\d{4,5}\b")


def fetch(url: str, context: ssl.SSLContext | None = None) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as reply:
            return reply.status
    except urllib.error.HTTPError as err:
        return err.code


def test_every_metrics_page_needs_https_and_a_stack_identity(tenant_stack):
    stack = tenant_stack
    ca_only = ssl.create_default_context(cafile=stack.identities.ca)
    prometheus = stack.identities.identity("prometheus").client_ssl_context()
    for p in stack.processes:
        with pytest.raises(OSError):  # plain HTTP: the TLS server drops it
            fetch(f"http://127.0.0.1:{p.metrics_port}/metrics")
        with pytest.raises(OSError):  # HTTPS without a client certificate: refused in the handshake
            fetch(f"https://127.0.0.1:{p.metrics_port}/metrics", ca_only)
        assert fetch(f"https://127.0.0.1:{p.metrics_port}/metrics", prometheus) == 200, p.name


def test_every_edge_route_checks_the_token_on_every_call(tenant_stack):
    url = tenant_stack.http_url
    good = {"Authorization": f"Bearer {TENANTS['alice']}"}
    assert httpx.get(f"{url}/v1/models", headers=good, timeout=30).status_code == 200  # an authorized call first
    for headers in ({}, {"Authorization": "Bearer wrong-token-000"}, {"Authorization": f"Basic {TENANTS['alice']}"}):
        for route in ("/v1/models", "/metrics", "/v1/completions", "/tokenize", "/detokenize", "/no-such-route"):
            reply = httpx.request("GET" if route in ("/v1/models", "/metrics") else "POST", url + route,
                                  headers=headers, json={}, timeout=30)
            assert reply.status_code == 401, (route, headers, reply.status_code)
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200  # probes stay open
    # the edge has a metrics port here: its /metrics is there, for the metrics roles only, not for a tenant's token
    assert httpx.get(f"{url}/metrics", headers=good, timeout=30).status_code == 404


@pytest.fixture(scope="module")
def tls_stack(tiny_model_path):
    stack = start_stack(model=str(tiny_model_path), tls=True, auth_token="tls-token-0001", http_port=0, metrics=True)
    yield stack
    stack.stop()


def test_with_tls_the_edge_and_the_router_speak_only_tls(tls_stack):
    stack = tls_stack
    assert stack.http_url.startswith("https://")
    with pytest.raises(httpx.HTTPError):  # plain HTTP on the edge's port
        httpx.get(stack.http_url.replace("https://", "http://") + "/health", timeout=10)
    reply = httpx.get(stack.http_url + "/v1/models", headers={"Authorization": "Bearer tls-token-0001"},
                      verify=ssl.create_default_context(cafile=stack.tls_ca), timeout=30)
    assert reply.status_code == 200
    with grpc.insecure_channel(stack.router_target) as ch:
        with pytest.raises(grpc.RpcError) as err:
            router_pb2_grpc.RouterStub(ch).ListModels(router_pb2.ListModelsRequest(), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_errors_name_the_role_that_failed_not_where_it_runs(tls_stack):
    stack = tls_stack
    stack.kill(stack.prefills[0])
    try:
        with PdserveClient(stack.router_target, credentials=stack.credentials(), token="tls-token-0001") as c:
            with pytest.raises(grpc.RpcError) as err:
                c.complete("the end", max_tokens=2, timeout=60)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert err.value.details().startswith("prefill:") and not ADDRESS.search(err.value.details())
        stack.kill(stack.router)  # the edge's own call to the router fails now
        reply = httpx.post(stack.http_url + "/v1/completions", timeout=30,
                           verify=ssl.create_default_context(cafile=stack.tls_ca),
                           headers={"Authorization": "Bearer tls-token-0001"}, json={"prompt": "hi", "max_tokens": 2})
        message = reply.json()["error"]["message"]
        assert reply.status_code == 503 and message.startswith("router:") and not ADDRESS.search(message)
    finally:
        stack.restart(stack.prefills[0])
        stack.restart(stack.router)
