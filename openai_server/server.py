"""Edge process: flags (with PDSERVE_* environment variables, like every service) and uvicorn.

Security follows the router's: ``--tls-cert`` / ``--tls-key`` serve HTTPS, ``--tls-ca`` verifies the router's TLS
certificate (the edge presents its own identity's certificate to it), and a caller's ``Authorization: Bearer``
header is checked here on every route but /health (``--auth-token-file``, the router's file) and again at the
router. With ``--metrics-port`` and tokens, /metrics is served there only (HTTPS, to the prometheus and admin
identities) and the HTTP port answers a tenant's token 404; otherwise the HTTP port serves it as every other route.

Under load (``limits.py``, ``router_pool.py``): requests in flight are bounded in all and per tenant (429 past
either), each request has a deadline at the router, a connection must deliver its headers and its body within
deadlines, and the edge keeps as many router connections as its requests in flight need, so one tenant's streams
cannot occupy every stream of one connection.
"""

from __future__ import annotations

import uvicorn

from pdserve.common.config import service_parser
from pdserve.common.metrics import start_metrics_server
from pdserve.common.server import follow_parent, setup_logging
from pdserve.common.tenants import Tenants
from pdserve.common.tls import configure_from_args, identity, warn_if_tokens_in_clear
from pdserve.openai_server.app import create_app
from pdserve.openai_server.limits import EdgeLimits, deadline_protocol
from pdserve.openai_server.router_pool import RouterPool, pool_size


def main(argv: list[str] | None = None) -> None:
    parser = service_parser("openai_server", 8000, public=True)
    parser.add_argument("--router", default="127.0.0.1:50050", help="router address HOST:PORT")
    parser.add_argument("--request-timeout-s", type=float, default=600.0,
                        help="deadline of each request at the router (0: none); past it the answer is a 504")
    parser.add_argument("--max-concurrent-requests", type=int, default=512,
                        help="requests in flight at the edge, all tenants together; more are answered 429")
    parser.add_argument("--tenant-max-inflight", type=int, default=128,
                        help="requests one tenant may have in flight at the edge (0: only --max-concurrent-requests)")
    parser.add_argument("--router-streams-per-connection", type=int, default=100,
                        help="the router's --max-streams-per-connection: the edge opens enough connections for "
                             "--max-concurrent-requests calls")
    parser.add_argument("--router-name", default="router",
                        help="the name the router's TLS certificate must carry (a stack's router identity is valid "
                             "for 'router', no other role's is); empty: the host of --router")
    parser.add_argument("--max-connections", type=int, default=1024,
                        help="HTTP connections and requests at once (uvicorn's limit_concurrency; more get 503)")
    parser.add_argument("--headers-deadline-s", type=float, default=10.0,
                        help="a connection must deliver a request's headers within this long (slowloris)")
    parser.add_argument("--body-deadline-s", type=float, default=30.0,
                        help="a request's body must arrive within this long after its headers (else 408)")
    parser.add_argument("--retry-after-s", type=int, default=1, help="Retry-After of a 429 (router at its limit)")
    parser.add_argument("--auth-token-file", default=None,
                        help="the router's token file: every route but /health needs one of its tokens (checked "
                             "here, then at the router)")
    args = parser.parse_args(argv)
    for flag in ("max_concurrent_requests", "router_streams_per_connection", "max_connections"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')}: must be at least 1")
    for flag in ("request_timeout_s", "tenant_max_inflight"):
        if getattr(args, flag) < 0:
            parser.error(f"--{flag.replace('_', '-')}: must be at least 0")
    for flag in ("headers_deadline_s", "body_deadline_s"):
        if getattr(args, flag) <= 0:
            parser.error(f"--{flag.replace('_', '-')}: must be more than 0")
    setup_logging(args.log_level)
    follow_parent()
    tls = configure_from_args(args, "openai")
    tenants = Tenants.from_flag(args.auth_token_file)
    warn_if_tokens_in_clear(args.host, args.port, tls, tenants.enabled, "openai_server")
    if args.metrics_port:  # /metrics is also on the HTTP port; this mirrors the other services' flag
        start_metrics_server(args.metrics_port, args.metrics_host, identity())
    pinned = [("grpc.ssl_target_name_override", args.router_name)] if tls.calls_tls and args.router_name else []
    router = RouterPool(args.router, pool_size(args.max_concurrent_requests, args.router_streams_per_connection),
                        tls.channel_credentials(identity()) if tls.calls_tls else None, pinned)
    app = create_app(args.router, client=router, timeout_s=args.request_timeout_s or None,
                     retry_after_s=args.retry_after_s, tenants=tenants)
    limited = EdgeLimits(app, tenants, args.max_concurrent_requests, args.tenant_max_inflight, args.body_deadline_s,
                         args.retry_after_s, metrics_elsewhere=bool(args.metrics_port))
    uvicorn.run(limited, host=args.host, port=args.port, log_level=args.log_level.lower(), timeout_graceful_shutdown=5,
                ssl_certfile=tls.cert, ssl_keyfile=tls.key, http=deadline_protocol(args.headers_deadline_s),
                limit_concurrency=args.max_connections)
