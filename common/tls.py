"""TLS for every gRPC port, and mutual TLS between services.

Each service has one certificate (``--tls-cert`` / ``--tls-key``): it serves with it and presents it as a client
when it calls another service. ``--tls-ca`` verifies the services it calls; ``--tls-client-ca`` makes its own port
require a client certificate signed by that CA (mutual TLS: internal services set it; the router's public port usually
does not, and checks a bearer token instead). Every flag has its ``PDSERVE_TLS_*`` variable. The settings are
process-wide (``configure``) because every channel a service opens, whoever opens it, goes to another pdserve service.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc


@dataclass(frozen=True)
class TLSConfig:
    cert: str | None = None
    key: str | None = None
    ca: str | None = None
    client_ca: str | None = None

    def __post_init__(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise ValueError("--tls-cert and --tls-key: give both or neither")
        if self.client_ca and not self.cert:
            raise ValueError("--tls-client-ca: needs --tls-cert and --tls-key (the port must serve TLS)")
        for name in ("cert", "key", "ca", "client_ca"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ValueError(f"--tls-{name.replace('_', '-')}: {path} is not a file")

    @property
    def serves_tls(self) -> bool:
        return bool(self.cert)

    @property
    def calls_tls(self) -> bool:
        return bool(self.ca)

    def server_credentials(self) -> grpc.ServerCredentials:
        client_ca = _read(self.client_ca)
        return grpc.ssl_server_credentials([(_read(self.key), _read(self.cert))], root_certificates=client_ca,
                                           require_client_auth=client_ca is not None)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=_read(self.ca), private_key=_read(self.key),
                                            certificate_chain=_read(self.cert))


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


_current = TLSConfig()


def configure(config: TLSConfig) -> None:
    global _current
    _current = config


def current() -> TLSConfig:
    return _current


def add_tls_flags(parser) -> None:
    parser.add_argument("--tls-cert", default=None, help="this service's certificate (PEM): its port serves TLS")
    parser.add_argument("--tls-key", default=None, help="the certificate's private key (PEM)")
    parser.add_argument("--tls-ca", default=None, help="CA (PEM) that verifies the services this one calls")
    parser.add_argument("--tls-client-ca", default=None,
                        help="require client certificates signed by this CA (PEM): mutual TLS")


def configure_from_args(args) -> TLSConfig:
    """Check the TLS flags and make them the process's settings; a bad path stops the service naming the flag."""
    try:
        config = TLSConfig(args.tls_cert, args.tls_key, args.tls_ca, args.tls_client_ca)
    except ValueError as exc:
        raise SystemExit(f"tls: {exc}") from None
    configure(config)
    return config
