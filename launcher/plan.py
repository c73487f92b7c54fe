"""``pdserve up --plan PLAN.json``: the emulated cluster of a saved plan on this host.

The plan's prefill and decode instances become workers on the synthetic backend (no model weights: the emulation is
of the modeled cluster's timing), each paced at the planned deployment's modeled clock times ``--time-scale`` (so a
plan of many GPUs runs on a laptop's cores: at scale 10 every step lasts ten times its modeled time), with the
plan's scheduler flags and the decode KV budget of the modeled deployment. Router, kvstore, identities and metrics
are the stack's defaults, secured as always.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.sim.emit_cluster import deployment_flag
from pdserve.sim.plan_file import Plan, load_plan


def scheduler_flags(plan: Plan) -> list[str]:
    out = []
    for f in fields(SchedulerOverrides):
        value = getattr(plan.overrides, f.name)
        if value is not None:
            out += ["--" + f.name.replace("_", "-"), str(value)]
    return out


def apply_plan(path: str, spec, a: argparse.Namespace) -> Plan:
    """Set ``spec`` (launcher/stack.py StackSpec) to the plan's emulated cluster; refuses flags the plan sets."""
    if getattr(a, "deployment", ""):
        raise ValueError("deployment: --plan sets every worker's modeled deployment; drop --deployment")
    if getattr(a, "model", None):
        raise ValueError("model: --plan runs the synthetic backend; drop --model")
    if a.time_scale <= 0:
        raise ValueError(f"time_scale: must be positive, got {a.time_scale}")
    plan = load_plan(path)
    spec.model = "synthetic"
    spec.pace = "realtime"
    spec.deployment = deployment_flag(plan)
    spec.colocated = plan.colocated
    spec.n_prefill, spec.n_decode = (0 if plan.colocated else plan.n_prefill), plan.n_decode
    sched = scheduler_flags(plan)
    spec.extra["prefill"] = spec.extra.get("prefill", []) + sched
    spec.extra["decode"] = spec.extra.get("decode", []) + sched + ["--kv-budget", "modeled"]
    if plan.calibration and not getattr(a, "calibration", None):
        a.calibration = plan.calibration  # the plan was made with it: the emulation runs with it
    return plan
