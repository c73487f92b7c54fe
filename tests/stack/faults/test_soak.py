"""``pdserve bench soak`` for a few seconds on the tiny model (the benchmark runs 30 minutes): it starts ``pdserve up``,
kills processes at random under load, and reports every answer token for token, what is left held, each process's
restarts and memory, and the plot. A soak that crashes after half an hour, or miscounts, is caught here."""

import json
import subprocess
import sys

from tests import REPO_ROOT
from tests.helpers import scaled

ROOT = REPO_ROOT


def test_a_short_soak_reports_faults_restarts_memory_and_no_lost_tokens(tiny_model_path, tmp_path):
    report, plot = tmp_path / "soak.json", tmp_path / "soak.png"
    run = subprocess.run([sys.executable, "-m", "pdserve.cli.main", "bench", "soak", "--model", str(tiny_model_path),
                          "--duration-s", "8", "--fault-every-s", "2", "--sample-s", "1", "--concurrency", "4",
                          "--prompts", "8", "--max-tokens", "16", "--json", str(report), "--plot", str(plot)],
                         cwd=ROOT, capture_output=True, text=True, timeout=scaled(300))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]  # nothing lost, duplicated, wrong or held
    got = json.loads(report.read_text())
    assert got["sent"] > 0 and got["answers"]["correct"] > 0
    assert got["leaked"] == [0, 0, 0]
    assert got["faults"], "the seeded fault schedule kills something within 8 s"
    assert set(got["handled"]) == {"resumed", "kv_recomputed"}  # counted over restarts (tests/unit/bench/test_soak_counts.py)
    # the supervisor started every process a fault hit again, and the soak waited for each to serve
    assert got["not_back"] == []
    assert sum(got["restarts"].values()) == len(got["faults"]), (got["restarts"], got["faults"])
    assert set(got["samples"]) >= {"router", "decode-0", "decode-1", "kvstore-0", "openai", "pdserve up"}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "still held at the end (leases, decode blocks + sequences, router requests): (0, 0, 0)" in run.stdout
