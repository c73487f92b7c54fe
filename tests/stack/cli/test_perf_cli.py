"""pdserve perf as a command: refusals with a message, and --explain."""

import json
import subprocess
import sys

from tests import REPO_ROOT

ROOT = REPO_ROOT


def _perf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pdserve.cli.main", "perf", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_perf_cli_refuses_with_a_message_and_explains():
    out = _perf("--deployment", "hardware=H20-141G", "--decode-batch", "32", "--context-len", "32768")
    assert out.returncode != 0 and "decode_batch:" in out.stderr and "Traceback" not in out.stderr
    out = _perf("--deployment", "hardware=H20-141G", "--decode-batch", "32", "--context-len", "2048", "--explain")
    assert out.returncode == 0, out.stderr
    assert "head_padding 4.00" in out.stdout and "ep_imbalance" in out.stdout and "GFLOP" in out.stdout
    report = json.loads(_perf("--decode-batch", "32", "--json").stdout)
    core = report["decode"]["explain"]["attention_core"]
    assert core["bound"] == "compute" and core["factors"]["head_padding"] == 4.0
