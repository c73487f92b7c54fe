"""pdserve calibrate: the three result formats read, the overheads recovered from runs made with known ones, the
calibration applied by --calibration, and every unusable input refused with the reason."""

from __future__ import annotations

import json

import pytest

from pdserve.cli.main import main as cli_main
from pdserve.perfmodel import overheads
from pdserve.perfmodel.calibration import FORMAT, FORMAT_PER_LAYER, apply_calibration
from pdserve.perfmodel.deployment import Deployment
from pdserve.perfmodel.kernels import kernels_per_layer
from pdserve.sim.calibration_inputs import read_results

WORKLOAD = ["--num-prompts", "20", "--input-len", "200:1000", "--output-len", "40:120"]
DEPLOYMENT = "model=deepseek-r1,hardware=H20-141G,gpus=8,tp=8,ep=8,dp_attention=0,software=sglang,gpus_per_node=8"


@pytest.fixture(autouse=True)
def _restore_overheads():
    yield
    overheads.use_table(None)


def calibration_file(path, kernel_s: float, request_s: float) -> str:
    path.write_text(json.dumps({"format": FORMAT, "deployment": DEPLOYMENT, "table_key": "sglang@h20",
                                "parameters": {"kernel_overhead_s": kernel_s, "request_overhead_s": request_s}}))
    return str(path)


def measured_run(tmp_path, name: str, rate: str, truth: str) -> str:
    """A run 'measured' on a server whose overheads are ``truth``'s (a simulation with that calibration)."""
    out = tmp_path / name
    assert cli_main(["simulate", *WORKLOAD, "--request-rate", rate, "--calibration", truth, "--save-result",
                     str(out)]) == 0
    overheads.use_table(None)
    return str(out)


def test_the_fit_recovers_the_overheads_the_runs_were_made_with(tmp_path, capsys):
    truth = calibration_file(tmp_path / "truth.json", 8e-6, 0.060)  # the published H20 fit: 10.7 us per kernel
    runs = [measured_run(tmp_path, "r2.json", "2", truth), measured_run(tmp_path, "r4.json", "4", truth)]
    out = tmp_path / "cal.json"
    assert cli_main(["calibrate", *runs, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    cal = json.loads(out.read_text())
    assert cal["deployment"] == DEPLOYMENT and cal["table_key"] == "sglang@h20"
    assert cal["parameters"]["kernel_overhead_s"] == pytest.approx(8e-6, rel=0.05)
    assert cal["parameters"]["request_overhead_s"] == pytest.approx(0.060, rel=0.10)
    for run in cal["runs"]:  # before: the published fit's error; after: within a few percent
        assert abs(run["after"]["mean_tpot_ms"] / run["measured"]["mean_tpot_ms"] - 1) < 0.03
        assert abs(run["before"]["mean_tpot_ms"] / run["measured"]["mean_tpot_ms"] - 1) > 0.10
    assert "kernel_overhead_s" in text and "->" in text and "mean TTFT (ms)" in text
    # applied, the model predicts the measured runs
    apply_calibration(str(out))
    assert Deployment().timing().overheads.kernel_overhead_s == pytest.approx(8e-6, rel=0.05)


def test_a_per_layer_file_of_the_first_format_gives_the_same_step_times(tmp_path):
    """Format 1 fitted an overhead per layer: read as that figure over the model's mean kernels per layer, it prices
    the deployment's steps as it did."""
    per_layer = 250e-6
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"format": FORMAT_PER_LAYER, "deployment": DEPLOYMENT, "table_key": "sglang@h20",
                                "parameters": {"layer_overhead_s": per_layer, "request_overhead_s": 0.06}}))
    apply_calibration(str(path))
    t = Deployment().timing()
    assert t.overheads.kernel_overhead_s == pytest.approx(per_layer / kernels_per_layer(t.model, t.gpu))
    assert t.decode_step_time([1000] * 8).parts["overhead"] == pytest.approx(
        t.model.n_layers * per_layer + t.overheads.step_overhead_s)


