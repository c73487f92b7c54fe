"""A stack's identities: one CA made at start and a certificate per role (``pdserve identities``, ``pdserve up``).

Each role's directory holds what a cert-manager Secret holds (``tls.crt``, ``tls.key``, ``ca.crt``) plus, for the
roles that need it, the stack's KV key (``kv-mac.key``). A certificate names its role as the URI
``spiffe://pdserve/<role>`` and is valid for the role's name as a host (``kvstore``: the compose and Kubernetes
service names), ``localhost``, 127.0.0.1 and any extra ``hosts``; it serves and acts as a client (mutual TLS). A set
with the router also holds ``public/``: the certificate of the router's public port, valid for the router's names,
naming no role and for serving only. ECDSA P-256 keys. The CA's private key is not kept: rotating means a new set
(``trust`` keeps old CAs trusted meanwhile, docs/security.md).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pdserve.common.identity import (
    CA_FILE,
    CERT_FILE,
    KEY_FILE,
    KV_KEY_BYTES,
    KV_KEY_FILE,
    KV_KEY_ROLES,
    ROLES,
    spiffe_id,
)

DEFAULT_DAYS = 90
PUBLIC_DIR = "public"  # the router's public port's certificate: not a role, made beside the router's identity
STACK_ROLES = ("router", "prefill", "decode", "kvstore", "openai", "prometheus", "admin")  # what `pdserve up` makes


# A role's key signs TLS handshakes (ECDHE with ECDSA), nothing else: never certificates (BasicConstraints CA:FALSE)
ROLE_KEY_USAGE = x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                               data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                               encipher_only=False, decipher_only=False)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: str, issuer: str, public_key, days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days)))


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)  # also when the file existed with another mode


def _san(role: str, hosts: Iterable[str], uri: bool = True) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(spiffe_id(role))] if uri else []
    for host in dict.fromkeys([role, "localhost", "127.0.0.1", "::1", *hosts]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def make_identities(directory: str | Path, roles: Iterable[str] = STACK_ROLES, hosts: Iterable[str] = (),
                    days: int = DEFAULT_DAYS, owners: dict[str, int] | None = None) -> dict[str, Path]:
    """A fresh CA, and per role ``<directory>/<role>/`` with its certificate, key, the CA and, for the roles in
    KV_KEY_ROLES, one new KV key shared by them. ``owners``: role -> uid that gets the role's directory (as root, for
    containers running each role as its own user). Returns role -> directory."""
    roles = list(roles)
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise ValueError(f"roles: unknown {unknown}; known: {', '.join(ROLES)}")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = f"pdserve stack CA {secrets.token_hex(4)}"  # two CAs trusted at once (a rotation) must differ
    ca_cert = (_builder(ca_name, ca_name, ca_key.public_key(), days)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    bundle = _pem(ca_cert)
    _write(d / CA_FILE, bundle, 0o644)
    kv_key = secrets.token_bytes(KV_KEY_BYTES).hex().encode() + b"\n"
    out = {}
    for role in roles:
        role_dir = _issue(d / role, _san(role, hosts), f"pdserve {role}", ca_name, ca_key, bundle, days,
                          [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
        if role in KV_KEY_ROLES:
            _write(role_dir / KV_KEY_FILE, kv_key, 0o600)
        out[role] = role_dir
    if "router" in roles:
        # The public port's own certificate: the router's names, no role (no SPIFFE URI) and server use only, so the
        # key a public port exposes to every caller's handshake is never a client identity on the internal plane
        _issue(d / PUBLIC_DIR, _san("router", hosts, uri=False), "pdserve router (public port)", ca_name, ca_key,
               bundle, days, [ExtendedKeyUsageOID.SERVER_AUTH])
    for role, owner in (owners or {}).items():
        # the public port's key belongs to whoever runs the router
        for owned in [out.get(role)] + ([d / PUBLIC_DIR] if role == "router" and "router" in out else []):
            for path in [owned, *owned.iterdir()] if owned else []:
                os.chown(path, owner, owner)
    return out


def _issue(directory: Path, san: x509.SubjectAlternativeName, common_name: str, ca_name: str, ca_key, bundle: bytes,
           days: int, usages: list) -> Path:
    """One end-entity certificate, its key and the CA bundle in ``directory`` (0700; the key 0600)."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(common_name, ca_name, key.public_key(), days)
            .add_extension(san, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(ROLE_KEY_USAGE, critical=True)
            .sign(ca_key, hashes.SHA256()))
    directory.mkdir(exist_ok=True)
    directory.chmod(0o700)
    _write(directory / CERT_FILE, _pem(cert), 0o644)
    _write(directory / KEY_FILE, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()), 0o600)
    _write(directory / CA_FILE, bundle, 0o644)
    return directory


def _ca_files(directory: Path) -> list[Path]:
    return [directory / CA_FILE] + sorted(directory.glob(f"*/{CA_FILE}"))


def add_trust(directory: str | Path, pem: bytes) -> None:
    """Make an identity set trust another CA too (its certificates in ``pem``): the first step of a rotation."""
    for path in _ca_files(Path(directory)):
        bundle = path.read_bytes()
        if pem not in bundle:
            path.write_bytes(bundle + pem)


def drop_trust(directory: str | Path) -> None:
    """Make an identity set trust only its own CA again (the first certificate of its bundle): the last step."""
    own = x509.load_pem_x509_certificates((Path(directory) / CA_FILE).read_bytes())[0]
    for path in _ca_files(Path(directory)):
        path.write_bytes(_pem(own))
