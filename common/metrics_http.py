"""The /metrics page of every service, over HTTPS with client certificates, that one caller cannot freeze.

prometheus_client's own HTTPS server wraps its listening socket, so the TLS handshake of each new connection runs
inside ``accept()`` on the one thread that serves every connection: a client that connects and sends nothing stops
every scrape until it leaves. Here ``accept()`` only accepts; each connection's handshake runs in that connection's
own thread, under a deadline for the whole exchange (a client that sends one byte at a time is cut off too), and
at most :data:`MAX_CONNECTIONS` connections are handled at once (more are closed
at once). After the handshake the caller's role (``spiffe://pdserve/<role>`` in its certificate) must be one that
reads metrics: :data:`METRICS_ROLES`; any other stack identity gets a 403.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from http.server import HTTPServer
from socketserver import ThreadingMixIn

from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.exposition import MetricsHandler

from pdserve.common.identity import Identity, role_from_spiffe

log = logging.getLogger(__name__)

METRICS_ROLES = frozenset({"prometheus", "admin"})
HANDSHAKE_TIMEOUT_S = 5.0  # per read; the whole exchange (handshake, request, page) gets CONNECTION_DEADLINE_S
CONNECTION_DEADLINE_S = 15.0
MAX_CONNECTIONS = 64

REFUSED = Counter("pdserve_metrics_connections_refused_total",
                  "connections to the /metrics port refused, by reason (handshake: failed or timed out; role: a "
                  "stack identity that may not read metrics; busy: too many connections at once)", ["reason"])


def peer_role(sock: ssl.SSLSocket) -> str | None:
    cert = sock.getpeercert() or {}
    uris = [value for kind, value in cert.get("subjectAltName", ()) if kind == "URI"]
    roles = [role_from_spiffe(u) for u in uris]
    return roles[0] if len(roles) == 1 else None


class _Handler(MetricsHandler):
    registry = REGISTRY

    def log_message(self, *args) -> None:
        pass


class MetricsServer(ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], context: ssl.SSLContext | None,
                 registry: CollectorRegistry = REGISTRY, roles: frozenset[str] = METRICS_ROLES,
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS) -> None:
        handler = type("Handler", (_Handler,), {"registry": registry})
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)
        self.context, self.roles, self.timeout_s = context, roles, handshake_timeout_s
        self.slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            REFUSED.labels("busy").inc()
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        """In the connection's own thread: the handshake (with its deadline), the role, then the page."""
        current = [request]
        watchdog = threading.Timer(max(self.timeout_s, CONNECTION_DEADLINE_S), _cut, current)
        watchdog.daemon = True
        watchdog.start()
        try:
            request.settimeout(self.timeout_s)
            if self.context is not None:
                try:
                    request = current[0] = self.context.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError):
                    REFUSED.labels("handshake").inc()
                    return
                if peer_role(request) not in self.roles:
                    REFUSED.labels("role").inc()
                    request.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
            self.finish_request(request, client_address)
        except OSError:
            pass
        finally:
            watchdog.cancel()
            self.shutdown_request(request)
            self.slots.release()


def _cut(sock: socket.socket) -> None:
    """Past the deadline: unblock the connection's thread wherever it waits."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def server_context(identity: Identity) -> ssl.SSLContext:
    """HTTPS under ``identity``, requiring a client certificate from the stack's CA."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(identity.cert_path, identity.key_path)
    context.load_verify_locations(cadata=identity.ca.decode())
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def start_metrics_http(port: int, host: str, identity: Identity | None = None, **kwargs) -> MetricsServer:
    """Serve /metrics on ``host:port`` in a daemon thread: HTTPS for the metrics roles under an identity, else
    plain HTTP (a stack run with --insecure-internal)."""
    server = MetricsServer((host, port), server_context(identity) if identity is not None else None, **kwargs)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
