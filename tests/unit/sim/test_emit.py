"""pdserve plan --emit: every flag written is one the named release accepts (tests/unit/sim/engine_flags.py), the
flags carry the plan's shape, and pdserve's own manifests are valid Kubernetes objects running the plan emulated."""

from __future__ import annotations

import importlib
import shlex
from pathlib import Path

import pytest

from pdserve.cli.main import main as cli_main
from pdserve.common.scheduling import modeled_scheduling
from pdserve.engine.sched.scheduler import SchedulerRole as Role
from pdserve.perfmodel.deployment import Deployment
from pdserve.sim.emit import emit_plan
from pdserve.sim.plan_file import FORMAT, deployment_dict
from tests.unit.sim.engine_flags import SGLANG_0_5_3, SGLANG_ROUTER_0_2_0, VLLM_0_11_0, VLLM_TOY_PROXY

DP16 = Deployment(gpus=16, tp=8, ep=16, dp_attention=True)
TP8 = Deployment()


def block(d: Deployment, n_prefill: int, n_decode: int, **more) -> dict:
    return {"format": FORMAT, "deployment": deployment_dict(d), "n_prefill": n_prefill, "n_decode": n_decode,
            "label": "test plan", "request_rate": 4.0, "slo": {}, "workload": {}, "scheduler": {},
            "predicted": {"mean_ttft_ms": 300.0, "mean_tpot_ms": 40.0, "request_throughput": 3.9}, **more}


def commands(path: Path) -> list[list[str]]:
    """The argv of the script's exec line (its continuation lines joined)."""
    text = path.read_text().replace("\\\n", " ")
    return [shlex.split(line)[1:] for line in text.splitlines() if line.startswith("exec ")]


def flags(argv: list[str]) -> set[str]:
    return {a for a in argv if a.startswith("--")}


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("d,p,n", [(DP16, 1, 1), (TP8, 2, 3), (TP8, 0, 2),
                                   (Deployment(kv_precision="fp8", dp_attention=True), 1, 2)])
def test_sglang_and_vllm_flags_are_the_releases_own(tmp_path, d, p, n):
    emit_plan("sglang,vllm,dynamo", block(d, p, n), str(tmp_path))
    for script in (tmp_path / "sglang").glob("*.sh"):
        for argv in commands(script):
            known = SGLANG_ROUTER_0_2_0 if "sglang_router.launch_router" in argv else SGLANG_0_5_3
            assert flags(argv) <= known, f"{script.name}: {flags(argv) - known}"
    for script in (tmp_path / "vllm").glob("*.sh"):
        for argv in commands(script):
            known = VLLM_TOY_PROXY if "toy_proxy_server.py" in argv else VLLM_0_11_0
            assert flags(argv) <= known, f"{script.name}: {flags(argv) - known}"
    yaml = pytest.importorskip("yaml")
    graph = yaml.safe_load((tmp_path / "dynamo" / "dynamo-graph.yaml").read_text())
    for name, svc in graph["spec"]["services"].items():
        if name != "Frontend":
            argv = svc["extraPodSpec"]["mainContainer"]["args"]
            assert flags(argv) <= SGLANG_0_5_3, f"{name}: {flags(argv) - SGLANG_0_5_3}"


