"""``pdserve calibrate`` out of sample: calibrate on some points of a published sweep (sim/data/serving_runs.csv),
predict the others, and show each held-out point's error before (the published fit, data/calibration.json) and
after (the calibration).

The split is fixed before the fit, on the command line: ``--calibrate-on`` rows are the only ones the fit sees;
every ``--predict`` row is held out. ``python -m pdserve.sim.calibration_validate --markdown`` prints the table
docs/cluster-planning.md shows. Each row is replayed as sim/validate.py replays it (its deployment, launch flags and
workload), as a ``Measurement`` of pdserve calibrate's own kind.
"""

from __future__ import annotations

import argparse

from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.engine.sched.scheduler import SchedulerRole as Role
from pdserve.perfmodel import overheads
from pdserve.perfmodel.calibration import PARAMETERS, describe_value
from pdserve.perfmodel.deployment import parse_deployment
from pdserve.sim.calibrate import FIGURES, fit, replay
from pdserve.sim.calibration_inputs import Measurement
from pdserve.sim.cluster import ClusterSpec, Pool
from pdserve.sim.validate import measured, rows, workload

SWEEP = "ix-pub-sgl0512-tp8-1k1k-c"
CALIBRATE_ON = (f"{SWEEP}4", f"{SWEEP}64")
PREDICT = tuple(f"{SWEEP}{c}" for c in (8, 16, 32)) + tuple(f"ix-pub-sgl0512-tp8-8k1k-c{c}" for c in (4, 16, 64))
COLUMNS = {"mean_ttft_ms": "mean_ttft_ms", "mean_tpot_ms": "mean_tpot_ms", "request_throughput": "request_throughput"}


def measurement(row: dict) -> Measurement:
    if row["not_modeled"]:
        raise ValueError(f"rows: {row['id']} is not replayable ({row['not_modeled']})")
    requests, _, concurrency, rate = workload(row["workload"])
    got = {k: v for k, col in COLUMNS.items() if (v := measured(row, col)) is not None}
    return Measurement(row["id"], "published", [len(r.prompt_ids) for r in requests],
                       [r.output_len for r in requests], rate, 1.0, concurrency, got)


def spec_of(by_id: dict[str, dict]):
    def build(m: Measurement) -> ClusterSpec:
        row = by_id[m.name]
        return ClusterSpec([Pool(Role.BOTH, parse_deployment(row["deployment"]), 1,
                                 SchedulerOverrides.parse(row["scheduler"]))])
    return build


def run(calibrate_on: list[str], predict: list[str]) -> tuple[dict, list[tuple[Measurement, dict, dict]]]:
    by_id = {r["id"]: r for r in rows()}
    unknown = [i for i in calibrate_on + predict if i not in by_id]
    if unknown:
        raise ValueError(f"rows: no such row: {', '.join(unknown)}")
    if set(calibrate_on) & set(predict):
        raise ValueError("rows: a row is either calibrated on or predicted, never both")
    deployments = {by_id[i]["deployment"] for i in calibrate_on + predict}
    if len(deployments) != 1:
        raise ValueError(f"rows: one deployment per sweep, got {', '.join(sorted(deployments))}")
    deployment = parse_deployment(deployments.pop())
    build = spec_of(by_id)
    f = fit([measurement(by_id[i]) for i in calibrate_on], deployment, build, PARAMETERS)
    held = [measurement(by_id[i]) for i in predict]
    before = [replay(m, build) for m in held]
    base = overheads._override
    from pdserve.perfmodel.calibration import trial_table

    overheads.use_table(trial_table(deployment, f.after))
    try:
        after = [replay(m, build) for m in held]
    finally:
        overheads.use_table(base)
    return {"fit": f, "calibrate_on": calibrate_on}, list(zip(held, before, after))


def markdown(info: dict, held: list[tuple[Measurement, dict, dict]]) -> str:
    f = info["fit"]
    lines = [f"Calibrated on {', '.join(info['calibrate_on'])}: "
             + "; ".join(f"{p} {describe_value(p, f.before[p])} -> {describe_value(p, f.after[p])}" for p in PARAMETERS),
             "",
             "| held-out row | " + " | ".join(f"{label}: measured, before, after" for _, label in FIGURES) + " |",
             "|---" * (len(FIGURES) + 1) + "|"]
    for m, b, a in held:
        cells = []
        for key, _ in FIGURES:
            v = m.measured.get(key)
            cells.append(f"{v:.4g}, {100 * (b[key] / v - 1):+.0f}%, {100 * (a[key] / v - 1):+.0f}%" if v else "-")
        lines.append(f"| {m.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibrate-on", default=",".join(CALIBRATE_ON), help="row ids the fit sees")
    ap.add_argument("--predict", default=",".join(PREDICT), help="held-out row ids")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    info, held = run(split(a.calibrate_on), split(a.predict))
    print(markdown(info, held))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
