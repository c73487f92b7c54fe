"""pdserve plan: candidates that hold the model, SLO parsing, a small search end to end."""

from __future__ import annotations

import json

import pytest

from pdserve.cli.main import main as cli_main
from pdserve.common.scheduling import modeled_scheduling
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.perfmodel.deployment import Deployment, check_deployment
from pdserve.sim import planner as planner_module
from pdserve.sim.candidates import candidates
from pdserve.sim.cluster import Cluster, ClusterSpec, Pool, SimRequest
from pdserve.sim.plan_checks import parse_duration
from pdserve.sim.planner import SLO, Candidate, Planner, Probe
from pdserve.sim.sensitivity import VARIANTS, variant


def test_candidates_use_the_smallest_instance_that_holds_the_model():
    pool = candidates(["H20-141G", "H800"], max_nodes=4, dp_attention=(False,), sizes=1)
    by_hw = {}
    for c in pool:
        by_hw.setdefault(c.deployment.hardware, set()).add(c.deployment.gpus)
    assert by_hw == {"H20-141G": {8}, "H800": {16}}  # R1's 671 GB of FP8 weights do not fit 8 x 80 GB
    labels = [c.label() for c in pool]
    assert "1 colocated of 8xH20-141G TP8 EP8" in labels and "3P1D of 8xH20-141G TP8 EP8" in labels
    assert "1P1D of 16xH800 TP8 EP16" in labels and not any("2P1D of 16x" in x for x in labels)
    assert all(c.gpus <= 32 for c in pool)
    two = {c.label() for c in candidates(["H20-141G"], max_nodes=4, dp_attention=(False,), tp_sizes=(8, 4))}
    assert {"1P1D of 16xH20-141G TP8 EP16", "1 colocated of 8xH20-141G TP4 EP8"} <= two
    assert "2P1D of 16xH20-141G TP8 EP16" not in two  # 48 GPUs: beyond 4 nodes


def test_candidates_hold_the_model_with_the_memory_their_software_leaves():
    """SGLang reserves memory per DP-attention rank for CUDA graphs: 16 x H20-96G with DP attention holds the weights
    at a 0.9 fraction but leaves SGLang no KV cache, so the plan must not offer it (it used to, and then failed)."""
    dp16 = Deployment(hardware="H20-96G", gpus=16, ep=16, dp_attention=True)
    check_deployment(dp16)  # fits at the old fixed fraction
    with pytest.raises(ValueError, match="gpus:"):
        modeled_scheduling(dp16, SchedulerRole.DECODE)
    pool = {(c.deployment.gpus, c.deployment.dp_attention) for c in candidates(["H20-96G"], max_nodes=4)}
    assert (16, True) not in pool and (16, False) in pool


def test_candidates_try_dp_attention_groups_of_the_sizes_asked():
    labels = {c.label() for c in candidates(["H20-141G"], max_nodes=2, sizes=1, group_tp_sizes=(1, 2, 4, 8))}
    assert {"1 colocated of 8xH20-141G DP-attn EP8", "1P1D of 8xH20-141G DP4-attn TP2 EP8",
            "1 colocated of 8xH20-141G DP2-attn TP4 EP8"} <= labels
    assert not any("DP1" in x for x in labels)  # a group of all eight GPUs is TP8 attention, already a candidate
    both = [c.deployment for c in candidates(["H20-141G"], max_nodes=1, sizes=1, tp_sizes=(4, 8),
                                             group_tp_sizes=(1, 2, 4)) if c.deployment.dp_attention]
    assert sorted({d.parallel().attention_label() for d in both}) == ["DP-attn", "DP2-attn TP4", "DP4-attn TP2"]
    default = {c.label() for c in candidates(["H20-141G"], max_nodes=2, sizes=1)}
    assert not any("DP4" in x or "DP2" in x for x in default)


def test_plan_without_probes_searches_with_the_default_count(capsys):
    """--probes left out: the search runs with its default count (the flag's None once reached the search loop)."""
    rc = cli_main(["plan", "--num-prompts", "20", "--input-len", "200:400", "--output-len", "20:40",
                   "--hardware", "H20-141G", "--max-nodes", "1", "--no-dp-attention", "--instance-sizes", "1",
                   "--ttft-p90", "2s", "--tpot-p90", "60ms"])
    assert rc == 0
    assert "winner: 1 colocated of 8xH20-141G TP8 EP8" in capsys.readouterr().out


