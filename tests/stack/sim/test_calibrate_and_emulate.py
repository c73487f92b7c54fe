"""End to end on a paced synthetic stack: calibrate on one concurrency and predict another; run a saved plan with
``pdserve up --plan`` and load it with ``pdserve bench serve`` at the plan's rate."""

from __future__ import annotations

import json
import signal

import pytest

from pdserve.cli.main import main as pdserve_main
from pdserve.perfmodel import overheads
from tests.helpers import pdserve_up

WORKLOAD = ["--input-len", "200:600", "--output-len", "30:60"]
# each run draws its own prompts: a second run of the same prompts on the same stack would hit the first's prefix
# cache, which a simulation of that run alone does not hold
SEEDS = {4: "1", 16: "2"}
# the emulated cluster is not the published one: its per-kernel overhead is 8 us where the published fit says 10.7
TRUTH = {"format": "pdserve-calibration/2", "table_key": "sglang@h20",
         "deployment": "model=deepseek-r1,hardware=H20-141G,gpus=8,tp=8,ep=8,dp_attention=0,software=sglang,"
                       "gpus_per_node=8",
         "parameters": {"kernel_overhead_s": 8e-6, "request_overhead_s": 0.0}}


def bench(target: str, out, *args: str) -> dict:
    assert pdserve_main(["bench", "serve", "--target", target, *WORKLOAD, "--ignore-eos", "--disable-tqdm",
                         "--save-result", str(out), *args]) == 0
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """bench serve at concurrency 4 and 16 against a stack whose workers run the TRUTH constants, paced at time scale
    4: between one request's end and its client's next request passes wall time (more on a busy machine) that the
    paced workers count as modeled time, a quarter of it at that scale; the simulator's clients take none."""
    from pdserve.launcher.stack import Stack, StackSpec

    d = tmp_path_factory.mktemp("calibrate")
    truth = d / "truth.json"
    truth.write_text(json.dumps(TRUTH))
    flags = ["--calibration", str(truth)]
    spec = StackSpec(model="synthetic", pace="realtime", time_scale=4.0,
                     extra={"prefill": flags, "decode": flags + ["--kv-budget", "modeled"]})
    with Stack(spec) as stack:
        runs = {c: bench(stack.router_target, d / f"c{c}.json", "--num-prompts", str(n), "--max-concurrency", str(c),
                         "--seed", SEEDS[c])
                for c, n in ((4, 24), (16, 48))}
    cal = d / "cal.json"
    assert pdserve_main(["calibrate", str(d / "c4.json"), "--out", str(cal)]) == 0  # from the published constants
    predicted = d / "predicted.json"
    assert pdserve_main(["simulate", "--calibration", str(cal), "--num-prompts", "48", "--max-concurrency", "16",
                         *WORKLOAD, "--seed", SEEDS[16], "--save-result", str(predicted)]) == 0
    try:
        return runs, json.loads(cal.read_text()), json.loads(predicted.read_text())
    finally:
        overheads.use_table(None)  # --calibration applied in this process: the published constants again


def test_calibrating_at_one_concurrency_predicts_the_tpot_of_another(measured):
    runs, cal, predicted = measured
    assert cal["parameters"]["kernel_overhead_s"] == pytest.approx(8e-6, rel=0.15)  # the stack's, not the published
    c16 = runs[16]
    assert predicted["mean_tpot_ms"] == pytest.approx(c16["modeled_mean_tpot_ms"], rel=0.10)


def test_calibrating_at_one_concurrency_predicts_the_ttft_of_another(measured):
    runs, _, predicted = measured
    assert predicted["mean_ttft_ms"] == pytest.approx(runs[16]["modeled_mean_ttft_ms"], rel=0.10)


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """A plan saved, run by pdserve up --plan, and loaded at its rate by bench serve."""
    d = tmp_path_factory.mktemp("plan")
    plan = d / "plan.json"
    assert pdserve_main(["plan", "--num-prompts", "40", *WORKLOAD[:4], "--hardware", "H20-141G", "--no-dp-attention",
                         "--instance-sizes", "1", "--max-nodes", "2", "--ttft-p90", "2s", "--tpot-p90", "60ms",
                         "--request-rate", "2", "--save-result", str(plan)]) == 0
    block = json.loads(plan.read_text())["plan"]
    proc, lines = pdserve_up(["--plan", str(plan), "--port", "0", "--time-scale", "1"], until="try:")
    try:
        target = lines[-1].split("--target", 1)[1].split()[0]
        # the plan's workload: its prompts and arrivals (both commands' --seed default, 0)
        got = bench(target, d / "bench.json", "--num-prompts", "40", "--request-rate", "2")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    return block, "".join(lines), got


def test_up_plan_runs_the_plan_emulated(emulated):
    block, text, got = emulated
    assert f"emulating the plan {block['label']}" in text and "decode-0" in text
    assert got["completed"] == 40 and "modeled_request_throughput" in got
    assert got["modeled_request_throughput"] == pytest.approx(block["predicted"]["request_throughput"], rel=0.10)
    assert got["modeled_mean_tpot_ms"] == pytest.approx(block["predicted"]["mean_tpot_ms"], rel=0.10)


def test_up_plan_reproduces_the_planned_ttft(emulated):
    block, _, got = emulated
    assert got["modeled_mean_ttft_ms"] == pytest.approx(block["predicted"]["mean_ttft_ms"], rel=0.10)
