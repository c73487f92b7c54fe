"""``pdserve calibrate RESULT.. --out CAL.json``: fit the performance model to the user's own load-test results.

Each run (sim/calibration_inputs.py) is replayed in the simulator on the cluster the flags describe (one prefill and
one decode instance of ``--deployment`` by default, as ``pdserve simulate``): its requests' prompt and output
lengths, its rate, burstiness and concurrency cap. The per-kernel and per-request overheads of the deployment's
software on its GPU family (the constants ``python -m perfmodel.fit`` fits on published rows) are then fitted by
perfmodel/fit.py's Gauss-Newton so that the replays' mean TTFT and mean TPOT match the measured ones (relative
errors). The fit is printed (each run's figures before and after, each constant and how far it moved) and written
as a calibration file naming the deployment (perfmodel/calibration.py), which ``--calibration`` applies.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import dataclass

import numpy as np

from pdserve.perfmodel import calibration as cal
from pdserve.perfmodel import overheads
from pdserve.perfmodel.deployment import deployment_from_args
from pdserve.perfmodel.fit import TYPICAL, gauss_newton
from pdserve.sim.calibration_inputs import Measurement, check_model, read_results
from pdserve.sim.cluster import Cluster, SimRequest
from pdserve.sim.report import summary
from pdserve.workload.arrivals import arrival_stream

FIGURES = (("mean_ttft_ms", "mean TTFT (ms)"), ("mean_tpot_ms", "mean TPOT (ms)"),
           ("request_throughput", "throughput (req/s)"))
FITTED_ON = ("mean_ttft_ms", "mean_tpot_ms")  # the residuals; throughput is reported, not fitted
REL_STEP = 0.02  # finite differences of 2%: a replay's figures move in steps (whole batches), not smoothly


def replay_requests(m: Measurement) -> tuple[list[SimRequest], list[float]]:
    """Every request with a prompt of its own (no prefix shared), at the run's arrivals."""
    requests = [SimRequest([100 + i % 40_000] + [7] * (n - 1), out) for i, (n, out)
                in enumerate(zip(m.input_lens, m.output_lens))]
    if math.isinf(m.rate):
        return requests, [0.0] * len(requests)
    return requests, list(itertools.islice(arrival_stream(m.rate, m.burstiness, 0), len(requests)))


def replay(m: Measurement, spec_of) -> dict[str, float]:
    requests, offsets = replay_requests(m)
    result = Cluster(spec_of(m)).run(requests, offsets, m.max_concurrency)
    s = summary(result, m.max_concurrency)
    return {k: s[k] for k, _ in FIGURES}


@dataclass
class Fit:
    key: str
    before: dict[str, float]
    after: dict[str, float]
    predicted_before: list[dict[str, float]]
    predicted_after: list[dict[str, float]]


def fit(runs: list[Measurement], deployment, spec_of, parameters: tuple[str, ...] = cal.PARAMETERS) -> Fit:
    """``spec_of(run)``: the cluster a run was measured on (built anew for each replay, so it times with the trial
    constants)."""
    figures = [(i, k) for i, m in enumerate(runs) for k in FITTED_ON if k in m.measured]
    if len(figures) < len(parameters):
        raise ValueError(f"calibrate: {len(runs)} run(s) give {len(figures)} figure(s) to fit (mean TTFT, mean TPOT), "
                         f"fewer than the {len(parameters)} constants ({', '.join(parameters)}): add runs or fit "
                         "fewer (--fit)")
    before = cal.current(deployment)
    base = overheads._override

    def predict(theta: np.ndarray) -> list[dict[str, float]]:
        overheads.use_table(cal.trial_table(deployment, dict(before, **dict(zip(parameters, theta)))))
        return [replay(m, spec_of) for m in runs]

    def residuals(theta: np.ndarray) -> np.ndarray:
        predicted = predict(theta)
        return np.array([predicted[i][k] / runs[i].measured[k] - 1.0 for i, k in figures])

    try:
        start = np.array([before[p] for p in parameters])
        predicted_before = predict(start)
        typical = np.array([TYPICAL[p] for p in parameters])
        theta = gauss_newton(residuals, start, typical, iterations=12, tolerance=1e-4, rel_step=REL_STEP)
        after = dict(before, **dict(zip(parameters, (float(x) for x in theta))))
        predicted_after = predict(theta)
    finally:
        overheads.use_table(base)
    return Fit(cal.table_key(deployment), before, after, predicted_before, predicted_after)


