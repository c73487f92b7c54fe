"""A throwaway certificate authority for a local stack (``pdserve up --tls``) and the tests.

One CA, and one certificate per name valid for localhost and 127.0.0.1, usable both to serve and as a client
(mutual TLS). ECDSA P-256 keys; nothing here is meant for a production PKI.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertFiles:
    cert: str
    key: str
    ca: str


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _builder(subject: str, issuer: str, public_key, days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days)))


def make_ca(directory: str | Path, names: list[str], days: int = 7) -> dict[str, CertFiles]:
    """Write ca.pem and, per name, <name>.pem and <name>.key signed by it. Returns the paths per name."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = "pdserve local CA"
    ca_cert = (_builder(ca_name, ca_name, ca_key.public_key(), days)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .sign(ca_key, hashes.SHA256()))
    (d / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    out = {}
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (_builder(name, ca_name, key.public_key(), days)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                               critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        (d / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, d / f"{name}.key")
        out[name] = CertFiles(str(d / f"{name}.pem"), str(d / f"{name}.key"), str(d / "ca.pem"))
    return out
