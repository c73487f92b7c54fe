"""Edge process: flags (with PDSERVE_* environment variables, like every service) and uvicorn.

Security follows the router's: ``--tls-ca`` verifies the router's TLS certificate (with ``--tls-cert`` / ``--tls-key``
the edge presents its certificate to the router and serves HTTPS itself), and a caller's ``Authorization: Bearer``
header travels on to the router, which checks it (a missing or wrong token is a 401 here).
"""

from __future__ import annotations

import uvicorn
from prometheus_client import start_http_server

from pdserve.common.config import service_parser
from pdserve.common.server import follow_parent, setup_logging
from pdserve.common.tls import configure_from_args
from pdserve.openai_server.app import create_app


def main(argv: list[str] | None = None) -> None:
    parser = service_parser("openai_server", 8000)
    parser.add_argument("--router", default="127.0.0.1:50050", help="router address HOST:PORT")
    parser.add_argument("--request-timeout-s", type=float, default=0.0,
                        help="deadline of each request at the router (0: none); past it the answer is a 504")
    parser.add_argument("--retry-after-s", type=int, default=1, help="Retry-After of a 429 (router at its limit)")
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    follow_parent()
    tls = configure_from_args(args)
    if args.metrics_port:  # /metrics is also on the HTTP port; this mirrors the other services' flag
        start_http_server(args.metrics_port, addr=args.host)
    app = create_app(args.router, timeout_s=args.request_timeout_s or None, retry_after_s=args.retry_after_s,
                     credentials=tls.channel_credentials() if tls.calls_tls else None)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower(), timeout_graceful_shutdown=5,
                ssl_certfile=tls.cert, ssl_keyfile=tls.key)
