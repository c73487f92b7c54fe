"""The router's request-level metrics (vLLM's names and meanings where they exist), in both clocks."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from common.metrics import E2E_BUCKETS, TOKEN_COUNT_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS
from protos import common_pb2

REQUESTS = Counter("pdserve_request_success_total", "Requests finished, by finish reason", ["finished_reason"])
REJECTED = Counter("pdserve_request_rejected_total", "Requests refused before running", ["reason"])
RETRIES = Counter("pdserve_router_retries_total", "Requests moved to another worker after one failed", ["phase"])
PROMPT_TOKENS = Counter("pdserve_prompt_tokens_total", "Prompt tokens of finished requests")
GENERATION_TOKENS = Counter("pdserve_generation_tokens_total", "Generated tokens")
CACHED_TOKENS = Counter("pdserve_prefix_cache_hit_tokens_total", "Prompt tokens served from cached KV")
TTFT = Histogram("pdserve_time_to_first_token_seconds", "Wall time to the first token", buckets=TTFT_BUCKETS)
TPOT = Histogram("pdserve_time_per_output_token_seconds", "Wall time per output token after the first",
                 buckets=TPOT_BUCKETS)
E2E = Histogram("pdserve_e2e_request_latency_seconds", "Wall time of the whole request", buckets=E2E_BUCKETS)
TTFT_MODELED = Histogram("pdserve_time_to_first_token_modeled_seconds", "Modeled time to the first token",
                         buckets=TTFT_BUCKETS)
TPOT_MODELED = Histogram("pdserve_time_per_output_token_modeled_seconds", "Modeled time per output token",
                         buckets=TPOT_BUCKETS)
E2E_MODELED = Histogram("pdserve_e2e_request_latency_modeled_seconds", "Modeled time of the whole request",
                        buckets=E2E_BUCKETS)
PROMPT_LEN = Histogram("pdserve_request_prompt_tokens", "Prompt tokens per request", buckets=TOKEN_COUNT_BUCKETS)
GEN_LEN = Histogram("pdserve_request_generation_tokens", "Generated tokens per request", buckets=TOKEN_COUNT_BUCKETS)
INFLIGHT = Gauge("pdserve_num_requests_inflight", "Requests the router is serving")


def record_finished(reason: str, usage: common_pb2.Usage, t: common_pb2.Timings, count_prompt: bool = True) -> None:
    """Everything the router counts when a request (or one of its samples) ends; the prompt of an n-sample
    request counts once (``count_prompt`` for sample 0 only)."""
    REQUESTS.labels(reason).inc()
    GENERATION_TOKENS.inc(usage.completion_tokens)
    if count_prompt:
        PROMPT_TOKENS.inc(usage.prompt_tokens)
        CACHED_TOKENS.inc(usage.cached_prompt_tokens)
        PROMPT_LEN.observe(usage.prompt_tokens)
    GEN_LEN.observe(usage.completion_tokens)
    TTFT.observe(t.ttft_wall_s)
    E2E.observe(t.e2e_wall_s)
    TTFT_MODELED.observe(t.ttft_modeled_s)
    E2E_MODELED.observe(t.e2e_modeled_s)
    if usage.completion_tokens > 1:
        TPOT.observe(t.tpot_wall_s)
        TPOT_MODELED.observe(t.tpot_modeled_s)
