"""/metrics over HTTPS: a client that connects and says nothing does not stop other scrapes (the TLS handshake runs
per connection, under a deadline), and only the roles that read metrics get the page."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.request

import pytest

from pdserve.common.certs import make_identities
from pdserve.common.identity import Identity
from pdserve.common.metrics import start_metrics_server
from pdserve.launcher.ports import free_port


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    dirs = make_identities(tmp_path_factory.mktemp("ids"), roles=("decode", "prometheus", "admin", "router"))
    port = free_port()
    server = start_metrics_server(port, "127.0.0.1", Identity.load(dirs["decode"]))
    yield port, {role: Identity.load(d) for role, d in dirs.items()}
    if hasattr(server, "shutdown"):
        server.shutdown()
        server.server_close()


def get(port: int, identity: Identity) -> int:
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=20,
                                    context=identity.client_ssl_context()) as reply:
            return reply.status
    except urllib.error.HTTPError as err:
        return err.code


def test_a_silent_connection_does_not_freeze_the_page(served):
    port, ids = served
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        status = get(port, ids["prometheus"])  # blocked behind the silent ones' handshakes without the fix
        print("scrape while 3 silent connections are open:", status)
        assert status == 200
    finally:
        for s in silent:
            s.close()


def test_only_the_metrics_roles_read_the_page(served):
    port, ids = served
    assert get(port, ids["admin"]) == 200
    assert get(port, ids["router"]) == 403  # a stolen worker key does not read every service's metrics
    with pytest.raises((OSError, ssl.SSLError)):  # no client certificate: refused in the handshake
        urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=20,
                               context=ssl.create_default_context(cadata=ids["router"].ca.decode()))
