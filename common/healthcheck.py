"""``python -m pdserve.common.healthcheck [HOST:PORT]``: exit 0 if the service answers grpc.health.v1 SERVING, else 1.

The container health check (deploy/Dockerfile) and the Kubernetes probes: the address defaults to
127.0.0.1:$PDSERVE_PORT, the port the service in the same container listens on. It calls as the service's own
identity ($PDSERVE_IDENTITY) when the port is internal (mutual TLS), and the router's public port as a client does
(TLS verified with the identity's CA when $PDSERVE_TLS_CERT is set, plaintext otherwise).
"""

from __future__ import annotations

import os
import sys

import grpc

from pdserve.common.identity import Identity, IdentityError
from pdserve.common.readiness import grpc_serving


def credentials() -> grpc.ChannelCredentials | None:
    directory = os.environ.get("PDSERVE_IDENTITY")
    if not directory:
        return None
    identity = Identity.load(directory)
    if identity.role == "router":  # its port is the public one
        return grpc.ssl_channel_credentials(identity.ca) if os.environ.get("PDSERVE_TLS_CERT") else None
    return identity.channel_credentials


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    target = argv[0] if argv else f"127.0.0.1:{os.environ.get('PDSERVE_PORT', '50050')}"
    try:
        creds = credentials()
    except IdentityError as exc:
        print(f"$PDSERVE_IDENTITY: {exc}")
        return 1
    ok = grpc_serving(target, creds, timeout_s=3.0)
    print(f"{target}: {'SERVING' if ok else 'not serving'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
