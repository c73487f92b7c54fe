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
LIMITED = Counter("pdserve_http_limited_total", "Requests or connections the edge refused or closed for a limit: edge "
                  "(requests in flight), tenant (one tenant's requests in flight), headers_deadline, body_deadline",
                  ["limit"])
