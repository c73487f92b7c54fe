"""A public port that would carry bearer tokens in clear beyond this host says so at start."""

import logging

from pdserve.common.tls import TLSConfig, is_loopback, warn_if_tokens_in_clear


def test_tokens_on_a_plaintext_port_beyond_loopback_are_warned(caplog):
    caplog.set_level(logging.WARNING)
    assert warn_if_tokens_in_clear("0.0.0.0", 50050, TLSConfig(), True, "router")
    assert "travel in clear on 0.0.0.0:50050" in caplog.text
    assert not warn_if_tokens_in_clear("127.0.0.1", 50050, TLSConfig(), True, "router")
    assert not warn_if_tokens_in_clear("::1", 50050, TLSConfig(), True, "router")
    assert not warn_if_tokens_in_clear("0.0.0.0", 50050, TLSConfig(), False, "router")  # no tokens: warned elsewhere
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and not is_loopback("10.0.0.1")


def test_the_router_is_pinned_by_name_not_by_address(tmp_path):
    """Every role's certificate is valid for 127.0.0.1: a client that checks only the address takes a kvstore's key
    for the router; pinned to the name "router", it does not."""
    from concurrent import futures

    import grpc
    from grpc_health.v1 import health, health_pb2_grpc

    from pdserve.common.certs import make_identities
    from pdserve.common.identity import Identity
    from pdserve.common.readiness import grpc_serving

    ids = {r: Identity.load(d) for r, d in make_identities(tmp_path, ["router", "kvstore"]).items()}
    for role, expected in (("kvstore", False), ("router", True)):
        server = grpc.server(futures.ThreadPoolExecutor(2))
        health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(ids[role].key, ids[role].cert)]))
        server.start()
        try:
            creds = grpc.ssl_channel_credentials(ids[role].ca)
            assert grpc_serving(f"127.0.0.1:{port}", creds, 10.0)  # by address: any role passes
            assert grpc_serving(f"127.0.0.1:{port}", creds, 10.0, server_name="router") is expected, role
        finally:
            server.stop(None)
