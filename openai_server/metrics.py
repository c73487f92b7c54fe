"""What the HTTP edge measures, by route and status."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from pdserve.common.metrics import (
    MODELED_STEP_BUCKETS,
    WALL_REQUEST_BUCKETS,
    WALL_STEP_BUCKETS,
    ClockPair,
)

HTTP_REQUESTS = Counter("pdserve_http_requests_total", "HTTP requests answered, by route and status",
                        ["route", "status"])
HTTP_SECONDS = Histogram("pdserve_http_request_seconds", "Wall time of an HTTP request, streaming included",
                         ["route"], buckets=WALL_REQUEST_BUCKETS)
HTTP_INFLIGHT = Gauge("pdserve_http_requests_inflight", "HTTP requests being answered")
DISCONNECTS = Counter("pdserve_http_client_disconnects_total", "Requests whose client went away before the end")
LIMITED = Counter("pdserve_http_limited_total", "Requests or connections the edge refused or closed for a limit: edge "
                  "(requests in flight), tenant (one tenant's requests in flight), headers_deadline, body_deadline",
                  ["limit"])

# Request-level series where vLLM's users look for them (the edge's own /metrics), from each answer's usage and timings
TTFT = ClockPair("pdserve_http_time_to_first_token", "Time to the first token of a request")
TPOT = ClockPair("pdserve_http_time_per_output_token", "Mean time per output token after the first",
                 wall_buckets=WALL_STEP_BUCKETS, modeled_buckets=MODELED_STEP_BUCKETS)
E2E = ClockPair("pdserve_http_e2e_request_latency", "Time from the request's arrival at the router to its last token")
PROMPT_TOKENS = Counter("pdserve_http_prompt_tokens_total", "Prompt tokens of the requests answered")
GENERATION_TOKENS = Counter("pdserve_http_generation_tokens_total", "Tokens generated for the requests answered")


def observe_answer(usage, timings) -> None:
    """Record one finished request (its whole answer, or its stream's last chunk)."""
    TTFT.observe(timings.ttft_wall_s, timings.ttft_modeled_s)
    if usage.completion_tokens > 1:
        TPOT.observe(timings.tpot_wall_s, timings.tpot_modeled_s)
    E2E.observe(timings.e2e_wall_s, timings.e2e_modeled_s)
    PROMPT_TOKENS.inc(usage.prompt_tokens)
    GENERATION_TOKENS.inc(usage.completion_tokens)
