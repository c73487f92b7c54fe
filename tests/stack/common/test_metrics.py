"""Metrics: bucket resolution in both clocks, fixed metrics ports and the scrape config, and every service's /metrics
page passing ``promtool check metrics`` with the series operators need."""

from __future__ import annotations

import bisect
import subprocess
import urllib.request

import pytest

from pdserve.client.client import PdserveClient
from pdserve.common.metrics import MODELED_REQUEST_BUCKETS, MODELED_STEP_BUCKETS, RPC_BUCKETS
from pdserve.kvstore import shm as kv_shm
from pdserve.launcher.ports import metrics_port_for
from pdserve.launcher.prometheus_config import scrape_config
from pdserve.launcher.stack import Stack, StackSpec
from tests.helpers import require_tool, start_stack


def bucket_of(buckets, value: float) -> int:
    return bisect.bisect_left(buckets, value)


def test_modeled_buckets_tell_apart_steps_and_place_requests_within_ten_percent():
    # the pacing benchmark's decode steps at concurrency 1 and 16
    assert bucket_of(MODELED_STEP_BUCKETS, 0.0109) != bucket_of(MODELED_STEP_BUCKETS, 0.0184)
    # a 102 ms modeled e2e lands in a bucket whose edges are within 10% of it (p50 reads 100..110 ms, not ~200 ms)
    i = bucket_of(MODELED_REQUEST_BUCKETS, 0.102)
    lo, hi = MODELED_REQUEST_BUCKETS[i - 1], MODELED_REQUEST_BUCKETS[i]
    assert lo >= 0.102 * 0.9 and hi <= 0.102 * 1.1
    assert RPC_BUCKETS[0] == 0.0001  # kvstore RPCs are sub-millisecond


def test_fixed_metrics_ports_are_base_plus_offset():
    stack = Stack(StackSpec(n_prefill=2, n_decode=2, metrics=True, metrics_base_port=31000))
    ports = {p.name: p.metrics_port for p in stack.processes}
    assert ports == {"kvstore-0": 31010, "prefill-0": 31020, "prefill-1": 31021, "decode-0": 31050,
                     "decode-1": 31051, "router": 31000}
    assert "metrics https://127.0.0.1:31021/metrics" in stack.describe()  # HTTPS: the stack has identities
    with pytest.raises(ValueError, match="metrics_base_port"):
        metrics_port_for(31000, "kvstore", 10)
    with pytest.raises(ValueError, match="outside 1..65535"):
        metrics_port_for(65500, "decode_server", 0)


def test_scrape_config_passes_promtool(tmp_path):
    promtool = require_tool("promtool", "prometheus")
    stack = Stack(StackSpec(n_prefill=2, metrics=True, metrics_base_port=31000))
    path = tmp_path / "prometheus.yml"
    path.write_text(scrape_config(stack, scrape_interval_s=2))
    out = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    text = path.read_text()
    for job in ("pdserve-router", "pdserve-kvstore", "pdserve-prefill", "pdserve-decode"):
        assert f"job_name: {job}" in text
    assert '"127.0.0.1:31021"' in text and '"process": "prefill-1"' in text


@pytest.fixture(scope="module")
def metrics_stack(tiny_model_path):
    # kv_blocks=12: long generations preempt, so the preemption counter moves
    stack = start_stack(model=str(tiny_model_path), n_prefill=2, metrics=True)
    try:
        with PdserveClient(stack.router_target) as client:
            for i in range(4):
                client.complete(token_ids=list(range(3, 40 + i)), max_tokens=8, temperature=0)
            client.complete(token_ids=list(range(3, 40)), max_tokens=8, temperature=0)  # a prefix-cache hit
        yield stack
    finally:
        stack.stop()


def page(stack, p) -> str:
    context = stack.identities.identity("prometheus").client_ssl_context()
    return urllib.request.urlopen(f"https://127.0.0.1:{p.metrics_port}/metrics", timeout=5,
                                  context=context).read().decode()


