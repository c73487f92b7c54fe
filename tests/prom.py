"""A real Prometheus for the tests: start one on a free port, query it over its HTTP API."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

from pdserve.common.processes import stop_processes
from pdserve.common.readiness import http_ok, wait_for
from pdserve.launcher.ports import free_port

COMPARISON = re.compile(r"\s*(==|!=|>=|<=|>|<)\s*[0-9.eE+-]+\s*$")


def api(base_url: str, path: str, **params) -> dict:
    url = f"{base_url}/api/v1/{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as reply:
        body = json.load(reply)
    if body.get("status") != "success":
        raise AssertionError(f"{path} {params}: {body}")
    return body["data"]


def query(base_url: str, expr: str) -> list[dict]:
    """An instant query's result vector (each item: metric labels and [time, value])."""
    data = api(base_url, "query", query=expr)
    assert data["resultType"] == "vector", f"{expr}: {data['resultType']}"
    return data["result"]


def alert_subject(expr: str) -> str:
    """What an alert compares against its threshold: the expression without its trailing ``> 0.9``."""
    return COMPARISON.sub("", expr.strip())


class Prometheus:
    """``prometheus`` on a free loopback port with a fresh TSDB; stopped (and waited for) on exit."""

    def __init__(self, binary: str, config: Path, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "prometheus.log"
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        wait_for(lambda: http_ok(f"{self.url}/-/ready"), timeout_s, "prometheus ready", self.proc, self.log.read_text)

    def stop(self) -> None:
        stop_processes([self.proc])
