"""What the HTTP edge measures, by route and status."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from pdserve.common.metrics import WALL_REQUEST_BUCKETS

HTTP_REQUESTS = Counter("pdserve_http_requests_total", "HTTP requests answered, by route and status",
                        ["route", "status"])
HTTP_SECONDS = Histogram("pdserve_http_request_seconds", "Wall time of an HTTP request, streaming included",
                         ["route"], buckets=WALL_REQUEST_BUCKETS)
HTTP_INFLIGHT = Gauge("pdserve_http_requests_inflight", "HTTP requests being answered")
DISCONNECTS = Counter("pdserve_http_client_disconnects_total", "Requests whose client went away before the end")
