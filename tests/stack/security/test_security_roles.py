"""The role matrix: every internal RPC called by every role's identity, by a caller with no certificate and by one
with a certificate from another CA. The table in common/authz.py is the only thing that decides; each allowed call
gets past authorization (whatever it then answers about the request), each other one is refused before any work."""

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from pdserve.common.authz import allowed_roles
from pdserve.common.certs import make_identities
from pdserve.common.identity import ROLES, Identity
from pdserve.testing.v1 import kvstore_faults_pb2
from pdserve.v1 import common_pb2, decode_pb2, kvstore_pb2, prefill_pb2

# method -> (service's process kind, kind of call, an empty request): enough to reach the handler
RPCS = {
    "/pdserve.v1.Prefill/Prefill": ("prefills", "unary", prefill_pb2.PrefillRequest()),
    "/pdserve.v1.Prefill/GetLoad": ("prefills", "unary", common_pb2.LoadRequest()),
    "/pdserve.v1.Decode/Decode": ("decodes", "server_stream", decode_pb2.DecodeRequest()),
    "/pdserve.v1.Decode/Prefetch": ("decodes", "unary", decode_pb2.PrefetchRequest()),
    "/pdserve.v1.Decode/GetLoad": ("decodes", "unary", common_pb2.LoadRequest()),
    "/pdserve.v1.KVStore/Put": ("kvstores", "client_stream", kvstore_pb2.PutChunk()),
    "/pdserve.v1.KVStore/Get": ("kvstores", "server_stream", kvstore_pb2.GetRequest()),
    "/pdserve.v1.KVStore/Lookup": ("kvstores", "unary", kvstore_pb2.LookupRequest()),
    "/pdserve.v1.KVStore/Acquire": ("kvstores", "unary", kvstore_pb2.AcquireRequest()),
    "/pdserve.v1.KVStore/Renew": ("kvstores", "unary", kvstore_pb2.LeaseRequest()),
    "/pdserve.v1.KVStore/Release": ("kvstores", "unary", kvstore_pb2.LeaseRequest()),
    "/pdserve.v1.KVStore/Stats": ("kvstores", "unary", kvstore_pb2.StatsRequest()),
    "/pdserve.testing.v1.KVStoreFaults/Corrupt": ("kvstores", "unary", kvstore_faults_pb2.CorruptRequest()),
    "/grpc.health.v1.Health/Check": ("kvstores", "unary", health_pb2.HealthCheckRequest()),
}
REFUSED = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE)


def call(channel: grpc.Channel, method: str, kind: str, request) -> grpc.StatusCode:
    """The status of one call (OK when it succeeds)."""
    serialize, deserialize = type(request).SerializeToString, (lambda raw: raw)
    try:
        if kind == "unary":
            channel.unary_unary(method, serialize, deserialize)(request, timeout=10)
        elif kind == "server_stream":
            list(channel.unary_stream(method, serialize, deserialize)(request, timeout=10))
        else:
            channel.stream_unary(method, serialize, deserialize)(iter([request]), timeout=10)
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


def test_every_rpc_is_covered():
    from pdserve.common.authz import POLICY

    assert set(POLICY) <= set(RPCS)


@pytest.mark.parametrize("role", ROLES)
def test_each_role_may_call_what_the_table_lists_and_nothing_else(tenant_stack, role):
    outcomes = {}
    for method, (kind_of_process, kind, request) in RPCS.items():
        process = getattr(tenant_stack, kind_of_process)[0]
        with tenant_stack.channel(process, role) as ch:
            outcomes[method] = call(ch, method, kind, request)
    for method, code in outcomes.items():
        if role in allowed_roles(method):
            assert code not in REFUSED, (role, method, code)
        else:
            assert code == grpc.StatusCode.PERMISSION_DENIED, (role, method, code)


def test_no_certificate_or_another_cas_is_refused_in_the_handshake(tenant_stack, tmp_path):
    """No byte of the request reaches a service: the TLS handshake fails (the client sees UNAVAILABLE), for plaintext,
    for TLS without a client certificate, and for a router certificate another CA signed."""
    stranger = Identity.load(make_identities(tmp_path, ["router"])["router"])
    ca = Path(tenant_stack.identities.ca).read_bytes()
    callers = {"plaintext": None, "no certificate": grpc.ssl_channel_credentials(ca),
               "another CA": grpc.ssl_channel_credentials(ca, stranger.key, stranger.cert)}
    for name, creds in callers.items():
        for method, (kind_of_process, kind, request) in RPCS.items():
            target = getattr(tenant_stack, kind_of_process)[0].target
            with grpc.secure_channel(target, creds) if creds else grpc.insecure_channel(target) as ch:
                assert call(ch, method, kind, request) == grpc.StatusCode.UNAVAILABLE, (name, method)


def test_refusals_are_counted_by_method_and_role(tenant_stack):
    kvstore = tenant_stack.kvstores[0]
    key = ("pdserve_rpc_denied_total", (("method", "/pdserve.v1.KVStore/Put"), ("role", "decode")))
    before = tenant_stack.scrape(kvstore).get(key, 0.0)
    with tenant_stack.channel(kvstore, "decode") as ch:
        assert call(ch, "/pdserve.v1.KVStore/Put", *RPCS["/pdserve.v1.KVStore/Put"][1:]) == grpc.StatusCode.PERMISSION_DENIED
    assert tenant_stack.scrape(kvstore)[key] == before + 1
