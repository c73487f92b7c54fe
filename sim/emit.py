"""``pdserve plan --emit TARGET,.. [--out DIR]``: the recommended shape as launch configurations.

``sglang`` and ``vllm``: the real engines' launch commands (sim/emit_engines.py), ``dynamo``: NVIDIA Dynamo's
deployment YAML (sim/emit_dynamo.py), ``k8s`` and ``compose``: pdserve's own manifests running the plan emulated
(sim/emit_cluster.py). Each target writes its files under ``DIR/TARGET/`` and prints what it wrote.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from pdserve.common.scheduling import modeled_scheduling
from pdserve.engine.sched.scheduler import SchedulerRole as Role
from pdserve.sim.plan_file import Plan, load_plan, parse_plan

TARGETS = ("sglang", "vllm", "dynamo", "k8s", "compose")
DEFAULT_OUT = "plan-out"
# Hugging Face repositories of the modeled models, for the real engines' --model-path / --model
MODEL_REPOS = {
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-r1-awq": "cognitivecomputations/DeepSeek-R1-AWQ",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B-Instruct",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B-Instruct",
    "smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct",
}


def parse_targets(text: str) -> list[str]:
    targets = [t.strip() for t in str(text).split(",") if t.strip()]
    bad = [t for t in targets if t not in TARGETS]
    if bad or not targets:
        raise ValueError(f"emit: {', '.join(bad) or repr(text)} is not one of {', '.join(TARGETS)}")
    return targets


def check_targets(text: str, out: str | None) -> None:
    parse_targets(text)
    d = Path(out or DEFAULT_OUT)
    if d.exists() and not d.is_dir():
        raise ValueError(f"out: {d} exists and is not a directory")


@dataclass(frozen=True)
class Shape:
    """What every engine's configuration needs of one role's instances, resolved as the plan simulated them."""

    role: str  # prefill | decode | both
    count: int
    gpus: int
    nodes: int
    attention_tp: int  # GPUs one attention replica spans
    attention_dp: int  # attention replicas (DP attention ranks); 1: plain TP
    ep: int
    mem_fraction: float
    chunked_prefill_size: int  # the instance's, over all its DP ranks
    max_running_requests: int  # the instance's, over all its DP ranks
    kv_precision: str


def shapes(plan: Plan) -> list[Shape]:
    d = plan.deployment
    p = d.parallel()
    roles = [("both", Role.BOTH, plan.n_decode)] if plan.colocated else [
        ("prefill", Role.PREFILL, plan.n_prefill), ("decode", Role.DECODE, plan.n_decode)]
    out = []
    for name, role, count in roles:
        s = modeled_scheduling(d, role, plan.overrides)
        out.append(Shape(name, count, d.gpus, p.nodes, p.attention_shards, p.attention_replicas, d.ep,
                         round(s.deployment.mem_fraction, 3), s.config.max_num_batched_tokens * s.ranks,
                         s.config.max_num_seqs * s.ranks, d.kv_precision))
    return out


def model_repo(plan: Plan) -> str:
    return MODEL_REPOS.get(plan.deployment.model, "${MODEL_PATH}")


def emit_plan(targets_text: str, plan_block: dict | str, out: str | None) -> list[Path]:
    """Write every target's files; ``plan_block``: the plan JSON's ``plan`` block, or a path to a saved plan."""
    from pdserve.sim import emit_cluster, emit_dynamo, emit_engines

    plan = load_plan(plan_block) if isinstance(plan_block, str) else parse_plan(plan_block)
    writers = {"sglang": emit_engines.sglang, "vllm": emit_engines.vllm, "dynamo": emit_dynamo.dynamo,
               "k8s": emit_cluster.k8s, "compose": emit_cluster.compose}
    root = Path(out or DEFAULT_OUT)
    written = []
    for target in parse_targets(targets_text):
        d = root / target
        d.mkdir(parents=True, exist_ok=True)
        for name, text in writers[target](plan).items():
            path = d / name
            path.write_text(text)
            if name.endswith(".sh"):
                path.chmod(0o755)
            written.append(path)
    print(f"emitted {plan.label} as {', '.join(parse_targets(targets_text))}: "
          + ", ".join(str(p) for p in written), file=sys.stderr)
    return written