def test_the_flags_carry_the_planned_shape(tmp_path):
    emit_plan("sglang,vllm", block(DP16, 1, 2), str(tmp_path))
    s = tmp_path / "sglang"
    assert sorted(p.name for p in s.iterdir()) == ["decode-0.sh", "decode-1.sh", "prefill-0.sh", "router.sh"]
    (prefill,) = commands(s / "prefill-0.sh")
    assert value(prefill, "--disaggregation-mode") == "prefill" and value(prefill, "--tp-size") == "16"
    assert value(prefill, "--dp-size") == "16" and "--enable-dp-attention" in prefill
    assert value(prefill, "--ep-size") == "16" and value(prefill, "--nnodes") == "2"
    planned = modeled_scheduling(DP16, Role.DECODE)
    (decode,) = commands(s / "decode-1.sh")
    assert value(decode, "--disaggregation-mode") == "decode"
    assert float(value(decode, "--mem-fraction-static")) == pytest.approx(planned.deployment.mem_fraction, abs=1e-3)
    assert int(value(decode, "--max-running-requests")) == planned.config.max_num_seqs * planned.ranks
    (router,) = commands(s / "router.sh")
    assert "--pd-disaggregation" in router and router.count("--decode") == 2 and router.count("--prefill") == 1
    v = tmp_path / "vllm"
    (head,) = commands(v / "decode-0-node0.sh")
    (other,) = commands(v / "decode-0-node1.sh")
    assert value(head, "--data-parallel-size") == "16" and value(head, "--tensor-parallel-size") == "1"
    assert "--headless" in other and value(other, "--data-parallel-start-rank") == "8"
    assert '"kv_connector":"NixlConnector"' in value(head, "--kv-transfer-config")
    assert int(value(head, "--max-num-seqs")) * 16 == planned.config.max_num_seqs * planned.ranks


def test_dp_attention_groups_reach_both_engines_flags(tmp_path):
    emit_plan("sglang,vllm", block(Deployment(dp_attention=True, dp=4), 1, 1), str(tmp_path))
    (prefill,) = commands(tmp_path / "sglang" / "prefill-0.sh")
    assert value(prefill, "--tp-size") == "8" and value(prefill, "--dp-size") == "4"
    (head,) = commands(tmp_path / "vllm" / "decode-0-node0.sh")
    assert value(head, "--tensor-parallel-size") == "2" and value(head, "--data-parallel-size") == "4"


def test_emitted_k8s_is_valid_and_runs_the_plan_emulated(tmp_path):
    yaml = pytest.importorskip("yaml")
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    emit_plan("k8s,compose", block(DP16, 1, 3), str(tmp_path))
    k8s = tmp_path / "k8s"
    kustomization = yaml.safe_load((k8s / "kustomization.yaml").read_text())
    docs = [d for name in kustomization["resources"] for d in yaml.safe_load_all((k8s / name).read_text()) if d]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert deployments["prefill"]["spec"]["replicas"] == 1 and deployments["decode"]["spec"]["replicas"] == 3
    modules = {"prefill": "pdserve.prefill_server.server", "decode": "pdserve.decode_server.server"}
    for role, module in modules.items():
        (container,) = deployments[role]["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["PDSERVE_MODEL"] == "synthetic" and env["PDSERVE_PACE"] == "realtime"
        assert "dp_attention=1" in env["PDSERVE_DEPLOYMENT"] and "gpus=16" in env["PDSERVE_DEPLOYMENT"]
        parser = importlib.import_module(module).build_parser()
        known = {a.env_var for a in parser._actions if getattr(a, "env_var", None)}
        assert {k for k in env if k.startswith("PDSERVE_")} <= known  # every variable is a flag the worker has
        assert env["PDSERVE_IDENTITY"]  # secured like the defaults: its own identity, mutual TLS
    assert any(d["kind"] == "NetworkPolicy" for d in docs) and not any(d["kind"] == "HorizontalPodAutoscaler"
                                                                       for d in docs)
    compose = yaml.safe_load((tmp_path / "compose" / "docker-compose.plan.yml").read_text())
    assert compose["services"]["decode"]["deploy"]["replicas"] == 3
    assert compose["services"]["decode"]["environment"]["PDSERVE_KV_BUDGET"] == "modeled"


def test_bad_targets_and_shapes_are_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="emit: nginx is not one of"):
        emit_plan("sglang,nginx", block(TP8, 1, 1), str(tmp_path))
    with pytest.raises(ValueError, match="plan.n_decode"):
        emit_plan("sglang", block(TP8, 1, 0), str(tmp_path))
    with pytest.raises(ValueError, match="emit vllm: EP8 over 16 GPUs"):
        emit_plan("vllm", block(Deployment(gpus=16, tp=8, ep=8), 1, 1), str(tmp_path))
    assert cli_main(["plan", "--num-prompts", "5", "--emit", "slurm"]) == 2
    assert "emit: slurm is not one of" in capsys.readouterr().err
