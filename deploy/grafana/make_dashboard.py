"""Writes deploy/grafana/dashboards/pdserve.json, the provisioned Grafana dashboard.

Run: ``python deploy/grafana/make_dashboard.py``.

The dashboard is generated so that each row is a short, reviewable list of PromQL expressions; tests check that the
committed JSON is this script's output and run every expression against a real Prometheus scraping a real stack.
Wall (this machine's CPU) and modeled (the modeled GPU deployment) clocks sit side by side: left and right.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards" / "pdserve.json"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
RATE = "$__rate_interval"


def quantiles(metric: str, by: str = "") -> list[tuple[str, str]]:
    """p50/p90/p99 of a histogram, as histogram_quantile over the summed bucket rates."""
    group = f"le, {by}" if by else "le"
    suffix = f" {{{{{by}}}}}" if by else ""
    return [(f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket[{RATE}])))", f"p{int(q * 100)}{suffix}")
            for q in (0.5, 0.9, 0.99)]


def clocks(title: str, metric: str, by: str = "") -> list[dict]:
    """The same histogram in both clocks: wall on the left, modeled on the right."""
    return [panel(f"{title} (wall)", quantiles(f"{metric}_seconds", by), "s"),
            panel(f"{title} (modeled)", quantiles(f"{metric}_modeled_seconds", by), "s")]


def panel(title: str, targets: list[tuple[str, str]], unit: str = "short", width: int = 12,
          kind: str = "timeseries") -> dict:
    table = {"format": "table", "instant": True} if kind == "table" else {}  # a table shows the latest values
    return {"type": kind, "title": title, "datasource": DATASOURCE, "gridPos": {"w": width, "h": 8},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": chr(65 + i), **table}
                        for i, (expr, legend) in enumerate(targets)]}


ROWS: list[tuple[str, list[dict]]] = [
    ("Overview", [
        panel("Finished requests by reason", [
            ("sum by (finished_reason) (rate(pdserve_request_success_total[$__rate_interval]))", "{{finished_reason}}")],
            "reqps", 8),
        panel("Token throughput", [
            ("sum(rate(pdserve_prompt_tokens_total[$__rate_interval]))", "prompt"),
            ("sum(rate(pdserve_generation_tokens_total[$__rate_interval]))", "generation")], "short", 8),
        panel("Requests in flight at the router", [("sum(pdserve_num_requests_inflight)", "in flight")], "short", 8),
        panel("Modeled deployment per process", [
            ("pdserve_deployment_info", "{{service}} {{perf_model}} {{perf_gpus}}x{{perf_hardware}} "
                                        "TP{{perf_tp}} EP{{perf_ep}} {{perf_software}}")], "short", 24, "table"),
    ]),
    ("Latency: wall | modeled", [
        *clocks("Time to first token", "pdserve_time_to_first_token"),
        *clocks("Inter-token latency (per token)", "pdserve_inter_token_latency"),
        *clocks("Time per output token (per request)", "pdserve_request_time_per_output_token"),
        *clocks("End-to-end latency", "pdserve_e2e_request_latency"),
    ]),
    ("Request phases: wall | modeled", [
        *clocks("Queue time", "pdserve_request_queue_time"),
        *clocks("Prefill time", "pdserve_request_prefill_time"),
        *clocks("Decode time", "pdserve_request_decode_time"),
        panel("Step time p50 by phase (wall)", [
            ("histogram_quantile(0.5, sum by (le, phase) (rate(pdserve_step_wall_seconds_bucket[$__rate_interval])))",
             "{{phase}}")], "s"),
        panel("Step time p50 by phase (modeled)", [
            ("histogram_quantile(0.5, sum by (le, phase) (rate(pdserve_step_modeled_seconds_bucket"
             "[$__rate_interval])))", "{{phase}}")], "s"),
    ]),
    ("Workers", [
        panel("Running requests per decode worker", [("pdserve_decode_num_requests_running", "{{instance}}")],
              "short", 8),
        panel("Waiting requests per worker", [
            ("pdserve_prefill_num_requests_waiting", "prefill {{instance}}"),
            ("pdserve_decode_num_requests_waiting", "decode {{instance}}")], "short", 8),
        panel("Prefill queued tokens per worker", [("pdserve_prefill_num_tokens_waiting", "{{instance}}")],
              "short", 8),
        panel("KV cache usage per decode worker", [("pdserve_decode_kv_cache_usage_perc", "{{instance}}")],
              "percentunit", 8),
        panel("Preemptions", [
            ("sum by (instance) (rate(pdserve_decode_num_preemptions_total[$__rate_interval]))", "{{instance}}")],
              "ops", 8),
        panel("Pacing lag (wall seconds overrun per second)", [
            ("sum by (instance, phase) (rate(pdserve_pacing_lag_seconds_total[$__rate_interval]))",
             "{{phase}} {{instance}}"),
            ("sum by (instance, phase) (rate(pdserve_pacing_lagged_steps_total[$__rate_interval]))",
             "lagged steps/s {{phase}} {{instance}}")], "short", 8),
    ]),
    ("Prefix cache and KV store", [
        panel("Prefix cache hit rate (tokens)", [
            ("sum(rate(pdserve_prefill_prefix_cache_hits_total[$__rate_interval])) / "
             "sum(rate(pdserve_prefill_prefix_cache_queries_total[$__rate_interval]))", "hit rate")],
              "percentunit", 8),
        panel("KV store bytes", [
            ("sum by (instance) (pdserve_kvstore_used_bytes)", "used {{instance}}"),
            ("sum by (instance) (pdserve_kvstore_capacity_bytes)", "capacity {{instance}}")], "bytes", 8),
        panel("KV store leases and leased blocks", [
            ("sum by (instance) (pdserve_kvstore_leases)", "leases {{instance}}"),
            ("sum by (instance) (pdserve_kvstore_leased_blocks)", "leased blocks {{instance}}")], "short", 8),
        panel("KV store evictions and checksum failures", [
            ("sum(rate(pdserve_kvstore_evictions_total[$__rate_interval]))", "evictions/s"),
            ("sum(increase(pdserve_kvstore_checksum_failures_total[$__rate_interval]))", "checksum failures")],
              "short", 8),
        panel("KV store hits and misses (blocks/s)", [
            ("sum by (op) (rate(pdserve_kvstore_hits_total[$__rate_interval]))", "hits {{op}}"),
            ("sum by (op) (rate(pdserve_kvstore_misses_total[$__rate_interval]))", "misses {{op}}")], "short", 8),
        panel("KV store operation latency p99", [
            ("histogram_quantile(0.99, sum by (le, op) (rate(pdserve_kvstore_operation_seconds_bucket"
             "[$__rate_interval])))", "{{op}}")], "s", 8),
    ]),
    ("Router", [
        panel("Retries by phase", [
            ("sum by (phase) (rate(pdserve_router_retries_total[$__rate_interval]))", "{{phase}}")], "ops", 8),
        panel("Rejections by reason", [
            ("sum by (reason) (rate(pdserve_request_rejected_total[$__rate_interval]))", "{{reason}}")], "ops", 8),
        panel("Routing decisions per worker", [
            ("sum by (phase, policy, worker) (rate(pdserve_router_routing_decisions_total[$__rate_interval]))",
             "{{phase}} {{policy}} {{worker}}")], "reqps", 8),
        panel("RPC latency p99 by method", [
            ("histogram_quantile(0.99, sum by (le, grpc_method) (rate(grpc_server_handling_seconds_bucket"
             "[$__rate_interval])))", "{{grpc_method}}")], "s", 12),
        panel("RPCs by status code", [
            ("sum by (grpc_method, grpc_code) (rate(grpc_server_handled_total[$__rate_interval]))",
             "{{grpc_method}} {{grpc_code}}")], "ops", 12),
    ]),
]


def dashboard() -> dict:
    """Lay the rows out on Grafana's 24-column grid, left to right, top to bottom."""
    panels, y, next_id = [], 0, 1
    for title, row_panels in ROWS:
        panels.append({"type": "row", "title": title, "collapsed": False, "id": next_id,
                       "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []})
        next_id, y, x = next_id + 1, y + 1, 0
        for p in row_panels:
            w, h = p["gridPos"]["w"], p["gridPos"]["h"]
            if x + w > 24:
                x, y = 0, y + h
            panels.append(dict(p, id=next_id, gridPos={"x": x, "y": y, "w": w, "h": h}))
            next_id, x = next_id + 1, x + w
        y += 8
    return {"uid": "pdserve", "title": "pdserve: disaggregated prefill/decode", "tags": ["pdserve", "llm"],
            "timezone": "browser", "schemaVersion": 39, "version": 1, "editable": True, "refresh": "10s",
            "time": {"from": "now-30m", "to": "now"}, "templating": {"list": []}, "annotations": {"list": []},
            "panels": panels}


def expressions(board: dict) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT} ({len(expressions(dashboard()))} expressions)", file=sys.stderr)
