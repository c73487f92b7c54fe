"""The public clients pin the router's identity: over TLS with the stack's CA, the sync SDK and the CLI take only a
certificate valid for the name ``router``. Every role's certificate is valid for 127.0.0.1, so a client that
verified by address alone would hand its bearer token to whoever holds a stolen kvstore key."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from types import SimpleNamespace

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from pdserve.cli.generate import router_security_from_env
from pdserve.client.client import PdserveClient
from pdserve.common.certs import make_identities
from pdserve.common.identity import Identity


@pytest.fixture(scope="module")
def identities(tmp_path_factory) -> dict[str, Identity]:
    dirs = make_identities(tmp_path_factory.mktemp("ids"), ["router", "kvstore", "prefill"])
    return {role: Identity.load(d) for role, d in dirs.items()}


@contextmanager
def public_port(identity: Identity) -> Iterator[str]:
    """A TLS port as the router's public one is served (server certificate only), presenting ``identity``."""
    server = grpc.server(futures.ThreadPoolExecutor(2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(identity.key, identity.cert)]))
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def reaches(client: PdserveClient) -> bool:
    """Whether the client completed a TLS handshake and a call (the call a token would ride on)."""
    try:
        health_pb2_grpc.HealthStub(client.channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        return True
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
        return False


def test_the_sdk_takes_the_routers_certificate_and_refuses_another_roles(identities):
    creds = grpc.ssl_channel_credentials(identities["router"].ca)
    with public_port(identities["router"]) as target, PdserveClient(target, credentials=creds, token="t") as c:
        assert reaches(c)
    for stolen in ("kvstore", "prefill"):
        with public_port(identities[stolen]) as target, PdserveClient(target, credentials=creds, token="t") as c:
            assert not reaches(c), f"a {stolen} certificate was taken for the router"
        # verifying by the address dialed (the opt-out) takes it: what the pin protects against
        with public_port(identities[stolen]) as target, PdserveClient(target, credentials=creds,
                                                                      server_name=None) as c:
            assert reaches(c)


def test_the_public_ports_own_certificate_passes_the_pin(tmp_path):
    """The router's public port serves a certificate of its own (common/certs.py PUBLIC_DIR) that carries the name
    the clients pin."""
    from pdserve.common.certs import PUBLIC_DIR

    make_identities(tmp_path, ["router"])
    public = tmp_path / PUBLIC_DIR
    served = SimpleNamespace(key=(public / "tls.key").read_bytes(), cert=(public / "tls.crt").read_bytes())
    creds = grpc.ssl_channel_credentials((public / "ca.crt").read_bytes())
    with public_port(served) as target, PdserveClient(target, credentials=creds) as c:
        assert reaches(c)


def test_the_cli_pins_the_router_by_default_and_can_verify_by_address(identities, monkeypatch):
    monkeypatch.setenv("PDSERVE_TLS_CA", identities["router"].ca_path)
    monkeypatch.setenv("PDSERVE_AUTH_TOKEN", "t")
    monkeypatch.delenv("PDSERVE_TLS_SERVER_NAME", raising=False)
    with public_port(identities["router"]) as target, PdserveClient(target, **router_security_from_env()) as c:
        assert reaches(c)
    with public_port(identities["kvstore"]) as target, PdserveClient(target, **router_security_from_env()) as c:
        assert not reaches(c)
    monkeypatch.setenv("PDSERVE_TLS_SERVER_NAME", "")
    assert router_security_from_env()["server_name"] is None
