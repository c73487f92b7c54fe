"""Fits every calibrated constant by least squares over the named calibration rows, and writes data/calibration.json.

``python -m perfmodel.fit`` (add ``--dry-run`` to print without writing). Each constant is fitted only on the rows
listed for it in :data:`PLAN`; every other row of the CSV is held out and never influences a constant. The residuals
are relative errors (predicted / measured - 1), minimized jointly by Gauss-Newton with a finite-difference Jacobian
(the model is nearly linear in overheads), with every constant kept non-negative.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import numpy as np

from pdserve.perfmodel import overheads
from pdserve.perfmodel.validate import evaluate, format_table, rows, validate

# (table key, constant): the calibration rows it is fitted on. Rows must be marked "calibration" in the CSV.
PLAN: dict[tuple[str, str], list[str]] = {
    ("sglang@hopper", "kernel_overhead_s"): ["h200-tp8-c4"],
    ("sglang@hopper", "request_overhead_s"): ["h100x16-tp16-ttft-128"],
    ("global", "internode_allreduce_latency_s"): ["h100x16-tp16-c1"],
    ("sglang@h20", "kernel_overhead_s"): ["h20-ant-decode-bs8-ep16"],
    ("vllm-awq@hopper", "kernel_overhead_s"): ["h100-awq-c1"],
    ("vllm-awq@hopper", "request_overhead_s"): ["h100-awq-ttft-128"],
    ("vllm@hopper", "kernel_overhead_s"): ["h200-vllm-tp8-c4"],
    ("vllm@hopper", "request_overhead_s"): ["h200-vllm-tp8-c4-ttft"],
}
# Each constant's size in practice: where the published fit starts, and what a fit's finite differences are relative to
# when the constant itself is smaller (or zero). pdserve calibrate uses the same table.
TYPICAL = {"kernel_overhead_s": 3e-6, "request_overhead_s": 10e-3, "internode_allreduce_latency_s": 30e-6}


def _table(theta: np.ndarray, calibration: list[str]) -> dict:
    table: dict = {}
    for (key, name), value in zip(PLAN, theta):
        entry = table.setdefault(key, {})
        entry[name] = float(value)
    for key, entry in table.items():
        if key != "global":
            entry["calibration_rows"] = sorted({r for (k, _), rs in PLAN.items() if k == key for r in rs})
    table["global"]["calibration_rows"] = sorted(PLAN[("global", "internode_allreduce_latency_s")])
    table["_about"] = ("written by python -m perfmodel.fit: least squares over the named calibration rows of "
                       "published_measurements.csv; all other rows are held out")
    table["_calibration_rows"] = calibration
    return table


def _residuals(theta: np.ndarray, calib_rows: list[dict]) -> np.ndarray:
    overheads.use_table(_table(theta, [r["id"] for r in calib_rows]))
    out = []
    for r in calib_rows:
        v = evaluate(r)
        out.append(v.error if v.error is not None else 0.0)
    return np.array(out)


def fit(iterations: int = 12) -> dict:
    all_rows = {r["id"]: r for r in rows()}
    names = sorted({r for rs in PLAN.values() for r in rs})
    for name in names:
        if all_rows[name]["split"] != "calibration":
            raise ValueError(f"{name}: fitted on, but marked {all_rows[name]['split']!r} in the CSV")
    unused = [i for i, r in all_rows.items() if r["split"] == "calibration" and i not in names]
    if unused:
        raise ValueError(f"calibration rows no constant is fitted on: {', '.join(unused)}")
    calib = [all_rows[n] for n in names]
    theta = np.array([TYPICAL[name] for _, name in PLAN])
    try:
        return _table(gauss_newton(lambda t: _residuals(t, calib), theta, theta, iterations), names)
    finally:
        overheads.use_table(None)


BACKTRACKS = 8  # halvings of a Gauss-Newton step before the fit stops where it is


def gauss_newton(residuals: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, typical: np.ndarray,
                 iterations: int = 12, tolerance: float = 1e-6, rel_step: float = 1e-3) -> np.ndarray:
    """Non-negative constants minimizing the sum of squared residuals: damped Gauss-Newton steps (each halved until
    it lowers the squared residuals) with a finite-difference Jacobian (the model is nearly linear in its
    overheads). The one fitting routine: this module's fit over the
    published rows and ``pdserve calibrate``'s over a user's own runs (perfmodel/calibration.py) both use it.
    ``rel_step``: the finite difference, relative to each constant or to its ``typical`` size when the constant is
    smaller (zero included); a whole simulated run responds in steps, so its fit needs a wider one than the step-time
    rows. The step must not have an absolute floor: constants range from microseconds per kernel to a tenth of a second
    per request, and a floor sized for one is a coarse step for the other (a 1e-7 s floor was 3.5% of a 2.8 us
    per-kernel figure, and moved a calibration's per-request overhead from 367 to 779 ms)."""
    theta = np.asarray(theta, dtype=float)
    typical = np.abs(np.asarray(typical, dtype=float))
    r0 = residuals(theta)
    for _ in range(iterations):
        jac = np.empty((len(r0), len(theta)))
        for j in range(len(theta)):
            step = np.zeros_like(theta)
            step[j] = max(abs(theta[j]), typical[j]) * rel_step
            jac[:, j] = (residuals(theta + step) - r0) / step[j]
        delta, *_ = np.linalg.lstsq(jac, -r0, rcond=None)
        full = delta
        # damped: a step is taken only if it lowers the squared residuals, halved until it does (a replay's figures
        # move in steps, so a full Gauss-Newton step can overshoot into a worse basin)
        for _ in range(BACKTRACKS):
            trial = np.maximum(theta + delta, 0.0)
            r_trial = residuals(trial)
            if r_trial @ r_trial < r0 @ r0:
                break
            delta = delta / 2
        else:
            break  # no step lowers them: theta and r0 stay (the trial's table is the caller's to reset)
        theta, r0 = trial, r_trial
        if np.max(np.abs(full) / np.maximum(np.abs(theta), 1e-12)) < tolerance:  # the step asked for, not the damped
            break
    return theta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="print the fit without writing data/calibration.json")
    a = ap.parse_args(argv)
    table = fit()
    print(json.dumps(table, indent=2))
    if not a.dry_run:
        overheads.CALIBRATION.write_text(json.dumps(table, indent=2) + "\n")
        overheads.use_table(None)
        print(f"wrote {overheads.CALIBRATION}\n")
        print(format_table(validate()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
