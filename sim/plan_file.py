"""The recommended shape in a plan's ``--save-result`` JSON: what ``plan --emit`` translates into launch
configurations and ``pdserve up --plan`` runs emulated. One owner for its keys and their checks.

The block names the deployment of every instance (perfmodel/deployment.py keys), the prefill and decode instance
counts (0 prefill: colocated), the scheduler flags the plan set, the workload it was planned for (the flags ``bench
serve`` takes to reproduce it), the rate, the SLOs, and the simulator's predicted figures at that rate.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path

from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.perfmodel.deployment import Deployment, check_deployment
from pdserve.sim.planner import Candidate, Probe

FORMAT = "pdserve-plan/1"
PREDICTED = ("request_throughput", "output_throughput", "request_goodput", "slo_attainment", "mean_ttft_ms",
             "median_ttft_ms", "p90_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p90_tpot_ms", "mean_e2el_ms",
             "duration", "completed")
WORKLOAD = ("dataset", "dataset_path", "input_len", "output_len", "num_prompts", "seed", "burstiness",
            "random_prefix_fraction")


def deployment_dict(d: Deployment) -> dict:
    return {f.name: getattr(d, f.name) for f in fields(Deployment) if not f.name.startswith("_")}


def plan_block(c: Candidate, p: Probe, workload: dict, slo: dict, overrides: SchedulerOverrides,
               calibration: str | None = None) -> dict:
    return {"format": FORMAT, "deployment": deployment_dict(c.deployment), "n_prefill": c.n_prefill,
            "n_decode": c.n_decode, "label": c.label(), "gpus": c.gpus, "request_rate": p.rate,
            "slo": slo, "workload": {k: workload.get(k) for k in WORKLOAD},
            "scheduler": {f.name: getattr(overrides, f.name) for f in fields(SchedulerOverrides)},
            "predicted": {k: p.summary.get(k) for k in PREDICTED}, "calibration": calibration}


@dataclass
class Plan:
    deployment: Deployment
    n_prefill: int
    n_decode: int
    request_rate: float
    workload: dict
    slo: dict
    overrides: SchedulerOverrides
    predicted: dict
    label: str
    calibration: str | None = None

    @property
    def colocated(self) -> bool:
        return self.n_prefill == 0

    @property
    def candidate(self) -> Candidate:
        return Candidate(self.deployment, self.n_prefill, self.n_decode)


def _fail(path: str, what: str) -> ValueError:
    return ValueError(f"plan: {path}: {what}")


def load_plan(path: str | Path) -> Plan:
    """A plan from ``pdserve plan --save-result`` (its ``plan`` block), checked; ValueError naming what is wrong."""
    path = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"plan: {path}: no such file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise _fail(path, f"not a JSON file ({exc})") from None
    block = data.get("plan") if isinstance(data, dict) else None
    if not isinstance(block, dict):
        raise _fail(path, "no 'plan' block: write it with pdserve plan --save-result (a plan that found a "
                          "deployment within the SLOs)")
    return parse_plan(block, path)


def parse_plan(block: dict, path: str = "plan") -> Plan:
    """The ``plan`` block checked, field by field."""
    if block.get("format") != FORMAT:
        raise _fail(path, f"plan.format is {block.get('format')!r}, expected {FORMAT!r}")
    known = {f.name for f in fields(Deployment) if not f.name.startswith("_")}
    raw = block.get("deployment")
    if not isinstance(raw, dict) or set(raw) - known:
        raise _fail(path, f"plan.deployment must be an object with keys among {', '.join(sorted(known))}")
    try:
        deployment = Deployment(**raw)
        check_deployment(deployment)
    except (TypeError, ValueError) as exc:
        raise _fail(path, f"plan.deployment: {exc}") from None
    counts = {k: block.get(k) for k in ("n_prefill", "n_decode")}
    for k, v in counts.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v > 64:
            raise _fail(path, f"plan.{k} must be an integer in 0..64, got {v!r}")
    if counts["n_decode"] < 1:
        raise _fail(path, "plan.n_decode must be at least 1")
    rate = block.get("request_rate")
    if not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
        raise _fail(path, f"plan.request_rate must be a positive number, got {rate!r}")
    try:
        overrides = SchedulerOverrides(**{k: v for k, v in (block.get("scheduler") or {}).items()})
    except (TypeError, ValueError) as exc:
        raise _fail(path, f"plan.scheduler: {exc}") from None
    predicted = block.get("predicted") or {}
    if not isinstance(predicted, dict):
        raise _fail(path, "plan.predicted must be an object")
    return Plan(deployment, counts["n_prefill"], counts["n_decode"], float(rate), dict(block.get("workload") or {}),
                dict(block.get("slo") or {}), overrides, predicted, str(block.get("label", "")),
                block.get("calibration"))
