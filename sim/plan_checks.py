"""``pdserve plan``'s flags checked before any search: durations with their unit, GPU names, the flags a plan cannot
honour, ``--emit`` targets and ``--calibration``; each refusal names its flag."""

from __future__ import annotations

import argparse
import math
import re

from pdserve.perfmodel.deployment import Deployment
from pdserve.perfmodel.hardware import gpu


def emit_check(a: argparse.Namespace) -> None:
    """Refuse an unknown --emit target or a missing --out before the search, not after it."""
    if getattr(a, "emit", None):
        from pdserve.sim.emit import check_targets

        check_targets(a.emit, a.out)


def load_calibration_arg(a: argparse.Namespace) -> str | None:
    """Applies --calibration for this process (perfmodel/calibration.py); returns its path for the plan file."""
    path = getattr(a, "calibration", None)
    if not path:
        return None
    from pdserve.perfmodel.calibration import apply_calibration

    apply_calibration(path, a.deployment if getattr(a, "deployment", "") else None)
    return path


def parse_duration(text: str, name: str) -> float:
    """``2s``, ``500ms`` -> seconds. A bare number is refused: ``--ttft-p90 2000`` read as seconds (or as
    milliseconds, as ``--goodput`` reads it) would silently plan for something else than meant."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*", str(text))
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{name}: expected a positive duration like 2s or 50ms, got {text!r}")
    if m.group(2) is None:
        raise ValueError(f"{name}: {text!r} has no unit; write {m.group(1)}ms or {m.group(1)}s")
    return float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)


def plan_hardware(text: str | None, base: Deployment, deployment_names_it: bool) -> list[str]:
    """The GPU types to search: ``--hardware`` if given, else the one ``--deployment`` names, else the two H20s.
    An unknown name is refused with the known ones."""
    flag = "--hardware" if text is not None else "--deployment"
    if text is None:
        text = base.hardware if deployment_names_it else "H20-141G,H20-96G"
    names = [h.strip() for h in text.split(",") if h.strip()]
    if not names:
        raise ValueError(f"{flag}: name at least one GPU profile")
    try:
        return [gpu(h).name for h in names]
    except ValueError as exc:  # "hardware: unknown GPU 'X'; known: ...": say which flag to change
        raise ValueError(f"{flag}: {str(exc).removeprefix('hardware: ')}") from None


def refuse_unhonoured(a: argparse.Namespace) -> None:
    """Flags the workload group offers that a plan cannot honour: refused, never silently ignored."""
    if a.max_concurrency is not None:
        raise ValueError("max_concurrency: plan searches request rates (open-loop arrivals); a concurrency cap is "
                         "not planned for (pdserve simulate --max-concurrency runs one)")
    if a.trace_time_scale != 1.0:
        raise ValueError("trace_time_scale: plan replaces a trace's timestamps with arrivals at each probed rate, so "
                         "there is no trace time to scale (pdserve simulate replays a trace's own times)")
    if a.request_rate <= 0 or math.isnan(a.request_rate):
        raise ValueError(f"request_rate: must be positive, got {a.request_rate}")
    if not math.isinf(a.request_rate) and a.probes is not None:
        raise ValueError("probes: with --request-rate each candidate is simulated once, at that rate")
