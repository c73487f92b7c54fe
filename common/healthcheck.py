"""``python -m pdserve.common.healthcheck [--live] [HOST:PORT]``: exit 0 if the service answers grpc.health.v1 SERVING,
else 1. ``--live`` (liveness probes): exit 0 if it answers at all; a router whose workers are all away is alive but
NOT_SERVING, and restarting it would not bring them back.

The container health check (deploy/Dockerfile) and the Kubernetes probes: the address defaults to
127.0.0.1:$PDSERVE_PORT, the port the service in the same container listens on. It calls as the service's own
identity ($PDSERVE_IDENTITY) when the port is internal (mutual TLS), the router's public port as a client does
(TLS verified with the identity's CA when $PDSERVE_TLS_CERT is set, plaintext otherwise), and the HTTP edge's /health.
"""

from __future__ import annotations

import os
import sys

import grpc

from pdserve.common.identity import Identity, IdentityError
from pdserve.common.readiness import grpc_serving, http_ok


def serving(target: str, identity: Identity | None, live: bool = False) -> bool:
    public_tls = bool(os.environ.get("PDSERVE_TLS_CERT"))
    if identity is not None and identity.role == "openai":  # the HTTP edge
        return http_ok(f"{'https' if public_tls else 'http'}://{target}/health", 3.0,
                       identity.ca_path if public_tls else None, any_status=live)
    if identity is None or identity.role == "router":  # the router's port is the public one: pinned to "router"
        creds = grpc.ssl_channel_credentials(identity.ca) if identity is not None and public_tls else None
        return grpc_serving(target, creds, timeout_s=3.0, server_name="router", any_status=live)
    return grpc_serving(target, identity.channel_credentials, timeout_s=3.0, server_name=identity.role,
                        any_status=live)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    live = "--live" in argv
    argv = [a for a in argv if a != "--live"]
    target = argv[0] if argv else f"127.0.0.1:{os.environ.get('PDSERVE_PORT', '50050')}"
    try:
        identity = Identity.load(os.environ["PDSERVE_IDENTITY"]) if os.environ.get("PDSERVE_IDENTITY") else None
    except IdentityError as exc:
        print(f"$PDSERVE_IDENTITY: {exc}")
        return 1
    ok = serving(target, identity, live)
    print(f"{target}: {('alive' if ok else 'not answering') if live else ('SERVING' if ok else 'not serving')}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
