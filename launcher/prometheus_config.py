"""A Prometheus scrape configuration for a stack started by the launcher (``pdserve up --metrics
--prometheus-config PATH``).

One job per kind of process (``pdserve-router``, ``pdserve-kvstore``, ``pdserve-prefill``, ``pdserve-decode``), each
target labelled with ``service`` and ``process`` (``prefill-1``...). The dashboards and alert rules in deploy/ only rely
on metric names, ``instance`` and ``job=~"pdserve.*"``, so the compose and Kubernetes configurations (which discover
targets by DNS or pod annotations) feed the same panels. On a stack with identities the pages are HTTPS and
Prometheus presents the stack's ``prometheus`` identity.
"""

from __future__ import annotations

import json
from pathlib import Path

from pdserve.launcher.stack import Stack

JOBS = {"router": "router", "kvstore": "kvstore", "prefill_server": "prefill", "decode_server": "decode",
        "openai_server": "openai"}


def scrape_config(stack: Stack, scrape_interval_s: float = 5.0, rule_files: list[str] | None = None) -> str:
    """The prometheus.yml text for ``stack`` (its processes must have metrics ports)."""
    jobs: dict[str, list[dict]] = {}
    for p in stack.processes:
        if not p.metrics_port:
            raise ValueError("metrics: the stack was planned without metrics ports (start it with --metrics)")
        service = JOBS[p.module]
        jobs.setdefault(service, []).append(
            {"targets": [f"{stack.spec.host}:{p.metrics_port}"], "labels": {"service": service, "process": p.name}})
    interval = f"{scrape_interval_s:g}s"
    lines = ["# Written by pdserve for the stack it started; Prometheus reads YAML, of which JSON values are a part.",
             "global:", f"  scrape_interval: {interval}", f"  evaluation_interval: {interval}"]
    if rule_files:
        lines.append("rule_files:")
        lines += [f"  - {json.dumps(str(Path(f).resolve()))}" for f in rule_files]
    lines.append("scrape_configs:")
    tls = []
    if not stack.spec.insecure_internal:
        ident = stack.identities.identity("prometheus")
        tls = ["    scheme: https", "    tls_config: " + json.dumps({"ca_file": ident.ca_path, "cert_file": ident.cert_path,
                                                                  "key_file": ident.key_path})]
    for service, static in jobs.items():
        lines += [f"  - job_name: pdserve-{service}", f"    static_configs: {json.dumps(static)}"] + tls
    return "\n".join(lines) + "\n"


def write_scrape_config(stack: Stack, path: str | Path, **kwargs) -> Path:
    path = Path(path)
    path.write_text(scrape_config(stack, **kwargs))
    return path
