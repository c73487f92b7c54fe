"""Who a process is on the internal plane: its role, its certificate and key, the stack's CA and the stack's KV key.

A stack has one CA and one certificate per role, the role carried as the URI ``spiffe://pdserve/<role>`` in the
certificate's subject alternative names (``common/certs.py`` makes them; cert-manager can too). An identity directory
holds the files the way a cert-manager Secret does: ``tls.crt``, ``tls.key``, ``ca.crt``, plus ``kv-mac.key`` (the
stack's KV key, hex) for the roles that name or touch KV blocks. Services serve and call each other with mutual TLS
under these identities, and authorize every RPC by the caller's role (``common/authz.py``).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import grpc
from cryptography import x509

TRUST_DOMAIN = "pdserve"
# router, prefill, decode, kvstore and the HTTP edge (openai) run the stack; prometheus scrapes metrics; admin is for
# tools that read (Stats, health: the launcher, benchmarks); test may also inject faults (a kvstore's
# --enable-fault-injection). See docs/security.md for what each may call.
ROLES = ("router", "prefill", "decode", "kvstore", "openai", "prometheus", "admin", "test")
KV_KEY_ROLES = ("router", "prefill", "decode", "kvstore")  # the router derives tenant salts from it
CERT_FILE, KEY_FILE, CA_FILE, KV_KEY_FILE = "tls.crt", "tls.key", "ca.crt", "kv-mac.key"
KV_KEY_BYTES = 32


class IdentityError(ValueError):
    """An identity directory that cannot be used; the message names the file."""


def spiffe_id(role: str) -> str:
    return f"spiffe://{TRUST_DOMAIN}/{role}"


def role_from_spiffe(uri: str | bytes | None) -> str | None:
    """The role a SPIFFE ID names, or None if it is not one of this trust domain's roles."""
    if isinstance(uri, bytes):
        uri = uri.decode(errors="replace")
    prefix = f"spiffe://{TRUST_DOMAIN}/"
    if not uri or not uri.startswith(prefix):
        return None
    role = uri[len(prefix):]
    return role if role in ROLES else None


def role_of_certificate(pem: bytes) -> str | None:
    """The role in a certificate's URI SANs (exactly one spiffe://pdserve/ URI), or None."""
    cert = x509.load_pem_x509_certificate(pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    roles = [role_from_spiffe(u) for u in sans.get_values_for_type(x509.UniformResourceIdentifier)
             if u.startswith(f"spiffe://{TRUST_DOMAIN}/")]
    return roles[0] if len(roles) == 1 else None


@dataclass(frozen=True)
class Identity:
    role: str
    directory: str
    cert: bytes
    key: bytes
    ca: bytes
    kv_key: bytes | None = None

    @classmethod
    def load(cls, directory: str | Path) -> Identity:
        d = Path(directory)
        if not d.is_dir():
            raise IdentityError(f"{d} is not a directory (an identity directory holds {CERT_FILE}, {KEY_FILE} and "
                                f"{CA_FILE}, as a cert-manager Secret does)")
        files = {}
        for name in (CERT_FILE, KEY_FILE, CA_FILE):
            try:
                files[name] = (d / name).read_bytes()
            except OSError as exc:
                raise IdentityError(f"{d / name}: {exc.strerror}") from None
        try:
            role = role_of_certificate(files[CERT_FILE])
        except ValueError as exc:
            raise IdentityError(f"{d / CERT_FILE}: not a PEM certificate ({exc})") from None
        if role is None:
            raise IdentityError(f"{d / CERT_FILE}: carries no {spiffe_id('<role>')} URI naming one of "
                                f"{', '.join(ROLES)}")
        return cls(role, str(d), files[CERT_FILE], files[KEY_FILE], files[CA_FILE], _read_kv_key(d / KV_KEY_FILE))

    @property
    def cert_path(self) -> str:
        return str(Path(self.directory) / CERT_FILE)

    @property
    def key_path(self) -> str:
        return str(Path(self.directory) / KEY_FILE)

    @property
    def ca_path(self) -> str:
        return str(Path(self.directory) / CA_FILE)

    def require_kv_key(self) -> bytes:
        if self.kv_key is None:
            raise IdentityError(f"{Path(self.directory) / KV_KEY_FILE}: missing (the stack's KV key; the "
                                f"{', '.join(KV_KEY_ROLES)} identities carry it)")
        return self.kv_key

    @cached_property
    def server_credentials(self) -> grpc.ServerCredentials:
        """Serve with this identity and require a client certificate from the stack's CA (mutual TLS)."""
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)

    @cached_property
    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Call another service as this identity, trusting only the stack's CA."""
        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.cert)

    def client_ssl_context(self) -> ssl.SSLContext:
        """For HTTPS clients (scraping a service's /metrics): trust the stack's CA, present this identity."""
        context = ssl.create_default_context(cadata=self.ca.decode())
        context.load_cert_chain(self.cert_path, self.key_path)
        return context


def _read_kv_key(path: Path) -> bytes | None:
    if not path.exists():
        return None
    try:
        key = bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        raise IdentityError(f"{path}: expected {KV_KEY_BYTES} bytes in hex") from None
    if len(key) != KV_KEY_BYTES:
        raise IdentityError(f"{path}: expected {KV_KEY_BYTES} bytes in hex, got {len(key)}")
    return key
