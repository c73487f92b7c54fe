"""Serving-stack overheads per software and hardware family: fitted, never guessed.

Per-kernel, per-step and per-request overheads (launch gaps and small kernels, scheduling, sampling, API hops) are
what the rooflines do not see; the per-kernel one is charged for every kernel a forward launches (kernels.py). They
depend on the serving stack *and* the GPU (an H20 has 78 SMs against an H100's 132, so its small kernels are slower),
so each (software, family) pair has its own figures, fitted by
``python -m perfmodel.fit`` on named calibration rows of data/published_measurements.csv and stored in
data/calibration.json together with those row names. A pair without a fit falls back to the Hopper figures and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CALIBRATION = Path(__file__).resolve().parent / "data" / "calibration.json"
FITTED = ("kernel_overhead_s", "request_overhead_s")


@dataclass(frozen=True)
class Overheads:
    kernel_overhead_s: float  # per kernel a forward launches (kernels.py counts them)
    step_overhead_s: float  # per forward step: scheduling, sampling, graph replay
    request_overhead_s: float  # per request, on TTFT: HTTP, tokenization, scheduler hops
    fitted_on: tuple[str, ...] = ()
    source: str = ""


def family(gpu_name: str) -> str:
    name = gpu_name.upper()
    return "h20" if name == "H20" or name.startswith("H20-") else "hopper"  # not H200


_override: dict | None = None


@lru_cache(maxsize=1)
def _stored() -> dict:
    if not CALIBRATION.exists():
        return {}
    return json.loads(CALIBRATION.read_text())


def _table() -> dict:
    return _override if _override is not None else _stored()


def use_table(table: dict | None) -> None:
    """Evaluate with ``table`` instead of data/calibration.json (the fit's trial values); None restores the file."""
    global _override
    _override = table
    _stored.cache_clear()


def global_constant(name: str, default: float) -> float:
    """A fitted constant that belongs to no software profile (e.g. the inter-node all-reduce latency)."""
    return float(_table().get("global", {}).get(name, default))


def overheads(software: str, gpu_name: str, defaults: dict[str, float]) -> Overheads:
    """The fitted overheads of ``software`` on ``gpu_name``'s family, else its Hopper fit, else ``defaults``."""
    table = _table()
    key = f"{software}@{family(gpu_name)}"
    values = dict(defaults)
    rows: list[str] = []
    used = []
    for candidate in dict.fromkeys((f"{software}@hopper", key)):  # the family's own fit overrides Hopper's
        entry = table.get(candidate)
        if entry is None:
            continue
        values.update({k: entry[k] for k in FITTED if k in entry})
        rows += entry.get("calibration_rows", [])
        used.append(f"{candidate} ({', '.join(k for k in FITTED if k in entry)})")
    source = "; ".join(used) if used else f"defaults (no fit for {key})"
    if used and key not in table:
        source += f"; no fit for {key}"
    return Overheads(values["kernel_overhead_s"], values["step_overhead_s"], values["request_overhead_s"], tuple(rows),
                     source)