def test_a_layout_holding_far_less_than_its_estimate_is_found(monkeypatch):
    """Three probes from an estimate 20x too high all fail; the search keeps halving until a rate passes, where it
    used to report the layout as holding nothing, then bisects towards the failure above it."""
    class Holds2(Planner):
        def probe(self, c: Candidate, rate: float) -> Probe:
            met = rate <= 2.0
            return Probe(rate, met, 1.0 if met else 0.0, 0.5, 0.5, {"request_goodput": rate if met else 0.0})

    monkeypatch.setattr(planner_module, "capacity_estimate", lambda *args: 40.0 / 1.5)
    requests = [SimRequest(prompt_ids=[1] * 100, output_len=10)]
    planner = Holds2(requests, SLO(2.0, 0.05), probes=3)
    out = planner.evaluate(Candidate(Deployment(), 0, 1))
    passing = [p.rate for p in out.probes if p.met]
    assert [p.rate for p in out.probes[:3]] == [40.0, 20.0, 10.0] and passing == [1.25, 1.875]
    assert [p.rate for p in out.probes[-2:]] == [1.875, 2.1875]


def test_parse_duration():
    assert parse_duration("2s", "ttft_p90") == 2.0 and parse_duration("50ms", "tpot_p90") == pytest.approx(0.05)
    with pytest.raises(ValueError, match="tpot_p90"):
        parse_duration("fast", "tpot_p90")


def test_plan_small_search(tmp_path, capsys):
    out = tmp_path / "plan.json"
    rc = cli_main(["plan", "--num-prompts", "40", "--input-len", "200:800", "--output-len", "20:60",
                   "--hardware", "H20-141G", "--max-nodes", "2", "--no-dp-attention", "--probes", "3",
                   "--instance-sizes", "1",
                   "--ttft-p90", "2s", "--tpot-p90", "60ms", "--save-result", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "baseline (the article's 8 x H20-141G TP8 EP8, colocated)" in text and "winner:" in text
    assert "binding SLO:" in text and "one more decode instance" in text
    data = json.loads(out.read_text())
    labels = {r["candidate"] for r in data["candidates"]}
    assert labels == {"1 colocated of 8xH20-141G TP8 EP8", "1P1D of 8xH20-141G TP8 EP8"}
    assert data["winner"]["goodput_per_gpu"] >= max(r["goodput_per_gpu"] for r in data["candidates"])
    assert data["pareto"] and data["baseline"]["gpus"] == 8
    assert data["winner"]["goodput"] > 0 and data["winner"]["p90_tpot_ms"] <= 60


def test_plan_refuses_bad_slo(capsys):
    assert cli_main(["plan", "--tpot-p90=0ms", "--num-prompts", "5"]) == 2
    assert "tpot_p90" in capsys.readouterr().err


def test_a_sensitivity_variant_reaches_the_simulated_steps():
    """--sensitivity changes a deployment's timing model in place; the simulated instance must step with that model
    (it used to rebuild a default one when it resolved the software's memory fraction, and every variant gave the
    same answer as the model itself)."""
    base = Deployment()
    half = variant(base, next(change for name, _, change in VARIANTS if name == "per-kernel overhead x0.5"))
    requests = [SimRequest(list(range(1, 400)), 20) for _ in range(4)]

    def duration(d: Deployment) -> float:
        result = Cluster(ClusterSpec([Pool(SchedulerRole.BOTH, d, 1)], frontend=False)).run(requests, [0.0] * 4)
        return max(s.finish_s for s in result.sequences)

    assert duration(half) < 0.8 * duration(base)


@pytest.mark.parametrize("flags, flag", [(["--hardware", "H200,B300"], "--hardware"),
                                         (["--deployment", "hardware=B300"], "--deployment")])
def test_plan_refuses_an_unknown_gpu_naming_the_flag_and_the_known_ones(capsys, flags, flag):
    """An unknown GPU is named unknown (not "cannot hold the model"), with the flag to change and the known list."""
    assert cli_main(["plan", "--num-prompts", "5", *flags]) == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"pdserve: error: {flag}: ") and "unknown GPU 'B300'; known: " in line
    assert "H200" in line and "B200" in line
    assert "holds" not in err and "Traceback" not in err


def test_a_layout_is_offered_only_in_the_roles_it_fits(capsys):
    """SGLang v0.5.23 reserves per role: Qwen3-235B-A22B with DP attention on one 8 x H20-96G node fits as a decode
    instance and not colocated; the planner checked every layout as a decode instance and then crashed probing the
    colocated one."""
    rc = cli_main(["plan", "--deployment", "model=qwen3-235b-a22b,hardware=H20-96G,software=sglang-0.5.23",
                   "--num-prompts", "20", "--input-len", "200:400", "--output-len", "20:40", "--max-nodes", "1",
                   "--probes", "2", "--instance-sizes", "1", "--ttft-p90", "2s", "--tpot-p90", "60ms"])
    assert rc == 0
    assert "1 colocated of 8xH20-96G DP-attn EP8" not in capsys.readouterr().out
