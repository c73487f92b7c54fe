"""``python -m common.healthcheck [HOST:PORT]``: exit 0 if the service answers grpc.health.v1 SERVING, else 1.

The container health check (deploy/Dockerfile); the address defaults to 127.0.0.1:$PDSERVE_PORT, the port the
service in the same container listens on.
"""

from __future__ import annotations

import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(target: str, timeout_s: float = 3.0) -> bool:
    with grpc.insecure_channel(target) as ch:
        try:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    target = argv[0] if argv else f"127.0.0.1:{os.environ.get('PDSERVE_PORT', '50050')}"
    ok = check(target)
    print(f"{target}: {'SERVING' if ok else 'not serving'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