def _pct(predicted: float, measured: float) -> str:
    return f"{predicted:10.2f} ({100 * (predicted / measured - 1):+6.1f}%)"


def report(runs: list[Measurement], f: Fit) -> list[str]:
    lines = [f"{'run / figure':<44} {'measured':>10} {'before':>19} {'after':>19}"]
    for m, pb, pa in zip(runs, f.predicted_before, f.predicted_after):
        lines.append(m.describe())
        for note in m.notes:
            lines.append(f"  note: {note}")
        for key, label in FIGURES:
            if key in m.measured:
                fitted = "" if key in FITTED_ON else "  (not fitted)"
                lines.append(f"  {label:<42} {m.measured[key]:>10.2f} {_pct(pb[key], m.measured[key])} "
                             f"{_pct(pa[key], m.measured[key])}{fitted}")
    lines.append(f"constants of {f.key}:")
    for name in cal.PARAMETERS:
        b, a = f.before[name], f.after[name]
        moved = f"{100 * (a / b - 1):+.1f}%" if b else "from 0"
        lines.append(f"  {name:<20} {cal.describe_value(name, b):>13} -> {cal.describe_value(name, a):>13} ({moved})")
    return lines


def cmd_calibrate(a: argparse.Namespace) -> int:
    from pdserve.sim.command import cluster_spec

    if not a.out:
        raise ValueError("out: where to write the calibration file (--out CAL.json)")
    parameters = tuple(p.strip() for p in a.fit.split(",") if p.strip())
    if not parameters or set(parameters) - set(cal.PARAMETERS):
        raise ValueError(f"fit: {a.fit!r}: choose among {', '.join(cal.PARAMETERS)}")
    deployment = deployment_from_args(a)  # --deployment with --model-config folded in
    runs = [m for path in a.results for m in read_results(path)]
    for m in runs:
        check_model(m, deployment.model)

    def spec_of(_run: Measurement):
        return cluster_spec(a)

    spec = cluster_spec(a)
    print(f"calibrating {cal.table_key(deployment)} on {spec.describe()} ({len(runs)} run(s), fitting "
          f"{', '.join(parameters)} to mean TTFT and TPOT)")
    f = fit(runs, deployment, spec_of, parameters)
    print("\n".join(report(runs, f)))
    payload = {
        "format": cal.FORMAT, "deployment": cal.deployment_text(deployment), "table_key": f.key,
        "cluster": spec.describe(), "parameters": {p: f.after[p] for p in parameters},
        "before": {p: f.before[p] for p in parameters},
        "fitted_range": {"mean_input_min": min(m.mean_input for m in runs),
                         "mean_input_max": max(m.mean_input for m in runs),
                         "mean_output_min": min(m.mean_output for m in runs),
                         "mean_output_max": max(m.mean_output for m in runs)},
        "runs": [{"name": m.name, "source": m.source, "requests": len(m.input_lens), "mean_input": m.mean_input,
                  "mean_output": m.mean_output, "rate": m.rate if not math.isinf(m.rate) else "inf",
                  "max_concurrency": m.max_concurrency, "measured": m.measured, "before": pb, "after": pa}
                 for m, pb, pa in zip(runs, f.predicted_before, f.predicted_after)],
    }
    with open(a.out, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=2)
    print(f"calibration for {payload['deployment']} written to {a.out}", file=sys.stderr)
    return 0
