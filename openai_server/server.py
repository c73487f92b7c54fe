"""Edge process: flags (with PDSERVE_* environment variables, like every service) and uvicorn.

Security follows the router's: ``--tls-cert`` / ``--tls-key`` serve HTTPS, ``--tls-ca`` verifies the router's TLS
certificate (the edge presents its own identity's certificate to it), and a caller's ``Authorization: Bearer``
header is checked here on every route but /health (``--auth-token-file``, the router's file) and again at the
router. /metrics, on the HTTP port and on ``--metrics-port``, is as protected as every other route.
"""

from __future__ import annotations

import uvicorn

from pdserve.common.config import service_parser
from pdserve.common.metrics import start_metrics_server
from pdserve.common.server import follow_parent, setup_logging
from pdserve.common.tenants import Tenants
from pdserve.common.tls import configure_from_args, identity
from pdserve.openai_server.app import create_app


def main(argv: list[str] | None = None) -> None:
    parser = service_parser("openai_server", 8000, public=True)
    parser.add_argument("--router", default="127.0.0.1:50050", help="router address HOST:PORT")
    parser.add_argument("--request-timeout-s", type=float, default=0.0,
                        help="deadline of each request at the router (0: none); past it the answer is a 504")
    parser.add_argument("--retry-after-s", type=int, default=1, help="Retry-After of a 429 (router at its limit)")
    parser.add_argument("--auth-token-file", default=None,
                        help="the router's token file: every route but /health needs one of its tokens (checked "
                             "here, then at the router)")
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    follow_parent()
    tls = configure_from_args(args, "openai")
    tenants = Tenants.from_flag(args.auth_token_file)
    if args.metrics_port:  # /metrics is also on the HTTP port; this mirrors the other services' flag
        start_metrics_server(args.metrics_port, args.metrics_host, identity())
    app = create_app(args.router, timeout_s=args.request_timeout_s or None, retry_after_s=args.retry_after_s,
                     credentials=tls.channel_credentials(identity()) if tls.calls_tls else None, tenants=tenants)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower(), timeout_graceful_shutdown=5,
                ssl_certfile=tls.cert, ssl_keyfile=tls.key)