def test_vllm_and_sglang_formats_are_read(tmp_path):
    detailed = {"date": "20250101-000000", "backend": "openai-chat", "model_id": "deepseek-ai/DeepSeek-R1",
                "tokenizer_id": "deepseek-ai/DeepSeek-R1", "num_prompts": 3, "request_rate": "inf", "burstiness": 1.0,
                "max_concurrency": 2, "duration": 3.0, "completed": 3, "total_input_tokens": 600,
                "total_output_tokens": 30, "request_throughput": 1.0, "mean_ttft_ms": 300.0, "mean_tpot_ms": 30.0,
                "input_lens": [100, 200, 300], "output_lens": [10, 10, 10], "ttfts": [0.1, 0.2, 0.3],
                "itls": [[], [], []], "generated_texts": ["", "", ""], "errors": ["", "", ""]}
    (tmp_path / "vllm.json").write_text(json.dumps(detailed))
    (vllm,) = read_results(str(tmp_path / "vllm.json"))
    assert vllm.source == "vllm" and vllm.input_lens == [100, 200, 300] and vllm.max_concurrency == 2
    summary_only = {k: v for k, v in detailed.items() if k not in ("input_lens", "output_lens", "ttfts", "itls",
                                                                 "generated_texts", "errors")}
    (tmp_path / "vllm-summary.json").write_text(json.dumps(summary_only))
    (means,) = read_results(str(tmp_path / "vllm-summary.json"))
    assert means.input_lens == [200] * 3 and means.notes  # replayed at the means, and says so
    sglang = {"backend": "sglang", "dataset_name": "random", "request_rate": 4.0, "max_concurrency": None,
              "random_input_len": 1000, "random_output_len": 100, "duration": 10.0, "completed": 20,
              "total_input_tokens": 20000, "total_output_tokens": 2000, "request_throughput": 2.0,
              "mean_e2e_latency_ms": 3000.0, "mean_ttft_ms": 200.0, "mean_tpot_ms": 25.0}
    (tmp_path / "sglang.jsonl").write_text(json.dumps(sglang) + "\n" + json.dumps(dict(sglang, request_rate=8.0)))
    runs = read_results(str(tmp_path / "sglang.jsonl"))
    assert [r.rate for r in runs] == [4.0, 8.0] and runs[0].source == "sglang" and runs[1].name.endswith(":2")


@pytest.mark.parametrize("content,why", [
    ("[1, 2]", "not a JSON object"),
    ('{"hello": 1}', "not a pdserve bench serve, vllm bench serve or SGLang"),
    ('{"model_id": "x", "completed": 3, "total_input_tokens": 9, "total_output_tokens": 9}', "no latency figures"),
    ('{"model_id": "meta-llama/Meta-Llama-3-8B-Instruct", "completed": 3, "total_input_tokens": 9, '
     '"total_output_tokens": 9, "mean_ttft_ms": 100, "mean_tpot_ms": 10, "request_rate": "inf"}',
     "is llama-3-8b, the deployment's is deepseek-r1"),
    ('{"model_id": "x", "completed": 3, "total_input_tokens": 9, "total_output_tokens": 9, "mean_ttft_ms": 100, '
     '"request_rate": "inf"}', "1 figure(s) to fit"),
    ('{"model_id": "x", "completed": 3, "total_input_tokens": 9, "total_output_tokens": 9, "mean_ttft_ms": 100, '
     '"mean_tpot_ms": 10, "request_rate": "trace"}', "trace-timed"),
    ("not json at all", "neither a JSON file nor JSON lines"),
])
def test_unusable_inputs_are_refused_with_why(tmp_path, capsys, content, why):
    path = tmp_path / "run.json"
    path.write_text(content)
    assert cli_main(["calibrate", str(path), "--out", str(tmp_path / "cal.json")]) == 2
    assert why in capsys.readouterr().err
    assert not (tmp_path / "cal.json").exists()


def test_a_calibration_for_another_deployment_warns_or_is_refused(tmp_path, capsys):
    cal = calibration_file(tmp_path / "cal.json", 300e-6, 0.1)
    warnings = []
    apply_calibration(cal, "gpus=16,ep=16", warn=warnings.append)  # same software and GPU family: extrapolating
    assert warnings and "extrapolating to another deployment" in warnings[0]
    with pytest.raises(ValueError, match="its constants would not apply"):
        apply_calibration(cal, "hardware=H200")
    (tmp_path / "bad.json").write_text('{"format": "something-else"}')
    assert cli_main(["simulate", "--num-prompts", "5", "--calibration", str(tmp_path / "bad.json")]) == 2
    assert "calibration:" in capsys.readouterr().err


def test_predicting_far_outside_the_fitted_lengths_warns():
    from pdserve.perfmodel.calibration import check_range

    data = {"fitted_range": {"mean_input_min": 400, "mean_input_max": 600, "mean_output_min": 40,
                             "mean_output_max": 60}}
    warnings: list[str] = []
    assert check_range(data, 500, 50, warn=warnings.append) == [] and not warnings
    check_range(data, 8000, 50, warn=warnings.append)
    assert len(warnings) == 1 and "mean input length 8000" in warnings[0] and "extrapolating" in warnings[0]


@pytest.mark.parametrize("fmt, name, value", [(FORMAT_PER_LAYER, "layer_overhead_s", True),
                                              (FORMAT_PER_LAYER, "layer_overhead_s", 5.0),
                                              (FORMAT, "kernel_overhead_s", False)])
def test_a_figure_that_is_not_seconds_is_refused_before_any_conversion(tmp_path, fmt, name, value):
    """A per-layer figure is checked as written (5 s a layer would pass as 0.16 s a kernel once divided), and a
    JSON boolean is not a number of seconds in either format."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": fmt, "deployment": DEPLOYMENT, "table_key": "sglang@h20",
                                "parameters": {name: value}}))
    with pytest.raises(ValueError, match=f"parameters.{name} must be a number of seconds"):
        apply_calibration(str(path))
