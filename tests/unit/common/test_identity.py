"""Identities and who may call what: the certificates a stack's CA makes, loading them, the role table, error texts
without addresses."""

import stat

import grpc
import pytest
from cryptography import x509

from pdserve.common.authz import ANY, POLICY, allowed_roles
from pdserve.common.certs import make_identities
from pdserve.common.identity import KV_KEY_ROLES, ROLES, Identity, IdentityError, role_from_spiffe
from pdserve.common.redact import public_message, without_addresses


def test_each_role_gets_its_own_certificate_key_and_the_kv_key_only_where_needed(tmp_path):
    dirs = make_identities(tmp_path, ROLES, hosts=["kvstore.pdserve.svc"])
    loaded = {role: Identity.load(d) for role, d in dirs.items()}
    assert {role: i.role for role, i in loaded.items()} == {role: role for role in ROLES}
    assert len({i.key for i in loaded.values()}) == len(ROLES)  # no shared key
    assert {role for role, i in loaded.items() if i.kv_key} == set(KV_KEY_ROLES)
    assert len({i.kv_key for i in loaded.values() if i.kv_key}) == 1  # one KV key per stack
    for role, d in dirs.items():
        assert stat.S_IMODE(d.stat().st_mode) == 0o700 and stat.S_IMODE((d / "tls.key").stat().st_mode) == 0o600
        sans = x509.load_pem_x509_certificate(loaded[role].cert).extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
        assert role in sans.get_values_for_type(x509.DNSName) and "kvstore.pdserve.svc" in sans.get_values_for_type(
            x509.DNSName)
    other = Identity.load(make_identities(tmp_path / "other", ["router"])["router"])
    assert other.ca != loaded["router"].ca  # a new set is a new CA


def test_a_bad_identity_directory_is_named_in_the_error(tmp_path):
    with pytest.raises(IdentityError, match="not a directory"):
        Identity.load(tmp_path / "missing")
    d = make_identities(tmp_path, ["prefill"])["prefill"]
    (d / "kv-mac.key").write_text("zz")
    with pytest.raises(IdentityError, match="kv-mac.key"):
        Identity.load(d)
    (d / "kv-mac.key").unlink()
    assert Identity.load(d).kv_key is None
    with pytest.raises(IdentityError, match="kv-mac.key: missing"):
        Identity.load(d).require_kv_key()
    (d / "tls.key").unlink()
    with pytest.raises(IdentityError, match="tls.key"):
        Identity.load(d)


def test_roles_come_only_from_this_trust_domain():
    assert role_from_spiffe(b"spiffe://pdserve/router") == "router"
    for uri in ("spiffe://other/router", "spiffe://pdserve/root", "spiffe://pdserve/", "", None):
        assert role_from_spiffe(uri) is None


def test_the_table_lets_only_prefill_write_and_only_test_inject_faults():
    assert allowed_roles("/pdserve.v1.KVStore/Put") == {"prefill"}
    assert allowed_roles("/pdserve.testing.v1.KVStoreFaults/Corrupt") == {"test"}
    assert allowed_roles("/grpc.health.v1.Health/Check") == ANY
    assert allowed_roles("/pdserve.v1.KVStore/NoSuchMethod") == frozenset()  # default deny
    assert all(roles <= set(ROLES) for roles in POLICY.values())
    assert not any("kvstore" in roles or "openai" in roles or "prometheus" in roles for roles in POLICY.values())


def test_error_texts_keep_the_reason_and_lose_the_address():
    assert without_addresses("failed to connect to all addresses; last error: ipv4:10.1.2.3:50061: refused") == \
        "failed to connect to all addresses; last error: <address>: refused"
    assert without_addresses("prefill-0.prefill:50061 and [::1]:50051 and 192.168.0.7") == \
        "<address> and <address> and <address>"
    assert public_message("prefill", grpc.StatusCode.UNAVAILABLE, "ipv4:127.0.0.1:5: refused") == "prefill: unavailable"
    assert public_message("decode", grpc.StatusCode.INVALID_ARGUMENT, "kv.token_count: 5 tokens") == \
        "decode: kv.token_count: 5 tokens"


def _health(server_identity: Identity, client_identity: Identity) -> bool:
    """Whether a client of one set reaches a server of (possibly) another over mutual TLS."""
    import asyncio

    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    async def scenario() -> bool:
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
        port = server.add_secure_port("127.0.0.1:0", server_identity.server_credentials)
        await server.start()
        try:
            async with grpc.aio.secure_channel(f"127.0.0.1:{port}", client_identity.channel_credentials,
                                               options=[("grpc.ssl_target_name_override", "kvstore")]) as ch:
                await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
                return True
        except grpc.aio.AioRpcError:
            return False
        finally:
            await server.stop(0)
    return asyncio.run(scenario())


def test_rotation_trusts_both_cas_for_a_while_then_only_the_new_one(tmp_path):
    from pdserve.common.certs import add_trust, drop_trust

    old, new = (make_identities(tmp_path / name, ["kvstore", "prefill"]) for name in ("old", "new"))

    def load(dirs, role):
        return Identity.load(dirs[role])
    assert _health(load(old, "kvstore"), load(old, "prefill"))
    assert not _health(load(old, "kvstore"), load(new, "prefill"))  # another CA: refused
    add_trust(tmp_path / "old", (tmp_path / "new" / "ca.crt").read_bytes())  # 1. everyone trusts both
    add_trust(tmp_path / "new", (tmp_path / "old" / "ca.crt").read_bytes())
    assert _health(load(old, "kvstore"), load(new, "prefill")) and _health(load(new, "kvstore"), load(old, "prefill"))
    drop_trust(tmp_path / "new")  # 3. once every service runs the new set
    assert _health(load(new, "kvstore"), load(new, "prefill"))
    assert not _health(load(new, "kvstore"), load(old, "prefill"))


def test_role_certificates_cannot_sign_certificates(tmp_path):
    """CA:FALSE and a key usage of digital signature only: a stolen role key cannot mint a certificate that a
    verifier would chain to the stack's CA."""
    for d in make_identities(tmp_path, ["router", "kvstore"]).values():
        cert = x509.load_pem_x509_certificate((d / "tls.crt").read_bytes())
        basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
        assert basic.critical and basic.value.ca is False
        assert usage.critical and usage.value.digital_signature and not usage.value.key_cert_sign


def test_the_public_port_gets_a_certificate_of_its_own(tmp_path):
    """Beside the router's role identity, a set holds the public port's certificate: the router's names (what clients
    pin), no role, serving only, its own key; a set without the router has none."""
    from cryptography.x509.oid import ExtendedKeyUsageOID

    from pdserve.common.certs import PUBLIC_DIR

    dirs = make_identities(tmp_path, ["router", "kvstore"], hosts=["router.example"])
    public = x509.load_pem_x509_certificate((tmp_path / PUBLIC_DIR / "tls.crt").read_bytes())
    sans = public.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"router", "localhost", "router.example"} <= set(sans.get_values_for_type(x509.DNSName))
    assert sans.get_values_for_type(x509.UniformResourceIdentifier) == []  # no role on the internal plane
    assert list(public.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH]
    assert not public.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert (tmp_path / PUBLIC_DIR / "tls.key").read_bytes() != (dirs["router"] / "tls.key").read_bytes()
    assert stat.S_IMODE((tmp_path / PUBLIC_DIR / "tls.key").stat().st_mode) == 0o600
    assert PUBLIC_DIR not in dirs
    make_identities(tmp_path / "no-router", ["kvstore"])
    assert not (tmp_path / "no-router" / PUBLIC_DIR).exists()
