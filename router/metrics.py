"""The router's request-level metrics, with vLLM's names and meanings where they exist, in both clocks.

Every request-level series carries ``model_name`` (the served model's id). Per-request TPOT
(``pdserve_request_time_per_output_token_seconds``: (e2e - TTFT) / (tokens - 1)) and the per-token inter-token latency
(``pdserve_inter_token_latency_seconds``, observed by the decode workers for every token) are separate metrics, as in
vLLM >= 0.10. Requests that end without a finish chunk are counted too: ``abort`` (the client went away) and ``error``
(a worker failed).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from pdserve.common.metrics import MODELED_STEP_BUCKETS, TOKEN_COUNT_BUCKETS, WALL_STEP_BUCKETS, ClockPair
from pdserve.engine.text.stop import FinishReason
from pdserve.v1 import common_pb2

M = ("model_name",)
FINISH_REASONS = tuple(r.value for r in FinishReason)  # stop, length, repetition, abort, error
REJECT_REASONS = ("invalid", "router_full", "workers_full", "tenant_limit", "unauthenticated")

REQUESTS = Counter("pdserve_request_success_total", "Requests finished, by finish reason (abort and error included)",
                   M + ("finished_reason",))
REJECTED = Counter("pdserve_request_rejected_total", "Requests refused before running, by reason", ["reason"])
RETRIES = Counter("pdserve_router_retries_total", "Requests moved to another worker after one failed", ["phase"])
ROUTED = Counter("pdserve_router_routing_decisions_total", "Requests sent to a worker, by phase, policy and worker",
                 ["phase", "policy", "worker"])
PROMPT_TOKENS = Counter("pdserve_prompt_tokens_total", "Prompt tokens of finished requests", M)
GENERATION_TOKENS = Counter("pdserve_generation_tokens_total", "Generated tokens of finished requests", M)
CACHED_TOKENS = Counter("pdserve_prefix_cache_hit_tokens_total", "Prompt tokens served from cached KV", M)
TTFT = ClockPair("pdserve_time_to_first_token", "Time to the first token", M)
TPOT = ClockPair("pdserve_request_time_per_output_token", "Per request: (e2e - TTFT) / (output tokens - 1)", M,
                 WALL_STEP_BUCKETS, MODELED_STEP_BUCKETS)
E2E = ClockPair("pdserve_e2e_request_latency", "Time of the whole request", M)
QUEUE = ClockPair("pdserve_request_queue_time", "Time waiting in worker queues (prefill, then decode admission)", M)
PREFILL = ClockPair("pdserve_request_prefill_time", "Time from the first schedule to the first token", M)
DECODE = ClockPair("pdserve_request_decode_time", "Time from the first token to the last", M)
PROMPT_LEN = Histogram("pdserve_request_prompt_tokens", "Prompt tokens per request", M, buckets=TOKEN_COUNT_BUCKETS)
GEN_LEN = Histogram("pdserve_request_generation_tokens", "Generated tokens per request", M,
                    buckets=TOKEN_COUNT_BUCKETS)
INFLIGHT = Gauge("pdserve_num_requests_inflight", "Requests the router is serving")


def init_labels(model_name: str, prefill_targets: list[str], decode_targets: list[str], policy: str) -> None:
    """Create every label combination up front: a counter that was never hit still reads 0, not "no data"."""
    for reason in FINISH_REASONS:
        REQUESTS.labels(model_name, reason)
    for reason in REJECT_REASONS:
        REJECTED.labels(reason)
    for phase in ("prefill", "lease", "decode", "resume"):
        RETRIES.labels(phase)
    for t in prefill_targets:
        ROUTED.labels("prefill", policy, t)
    for t in decode_targets:
        ROUTED.labels("decode", "least_kv_usage", t)
    for metric in (PROMPT_TOKENS, GENERATION_TOKENS, CACHED_TOKENS, PROMPT_LEN, GEN_LEN):
        metric.labels(model_name)
    for pair in (TTFT, TPOT, E2E, QUEUE, PREFILL, DECODE):
        pair.touch(model_name)


def record_unfinished(model_name: str, reason: str) -> None:
    """A request that ended without a finish chunk: ``abort`` or ``error``."""
    REQUESTS.labels(model_name, reason).inc()


def record_finished(model_name: str, reason: str, usage: common_pb2.Usage, t: common_pb2.Timings,
                    prefill_queue_wall_s: float, prefill_queue_modeled_s: float, count_prompt: bool = True) -> None:
    """Everything the router counts when a request (or one of its samples) ends with a finish reason; the prompt
    of an n-sample request counts once (``count_prompt`` for sample 0 only)."""
    m = model_name
    REQUESTS.labels(m, reason).inc()
    GENERATION_TOKENS.labels(m).inc(usage.completion_tokens)
    if count_prompt:
        PROMPT_TOKENS.labels(m).inc(usage.prompt_tokens)
        CACHED_TOKENS.labels(m).inc(usage.cached_prompt_tokens)
        PROMPT_LEN.labels(m).observe(usage.prompt_tokens)
    GEN_LEN.labels(m).observe(usage.completion_tokens)
    TTFT.observe(t.ttft_wall_s, t.ttft_modeled_s, m)
    E2E.observe(t.e2e_wall_s, t.e2e_modeled_s, m)
    QUEUE.observe(t.queue_wall_s, t.queue_modeled_s, m)
    PREFILL.observe(max(0.0, t.ttft_wall_s - prefill_queue_wall_s), max(0.0, t.ttft_modeled_s - prefill_queue_modeled_s),
                    m)
    DECODE.observe(t.e2e_wall_s - t.ttft_wall_s, t.e2e_modeled_s - t.ttft_modeled_s, m)
    if usage.completion_tokens > 1:
        TPOT.observe(t.tpot_wall_s, t.tpot_modeled_s, m)
