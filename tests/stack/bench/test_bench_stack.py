"""`pdserve bench serve` against a real stack on the tiny model: the result JSON, a sweep's plots, the comparison, and
clear errors (exit code 2, one line, no traceback) for a bad target or a bad dataset."""

import json
import os
import subprocess
import sys

import pytest

from pdserve.cli.main import main as pdserve_main
from tests import REPO_ROOT

ROOT = REPO_ROOT
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def pdserve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pdserve.cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, env=None if env is None else {**os.environ, **env})


@pytest.fixture(scope="module")
def stack(tiny_stack):
    return tiny_stack


def test_real_stack_result_json(stack, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = pdserve_main(["bench", "serve", "--target", stack.router_target, "--num-prompts", "8", "--input-len", "16:48",
                       "--output-len", "6", "--random-prefix-fraction", "0.5", "--request-rate", "50",
                       "--warmup", "1", "--disable-tqdm", "--save-result", str(out)])
    assert rc == 0
    block = capsys.readouterr().out
    assert "Successful requests:" in block and "modeled" in block
    data = json.loads(out.read_text())
    assert data["completed"] == 8 and data["failed"] == 0
    assert data["total_output_tokens"] == 8 * 6  # random prompts ignore EOS
    assert 8 * 16 <= data["total_input_tokens"] <= 8 * 48
    assert data["modeled_mean_ttft_ms"] > 0 and data["modeled_mean_tpot_ms"] > 0 and data["modeled_duration"] > 0
    assert data["mean_kv_fetch_ms"] > 0 and data["mean_kv_store_ms"] > 0
    assert {r["finish_reason"] for r in data["requests"]} == {"length"}
    assert all(r["server"]["e2e_modeled_s"] > 0 for r in data["requests"])


def test_builtin_chat_prompts_through_the_router(stack, capsys):
    assert pdserve_main(["bench", "serve", "--target", stack.router_target, "--dataset", "builtin", "--num-prompts", "6",
                         "--output-len", "4", "--max-concurrency", "3", "--disable-tqdm"]) == 0
    assert "Failed requests:                                 0" in capsys.readouterr().out


def test_sweep_draws_plots(stack, tmp_path, capsys):
    plots = tmp_path / "plots"
    rc = pdserve_main(["bench", "serve", "--target", stack.router_target, "--num-prompts", "4", "--input-len", "16",
                       "--output-len", "4", "--sweep", "concurrency:1,4", "--plot-dir", str(plots),
                       "--goodput", "ttft:5000", "--disable-tqdm", "--save-result", str(tmp_path / "s.json")])
    assert rc == 0
    table = capsys.readouterr().out
    assert "concurrency" in table and "goodput" in table
    for name in ("latency.png", "throughput.png", "distributions.png"):
        assert (plots / name).read_bytes()[:8] == PNG_MAGIC
    data = json.loads((tmp_path / "s.json").read_text())
    assert [p["max_concurrency"] for p in data["points"]] == [1, 4]
    assert all(p["completed"] == 4 for p in data["points"])


def test_compare_prints_one_table_with_the_kv_handoff(tiny_model_path, tmp_path):
    no_llama_server = {"PATH": os.path.dirname(sys.executable), "XDG_CACHE_HOME": str(tmp_path / "cache"),
                       "PDSERVE_LLAMA_SERVER": ""}
    out = pdserve("bench", "serve", "--compare", "--model", str(tiny_model_path), "--modes",
                  "in_process,disaggregated,disaggregated_insecure,llama_server",
                  "--num-prompts", "6", "--input-len", "32", "--output-len", "4", "--max-concurrency", "3",
                  "--disable-tqdm", "--save-result", str(tmp_path / "c.json"), "--prefill-flags", "--max-num-batched-tokens 16",
                  env=no_llama_server)
    assert out.returncode == 0, out.stderr
    # llama.cpp's server is not to be had here: its mode is skipped, saying how to get one, and the others still run
    assert "llama_server: skipped: no llama-server: pass --llama-server PATH" in out.stdout
    assert not any(line.startswith("llama_server ") for line in out.stdout.splitlines())
    assert "in_process" in out.stdout and "disaggregated" in out.stdout
    assert "; prefill flags: --max-num-batched-tokens 16" in out.stdout  # 32-token prompts in two steps
    assert "% of prefill compute" in out.stdout and "decode's KV fetch" in out.stdout
    cost = next(line for line in out.stdout.splitlines() if line.startswith("secured / insecure internal plane:"))
    assert "out tok/s" in cost and "stack CPU per output token" in cost
    # the CPU of the run by process: the stack's four beside the in-process engine's
    cpu = next(line for line in out.stdout.splitlines() if line.startswith("disaggregated CPU in the run:"))
    assert "x in-process's" in cpu and all(name in cpu for name in ("prefill-0", "decode-0", "kvstore-0", "router"))
    data = json.loads((tmp_path / "c.json").read_text())
    assert 3 <= data["disaggregated"]["decode_steps"] <= 18  # 6 requests, 3 decoded tokens each, 3 at a time
    assert data["disaggregated"]["stack_cpu_ms_per_token"] > 0 and data["disaggregated_insecure"]["completed"] == 6
    assert data["in_process"]["completed"] == 6 and data["disaggregated"]["completed"] == 6
    assert data["disaggregated"]["prefill_compute_s"] > 0
    # the same workload, so the same token counts in both modes
    assert data["in_process"]["total_output_tokens"] == data["disaggregated"]["total_output_tokens"] == 24
    assert data["in_process"]["total_input_tokens"] == data["disaggregated"]["total_input_tokens"] == 6 * 32


def test_bad_target_is_a_clear_error():
    out = pdserve("bench", "serve", "--target", "127.0.0.1:1", "--num-prompts", "2", "--disable-tqdm")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--target 127.0.0.1:1" in out.stderr and "UNAVAILABLE" in out.stderr
    out = pdserve("bench", "serve", "--base-url", "http://127.0.0.1:1/v1", "--disable-tqdm")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "cannot connect" in out.stderr


@pytest.mark.parametrize("args, message", [
    (["--dataset", "jsonl", "--dataset-path", "/nonexistent/prompts.jsonl"], "does not exist"),
    (["--dataset", "jsonl"], "--dataset jsonl needs --dataset-path"),
    (["--dataset", "trace", "--dataset-path", "{trace}"], "'input_length' must be a non-negative number"),
    (["--input-len", "64:8"], "--input-len: expected N or MIN:MAX"),
    (["--goodput", "ttft:fast"], "--goodput ttft: 'fast' is not a number"),
    (["--sweep", "speed:1,2"], "--sweep: 'speed' is not 'rate' or 'concurrency'"),
])
def test_bad_dataset_or_flag_is_a_clear_error(stack, tmp_path, args, message):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": "long", "output_length": 3, "hash_ids": []}\n')
    args = [a.replace("{trace}", str(trace)) for a in args]
    out = pdserve("bench", "serve", "--target", stack.router_target, "--num-prompts", "2", "--disable-tqdm", *args)
    assert out.returncode == 2, out.stdout
    assert "Traceback" not in out.stderr and message in out.stderr


def test_base_url_through_the_edge_keeps_the_modeled_column(long_stack, tmp_path, capsys):
    """vLLM's spellings against pdserve's own HTTP edge: --base-url without /v1, --endpoint, --random-input-len /
    --random-output-len, no --vocab-size (the edge lists it); pdserve's timings come through the edge's chunks."""
    out = tmp_path / "edge.json"
    rc = pdserve_main(["bench", "serve", "--base-url", long_stack.http_url, "--endpoint", "/v1/completions",
                       "--num-prompts", "4", "--random-input-len", "16", "--random-output-len", "5", "--disable-tqdm",
                       "--save-result", str(out)])
    assert rc == 0, capsys.readouterr()
    assert "modeled" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["completed"] == 4 and data["failed"] == 0 and data["total_output_tokens"] == 4 * 5
    assert data["modeled_mean_ttft_ms"] > 0 and data["modeled_mean_tpot_ms"] > 0
    assert all(r["server"]["e2e_modeled_s"] > 0 and r["server"]["ttft_wall_s"] > 0 for r in data["requests"])
