"""The process's security settings: its identity on the internal plane, and TLS on a public port.

Internal plane: every service runs with ``--identity DIR`` (``common/identity.py``): it serves with mutual TLS
(client certificates from the stack's CA required), authorizes each RPC by the caller's role, and calls other
services as that identity, checking that the peer holds the role it expects (its certificate is valid for the role's
name). ``--insecure-internal`` turns all of it off, with a warning at start; a service given neither refuses to start.

Public side (the router's port and the HTTP edge): ``--tls-cert`` / ``--tls-key`` serve TLS there without client
certificates (callers present a bearer token instead), and ``--tls-ca`` verifies the router the edge calls. Every flag
has its ``PDSERVE_*`` variable. The settings are process-wide (``configure``): every channel a service opens goes to
another pdserve service.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc

from pdserve.common.identity import Identity, IdentityError

log = logging.getLogger("pdserve")

INSECURE_WARNING = ("--insecure-internal: the internal plane is NOT secured: no TLS, no identities, no per-RPC "
                    "authorization, no KV MACs; any process that reaches an internal port can call every RPC: read "
                    "or overwrite any tenant's cached KV blocks (tenant cache isolation is gone), create and hold "
                    "leases past every quota, abort or starve any request, and read /metrics in plain HTTP "
                    "(experiments only)")


@dataclass(frozen=True)
class TLSConfig:
    """TLS on a public port: the router's, the HTTP edge's (and the router the edge calls)."""

    cert: str | None = None
    key: str | None = None
    ca: str | None = None

    def __post_init__(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise ValueError("--tls-cert and --tls-key: give both or neither")
        for name in ("cert", "key", "ca"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ValueError(f"--tls-{name}: {path} is not a file")

    @property
    def serves_tls(self) -> bool:
        return bool(self.cert)

    @property
    def calls_tls(self) -> bool:
        return bool(self.ca)

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(_read(self.key), _read(self.cert))])

    def channel_credentials(self, identity: Identity | None = None) -> grpc.ChannelCredentials:
        """Verify the router with --tls-ca; present ``identity``'s certificate when there is one."""
        return grpc.ssl_channel_credentials(root_certificates=_read(self.ca),
                                            private_key=identity.key if identity else None,
                                            certificate_chain=identity.cert if identity else None)


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


_public = TLSConfig()
_identity: Identity | None = None


def configure(public: TLSConfig = TLSConfig(), identity: Identity | None = None) -> None:
    global _public, _identity
    _public, _identity = public, identity


def current() -> TLSConfig:
    return _public


def identity() -> Identity | None:
    """This process's identity on the internal plane; None under --insecure-internal."""
    return _identity


def add_identity_flags(parser) -> None:
    parser.add_argument("--identity", default=None, metavar="DIR",
                        help="this service's identity on the internal plane: a directory with tls.crt, tls.key, "
                             "ca.crt (as a cert-manager Secret) and kv-mac.key (`pdserve identities` makes them)")
    parser.add_argument("--insecure-internal", action="store_true",
                        help="no TLS, identities or authorization between services (experiments only; warned at start)")


def add_tls_flags(parser) -> None:
    parser.add_argument("--tls-cert", default=None, help="certificate (PEM) this public port serves TLS with")
    parser.add_argument("--tls-key", default=None, help="the certificate's private key (PEM)")
    parser.add_argument("--tls-ca", default=None, help="CA (PEM) that verifies the router this process calls")


def configure_from_args(args, role: str, needs_kv_key: bool = False) -> TLSConfig:
    """Check the security flags and make them the process's settings. A bad path, an identity of another role, or
    neither --identity nor --insecure-internal stops the service with a message naming the flag."""
    try:
        public = TLSConfig(getattr(args, "tls_cert", None), getattr(args, "tls_key", None),
                           getattr(args, "tls_ca", None))
    except ValueError as exc:
        raise SystemExit(f"tls: {exc}") from None
    ident = None
    if args.identity and args.insecure_internal:
        raise SystemExit("--identity and --insecure-internal: give one")
    if args.insecure_internal:
        log.warning(INSECURE_WARNING)
    elif not args.identity:
        raise SystemExit(f"--identity: required (a directory made by `pdserve identities`, holding this {role}'s "
                         "certificate); --insecure-internal runs without one")
    else:
        try:
            ident = Identity.load(args.identity)
            if needs_kv_key:
                ident.require_kv_key()
        except IdentityError as exc:
            raise SystemExit(f"--identity: {exc}") from None
        if ident.role != role:
            raise SystemExit(f"--identity: {args.identity} is a {ident.role} identity; this service is {role}")
    configure(public, ident)
    return public


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_if_tokens_in_clear(host: str, port: int, public: TLSConfig, tokens_enabled: bool, service: str) -> bool:
    """Warn when bearer tokens (and the prompts beside them) would cross the network in clear: tokens configured, no
    TLS on the public port, and a bind address beyond loopback. Returns whether it warned."""
    if not tokens_enabled or public.serves_tls or is_loopback(host):
        return False
    log.warning("%s: bearer tokens and prompts travel in clear on %s:%d (reachable beyond this host, no TLS): anyone "
                "on the path can read and replay them; serve TLS with --tls-cert/--tls-key, or bind to 127.0.0.1",
                service, host, port)
    return True
