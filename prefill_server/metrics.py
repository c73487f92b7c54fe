"""What a prefill worker measures (its steps are the worker loop's: worker/metrics.py)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from pdserve.common.metrics import RPC_BUCKETS, TOKEN_COUNT_BUCKETS, WALL_REQUEST_BUCKETS

REQUESTS = Counter("pdserve_prefill_requests_total", "Prefill requests finished", ["outcome"])
PROMPT_TOKENS = Counter("pdserve_prefill_prompt_tokens_total", "Prompt tokens received")
# vLLM's prefix-cache pair, in tokens: hit rate = rate(hits) / rate(queries)
CACHE_QUERIES = Counter("pdserve_prefill_prefix_cache_queries_total", "Prompt tokens looked up in the prefix caches")
CACHE_HITS = Counter("pdserve_prefill_prefix_cache_hits_total", "Prompt tokens whose KV was reused (local or kvstore)")
QUEUE_SECONDS = Histogram("pdserve_prefill_queue_seconds", "Wall time from arrival to the first prefill step",
                          buckets=WALL_REQUEST_BUCKETS)
KV_SECONDS = Histogram("pdserve_prefill_kv_io_seconds", "Wall time fetching and storing KV blocks per request",
                       buckets=RPC_BUCKETS)
PROMPT_LEN = Histogram("pdserve_prefill_request_prompt_tokens", "Prompt length per request", buckets=TOKEN_COUNT_BUCKETS)
WAITING = Gauge("pdserve_prefill_num_requests_waiting", "Prompts waiting for (or in) prefill")
WAITING_TOKENS = Gauge("pdserve_prefill_num_tokens_waiting", "Prompt tokens still to compute")
KV_INTEGRITY_FAILURES = Counter("pdserve_prefill_kv_integrity_failures_total",
                                "Reused prompt blocks that failed their checksum or MAC (computed instead)")
