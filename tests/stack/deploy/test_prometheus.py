"""The dashboard and the alert rules against a real Prometheus scraping a real stack started by ``pdserve up``.

Every PromQL expression of the provisioned dashboard and of the alert rules must return data: a typo or a metric that
does not exist (or lost a label) fails here. Alert rules are also checked and unit-tested with promtool.
"""

from __future__ import annotations

import json
import random
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from pdserve.client.client import PdserveClient
from pdserve.launcher.ports import METRICS_OFFSETS
from tests import REPO_ROOT
from tests.helpers import pdserve_up, require_tool, wait_until
from tests.prom import Prometheus, alert_subject, query

ROOT = REPO_ROOT
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
sys.path.insert(0, str(DEPLOY / "grafana"))
import make_dashboard  # noqa: E402  (deploy/grafana/make_dashboard.py, a script beside the JSON it writes)

RATE_INTERVAL = "30s"  # what Grafana's $__rate_interval becomes at a 1 s scrape interval


def rule_expressions() -> dict[str, str]:
    text = RULES.read_text()
    names = re.findall(r"^\s+- alert: (\S+)", text, re.M)
    exprs = re.findall(r"^\s+expr: (.+)$", text, re.M)
    assert len(names) == len(exprs) > 0
    return dict(zip(names, exprs))


def test_alert_rules_pass_promtool_check_and_unit_tests():
    promtool = require_tool("promtool", "prometheus")
    for args in (["check", "rules", str(RULES)], ["test", "rules", "alerts_test.yml"]):
        out = subprocess.run([promtool, *args], capture_output=True, text=True, cwd=RULES.parent)
        assert out.returncode == 0, out.stdout + out.stderr


def test_dashboard_json_is_the_generator_output_and_lays_out_cleanly():
    committed = (DEPLOY / "grafana" / "dashboards" / "pdserve.json").read_text()
    assert committed == make_dashboard.render(), "run: python deploy/grafana/make_dashboard.py"
    board = json.loads(committed)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in board["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['title']!r} overlaps another"
                cells.add((x, y))
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "prometheus" and p["targets"]
    # wall and modeled side by side: every "(wall)" panel has its "(modeled)" twin right of it
    titles = [p["title"] for p in board["panels"]]
    for i, t in enumerate(titles):
        if t.endswith("(wall)"):
            assert titles[i + 1] == t.replace("(wall)", "(modeled)")


def free_base_port() -> int:
    """A base port whose fixed metrics ports (1 kvstore, 2 prefill, 2 decode, router) are all free."""
    for _ in range(50):
        base = random.randrange(20000, 60000, 100)
        ports = [base + off + i for off, n in ((METRICS_OFFSETS["router"][0], 1), (METRICS_OFFSETS["kvstore"][0], 1),
                                               (METRICS_OFFSETS["prefill_server"][0], 2),
                                               (METRICS_OFFSETS["decode_server"][0], 2)) for i in range(n)]
        try:
            for port in ports:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free block of metrics ports")


@pytest.fixture(scope="module")
def prometheus_on_stack(tiny_model_path, tmp_path_factory):
    """``pdserve up --metrics --prometheus-config`` with 2 prefill and 2 decode workers, and Prometheus on it."""
    binary = require_tool("prometheus", "prometheus")
    work = tmp_path_factory.mktemp("prometheus")
    config = work / "prometheus.yml"
    base = free_base_port()
    up, printed = pdserve_up(["--model", str(tiny_model_path), "--prefill", "2", "--decode", "2", "--port", "0",
                              "--metrics", "--metrics-base-port", str(base), "--prometheus-config", str(config),
                              "--prometheus-rules", str(RULES), "--prometheus-scrape-interval-s", "1"],
                             until="prometheus scrape config:")
    prometheus = None
    try:
        router = re.search(r"^router\s+(\S+)\s+metrics https://127.0.0.1:(\d+)/", "".join(printed), re.M)
        assert router and int(router.group(2)) == base  # the router's metrics port is the base port
        prometheus = Prometheus(binary, config, work)
        prometheus.wait_ready()
        yield prometheus, router.group(1)
    finally:
        if prometheus is not None:
            prometheus.stop()
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()


def test_every_dashboard_and_alert_expression_returns_data(prometheus_on_stack):
    prom, router = prometheus_on_stack
    wait_until(lambda: len(query(prom.url, 'up{job=~"pdserve.*"} == 1')) == 6, 30, "all 6 targets up")
    rules = prom_rules(prom.url)
    assert {r["name"] for r in rules} == set(rule_expressions()) and all(r["health"] == "ok" for r in rules)
    with PdserveClient(router) as client:
        for i in range(6):
            client.complete(token_ids=list(range(3, 40 + i % 3)), max_tokens=6, temperature=0)
    wait_until(lambda: query(prom.url, "sum(pdserve_request_success_total)")[0]["value"][1] == "6", 30,
               "Prometheus scraped all 6 finished requests")
    loaded_at = time.time()  # two more scrapes of every target: each rate() window holds samples after the load
    wait_until(lambda: float(query(prom.url, 'min(timestamp(up{job=~"pdserve.*"}))')[0]["value"][1]) > loaded_at + 1,
               30, "two scrapes of every target after the load")
    board = make_dashboard.dashboard()
    empty, not_finite = [], []
    for expr in make_dashboard.expressions(board):
        result = query(prom.url, expr.replace("$__rate_interval", RATE_INTERVAL))
        if not result:
            empty.append(expr)
        elif "time_to_first_token" in expr and not any(v["value"][1] not in ("NaN", "+Inf") for v in result):
            not_finite.append(expr)
    for name, expr in rule_expressions().items():
        if not query(prom.url, alert_subject(expr)):
            empty.append(f"{name}: {alert_subject(expr)}")
    assert not empty, "no data for:\n" + "\n".join(empty)
    assert not not_finite, "no finite quantile for:\n" + "\n".join(not_finite)


def prom_rules(url: str) -> list[dict]:
    from tests.prom import api

    return [r for g in api(url, "rules")["groups"] for r in g["rules"]]
