"""pdserve plan --request-rate: the cheapest deployment that holds the rate (or the smallest beyond --max-nodes),
flags the plan cannot honour refused, the one goodput definition, and the simulate header."""

from __future__ import annotations

import json

import pytest

from pdserve.cli.main import main as cli_main
from pdserve.perfmodel.deployment import parse_deployment
from pdserve.sim.plan_checks import parse_duration
from pdserve.sim.plan_file import load_plan
from pdserve.workload.goodput import NAME as GOODPUT_NAME
from pdserve.workload.record import RequestRecord

SMALL = ["plan", "--num-prompts", "40", "--input-len", "200:800", "--output-len", "20:60", "--hardware", "H20-141G",
         "--no-dp-attention", "--instance-sizes", "1", "--ttft-p90", "2s", "--tpot-p90", "60ms"]


def test_the_rate_is_honoured_and_the_cheapest_holder_wins(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert cli_main(SMALL + ["--max-nodes", "3", "--request-rate", "5", "--save-result", str(out), "--emit",
                             "sglang,compose", "--out", str(tmp_path / "emitted")]) == 0
    assert (tmp_path / "emitted" / "sglang" / "router.sh").exists()
    assert (tmp_path / "emitted" / "compose" / "docker-compose.plan.yml").exists()
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["mode"] == "target_rate" and data["request_rate"] == 5
    tried = data["tried"]
    assert [t["gpus"] for t in tried] == sorted(t["gpus"] for t in tried)  # cheapest first
    win = data["winner"]
    assert win["holds"] and win["slo_attainment"] >= 0.9
    assert not any(t["holds"] for t in tried if t["gpus"] < win["gpus"])  # nothing cheaper holds it
    assert f"cheapest that holds 5 req/s: {win['candidate']}" in text and GOODPUT_NAME in text
    plan = load_plan(out)  # the recommended shape, ready for --emit and pdserve up --plan
    assert plan.label == win["candidate"] and plan.request_rate == 5
    assert plan.predicted["slo_attainment"] == pytest.approx(win["slo_attainment"])


def test_beyond_max_nodes_the_smallest_that_would_is_named(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert cli_main(SMALL + ["--max-nodes", "1", "--request-rate", "8", "--json", "--save-result", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["winner"] is None and data["plan"] is None
    assert all(t["nodes"] <= 1 and not t["holds"] for t in data["tried"])
    beyond = data["smallest_beyond"]
    assert beyond is not None and beyond["holds"] and beyond["nodes"] > 1
    capsys.readouterr()
    assert cli_main(SMALL + ["--max-nodes", "1", "--request-rate", "8"]) == 1
    assert f"none within --max-nodes 1; the smallest that would is {beyond['candidate']}" in capsys.readouterr().out


@pytest.mark.parametrize("flags,field", [
    (["--max-concurrency", "8"], "max_concurrency"),
    (["--request-rate", "5", "--probes", "4"], "probes"),
    (["--request-rate", "0"], "request_rate"),
    (["--ttft-p90", "2000"], "ttft_p90"),
    (["--trace-time-scale", "2"], "trace_time_scale"),
])
def test_flags_the_plan_cannot_honour_are_refused(capsys, flags, field):
    assert cli_main(["plan", "--num-prompts", "5"] + flags) == 2
    assert f"{field}:" in capsys.readouterr().err


def test_a_bare_duration_names_its_unit():
    with pytest.raises(ValueError, match="write 2000ms or 2000s"):
        parse_duration("2000", "ttft_p90")


def test_one_goodput_definition_counts_failures_as_misses():
    from pdserve.workload.goodput import attainment, goodput

    ok = RequestRecord(0, scheduled_s=0.0, start_s=0.0, prompt_tokens=10)
    ok.ok, ok.ttft_s, ok.e2e_s, ok.completion_tokens = True, 0.1, 1.1, 11
    slow = RequestRecord(1, scheduled_s=0.0, start_s=0.0, prompt_tokens=10)
    slow.ok, slow.ttft_s, slow.e2e_s, slow.completion_tokens = True, 3.0, 4.0, 11
    failed = RequestRecord(2, scheduled_s=0.0, start_s=0.0, prompt_tokens=10)
    slo = {"ttft": 2.0, "tpot": 0.2}
    assert attainment([ok, slow, failed], slo) == pytest.approx(1 / 3)
    assert goodput([ok, slow, failed], slo, 2.0) == pytest.approx(0.5)


def test_simulate_names_model_software_and_offered_rate(capsys):
    assert cli_main(["simulate", "--num-prompts", "10", "--request-rate", "3", "--goodput", "ttft:2000",
                     "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["model"] == "deepseek-r1" and s["software"] == "SGLang v0.5.3" and s["request_rate"] == 3
    assert 0 <= s["slo_attainment"] <= 1 and "goodput" in s["goodput_definition"]
    assert cli_main(["simulate", "--num-prompts", "10", "--request-rate", "3", "--goodput", "ttft:2000"]) == 0
    text = capsys.readouterr().out
    assert "model: deepseek-r1; software: SGLang v0.5.3; load: 3 req/s offered (Poisson arrivals)" in text
    assert "Requests within SLOs (%):" in text


def test_dense_models_default_to_no_expert_parallelism():
    assert parse_deployment("model=llama-3-8b").ep == 1
    assert parse_deployment("model=llama-3-8b,ep=8").ep == 8  # asked for: kept
    assert parse_deployment("").ep == 8  # DeepSeek's experts stay spread


def test_up_plan_sets_the_emulated_cluster_and_refuses_what_the_plan_sets(tmp_path):
    import argparse

    from pdserve.launcher.plan import apply_plan
    from pdserve.launcher.stack import StackSpec

    out = tmp_path / "plan.json"
    assert cli_main(SMALL + ["--max-nodes", "2", "--request-rate", "3", "--save-result", str(out)]) == 0
    spec = StackSpec()
    plan = apply_plan(str(out), spec, argparse.Namespace(deployment="", model=None, time_scale=4.0))
    assert spec.model == "synthetic" and spec.pace == "realtime" and spec.colocated == plan.colocated
    assert spec.n_decode == plan.n_decode and "--kv-budget" in spec.extra["decode"]
    assert f"gpus={plan.deployment.gpus}" in spec.deployment
    with pytest.raises(ValueError, match="deployment: --plan sets"):
        apply_plan(str(out), StackSpec(), argparse.Namespace(deployment="hardware=H200", model=None, time_scale=1.0))
    (tmp_path / "no-plan.json").write_text('{"winner": null}')
    with pytest.raises(ValueError, match="no 'plan' block"):
        apply_plan(str(tmp_path / "no-plan.json"), StackSpec(),
                   argparse.Namespace(deployment="", model=None, time_scale=1.0))


def test_a_search_shows_its_progress_and_the_time_left(monkeypatch, capsys):
    from pdserve.sim import progress

    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)  # every search, however short
    with progress.Progress() as p:
        tick = p.phase(3, "candidates")
        for _ in range(3):
            tick()
    err = capsys.readouterr().err
    assert "plan: candidates" in err and "/3 [00:00<" in err  # done/total [elapsed<time left]
    with progress.Progress(enabled=False) as p:  # --json: nothing on stderr
        p.phase(3, "candidates")()
    assert capsys.readouterr().err == ""
