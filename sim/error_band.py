"""How sure a modeled figure is: the simulator's errors on the held-out public runs closest to a deployment.

``python -m pdserve.sim.error_band`` replays the validation table (sim/validate.py) and stores in
sim/data/validation_errors.json every replayed held-out row's
errors with what makes it comparable (its software profile, GPU, P/D or colocated). ``pdserve plan`` prints, next to
each shape it recommends, the band of the rows with the same software, hardware and P/D-ness, or the closest it has
(saying which it dropped), so a recommendation resting on mechanisms no held-out run has tested says so.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.perfmodel.deployment import Deployment
from pdserve.sim.validate import Replay, pools, rows, validate

ERRORS = Path(__file__).resolve().parent / "data" / "validation_errors.json"
BANDED = (("throughput", "out tok/s"), ("TTFT", "mean TTFT"), ("TPOT", "mean TPOT"))


@dataclass(frozen=True)
class Band:
    rows: list[str]
    matched: str  # what the rows share with the deployment, e.g. "sglang, H200, colocated"
    dropped: str  # what no held-out row matched ("" for an exact match)
    ranges: dict[str, tuple[float, float]]  # figure -> (min, max) relative error

    def describe(self) -> str:
        if not self.rows:
            return "no held-out run replayed to compare with"
        spans = ", ".join(f"{name} {lo:+.0%}..{hi:+.0%}" for name, (lo, hi) in self.ranges.items())
        miss = f"; no held-out {self.dropped} run, so the nearest" if self.dropped else ""
        return f"held-out error band over {len(self.rows)} {self.matched} rows{miss}: {spans}"


def load(path: Path = ERRORS) -> list[dict]:
    return json.loads(path.read_text()) if path.exists() else []


def band(d: Deployment, pd: bool, table: list[dict] | None = None) -> Band:
    """The error band of the held-out rows closest to ``d`` (``pd``: disaggregated): same software, GPU and P/D-ness;
    failing that without the GPU, then on the GPU without the P/D-ness, then the software alone, then any row."""
    table = load() if table is None else table
    gpu = d.gpu().name
    kind = "P/D" if pd else "colocated"
    tries = (({"software": d.software, "hardware": gpu, "pd": pd}, f"{d.software}, {gpu}, {kind}", ""),
             ({"software": d.software, "pd": pd}, f"{d.software}, {kind}", gpu),
             ({"software": d.software, "hardware": gpu}, f"{d.software}, {gpu}", kind),
             ({"software": d.software}, d.software, f"{gpu} {kind}"),
             ({}, "all", f"{d.software} {gpu} {kind}"))
    for keys, matched, dropped in tries:
        chosen = [r for r in table if all(r[k] == v for k, v in keys.items())]
        if chosen:
            ranges = {}
            for name, figure in BANDED:
                errs = [r["errors"][figure] for r in chosen if figure in r["errors"]]
                if errs:
                    ranges[name] = (min(errs), max(errs))
            return Band([r["id"] for r in chosen], matched, dropped, ranges)
    return Band([], "", "", {})


def error_rows(replays: list[Replay]) -> list[dict]:
    """Each replayed held-out row's goal-figure errors and what makes it comparable (the decode side's software and
    GPU for a P/D row)."""
    by_id = {r["id"]: r for r in rows()}
    out = []
    for r in replays:
        if r.note or r.split != "held-out":
            continue
        d = pools(by_id[r.row_id]["deployment"], SchedulerOverrides())[-1].deployment
        out.append({"id": r.row_id, "software": d.software, "hardware": d.gpu().name, "pd": r.pd,
                    "errors": {f.name: round(f.error, 4) for f in r.figures}})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="replay the validation table and store the held-out rows' errors")
    ap.add_argument("--jobs", type=int, default=0, help="processes replaying rows (default: one per core)")
    ap.add_argument("--out", default=str(ERRORS), help="where to write them")
    a = ap.parse_args(argv)
    Path(a.out).write_text(json.dumps(error_rows(validate(jobs=a.jobs)), indent=1) + "\n")
    print(f"held-out errors written to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
