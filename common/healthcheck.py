"""``python -m pdserve.common.healthcheck [HOST:PORT]``: exit 0 if the service answers grpc.health.v1 SERVING, else 1.

The container health check (deploy/Dockerfile); the address defaults to 127.0.0.1:$PDSERVE_PORT, the port the
service in the same container listens on.
"""

from __future__ import annotations

import os
import sys

from pdserve.common.readiness import grpc_serving


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    target = argv[0] if argv else f"127.0.0.1:{os.environ.get('PDSERVE_PORT', '50050')}"
    ok = grpc_serving(target, timeout_s=3.0)
    print(f"{target}: {'SERVING' if ok else 'not serving'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