def test_every_metrics_page_passes_promtool(metrics_stack):
    promtool = require_tool("promtool", "prometheus")
    for p in metrics_stack.processes:
        out = subprocess.run([promtool, "check", "metrics"], input=page(metrics_stack, p), capture_output=True,
                             text=True)
        assert out.returncode == 0, f"{p.name}: {out.stdout}{out.stderr}"


def samples(stack, p, name: str) -> dict[tuple, float]:
    return {labels: v for (n, labels), v in stack.scrape(p).items() if n == name}


def test_operator_series_exist_with_their_meanings(metrics_stack):
    s = metrics_stack
    router = s.router
    info = {p.name: dict(next(iter(samples(s, p, "pdserve_deployment_info")))) for p in s.processes}
    assert info["router"]["service"] == "router" and info["router"]["model_fingerprint"]
    assert info["decode-0"]["perf_hardware"] == "H20-141G" and info["decode-0"]["perf_tp"] == "8"
    assert info["decode-0"]["model_fingerprint"] == info["router"]["model_fingerprint"]
    assert info["kvstore-0"]["service"] == "kvstore"
    model = info["router"]["model_name"]
    assert model
    # request-level series carry model_name; per-request TPOT and per-token ITL are different metrics
    m = (("model_name", model),)
    for name in ("pdserve_time_to_first_token_seconds_count", "pdserve_time_to_first_token_modeled_seconds_count",
                 "pdserve_request_time_per_output_token_seconds_count", "pdserve_request_queue_time_seconds_count",
                 "pdserve_request_prefill_time_modeled_seconds_count", "pdserve_request_decode_time_seconds_count"):
        assert samples(s, router, name)[m] == 5, name
    itl = sum(samples(s, d, "pdserve_inter_token_latency_modeled_seconds_count")[m] for d in s.decodes)
    assert itl == 5 * 6  # 8 tokens each: the first from prefill, the second starts decode, 6 gaps on decode
    assert samples(s, router, "pdserve_request_success_total")[(("finished_reason", "length"),) + m] == 5
    assert samples(s, router, "pdserve_request_success_total")[(("finished_reason", "error"),) + m] == 0
    decisions = samples(s, router, "pdserve_router_routing_decisions_total")
    assert sum(v for k, v in decisions.items() if ("phase", "prefill") in k and ("policy", "cache_aware") in k) == 5
    # prefix cache: the repeated prompt hit at least its first full block
    hits = sum(samples(s, p, "pdserve_prefill_prefix_cache_hits_total")[()] for p in s.prefills)
    queries = sum(samples(s, p, "pdserve_prefill_prefix_cache_queries_total")[()] for p in s.prefills)
    assert hits >= 16 and queries == sum(range(37, 41)) + 37
    kv = s.kvstores[0]
    assert samples(s, kv, "pdserve_kvstore_hits_total")[(("op", "get"),)] > 0
    assert samples(s, kv, "pdserve_kvstore_operation_seconds_count")[(("op", "put"),)] == 5
    assert samples(s, kv, "pdserve_kvstore_leases")[()] == 0
    assert samples(s, kv, "pdserve_kvstore_used_bytes")[()] > 0
    # pdserve up moves the blocks through shared memory by default (its processes share the host): Puts and Gets
    if kv_shm.available():
        shm = sum(samples(s, kv, "pdserve_kvstore_shm_bytes_total").values())
        assert shm >= 2 * samples(s, kv, "pdserve_kvstore_used_bytes")[()] > 0
    assert ("pdserve_decode_num_preemptions_total", ()) in s.scrape(s.decodes[0])


def test_a_prefill_worker_shows_its_step_and_forward_budgets_apart(metrics_stack):
    """The step budget composes and prices steps (modeled clock); the forward budget is what this machine computes
    at once: both are on the page, and every prompt forward is counted."""
    for p in metrics_stack.prefills:
        budgets = {dict(k)["budget"]: v for k, v in samples(metrics_stack, p, "pdserve_token_budget").items()}
        assert budgets == {"step": 2048, "forward": 512}
    forwards = sum(samples(metrics_stack, p, "pdserve_prompt_forwards_total")[()] for p in metrics_stack.prefills)
    assert forwards >= 5  # one forward a request at least (the prompts fit one forward each)
