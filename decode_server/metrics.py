"""What a decode worker measures (its steps and inter-token latency are the worker loop's: worker/metrics.py)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from pdserve.common.metrics import RPC_BUCKETS

REQUESTS = Counter("pdserve_decode_requests_total", "Decode requests finished", ["finished_reason"])
GENERATED = Counter("pdserve_decode_generation_tokens_total", "Tokens streamed by decode")
KV_FETCH = Histogram("pdserve_decode_kv_fetch_seconds", "Wall time fetching a request's KV blocks",
                     buckets=RPC_BUCKETS)
RUNNING = Gauge("pdserve_decode_num_requests_running", "Sequences in the running batch")
WAITING = Gauge("pdserve_decode_num_requests_waiting", "Sequences waiting for admission")
KV_USAGE = Gauge("pdserve_decode_kv_cache_usage_perc", "Fraction of the KV block budget in use")
PREEMPTIONS = Counter("pdserve_decode_num_preemptions", "Sequences preempted (KV dropped, recomputed later)")
KV_LOAD_FAILURES = Counter("pdserve_decode_kv_load_failures_total",
                           "KV fetches from the kvstore that failed, by what the worker did about it", ["policy"])
PREFETCHES = Counter("pdserve_decode_kv_prefetch_total",
                     "KV prefetches (started while prefill runs), by how they ended: taken whole by the Decode call "
                     "that followed (adopted), taken with the rest fetched by that call (partial), dropped (cancelled "
                     "or expired before a Decode call took them), failed", ["outcome"])
PREFETCH_OUTCOMES = ("adopted", "partial", "dropped", "failed")
# The completeness rule (stop_when_complete; requests it ended: REQUESTS{finished_reason="complete"})
COMPLETION_CHECKS = Counter("pdserve_decode_completion_checks_total",
                            "Completeness checks run: the verification turn forwarded on a fork of a sequence")
COMPLETION_CHECK_TOKENS = Counter("pdserve_decode_completion_check_tokens_total",
                                  "Tokens the completeness checks ran through the model (extra forward tokens)")
COMPLETION_TOKENS_LEFT = Counter("pdserve_decode_completion_tokens_left_total",
                                 "max_tokens minus the tokens generated, over the requests the completeness check "
                                 "ended: the most it saved (EOS might have come sooner)")
