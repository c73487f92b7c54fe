"""How sure a modeled figure is: the simulator's errors on the held-out public runs closest to a deployment.

``python -m pdserve.sim.error_band`` replays the validation table (sim/validate.py) and stores in
sim/data/validation_errors.json every replayed held-out row's
errors with what makes it comparable (its model, software profile, GPU, P/D or colocated). ``pdserve plan`` prints, next to
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
    # where the band left out the GPU or the model: what the model's own held-out rows on that GPU say, under other
    # software or the other kind (P/D or colocated); "" when there are none
    on_gpu: str = ""

    def describe(self) -> str:
        if not self.rows:
            return "no held-out run replayed to compare with"
        qualified = " of this software and kind" if self.on_gpu else ""
        miss = f"; no held-out {self.dropped} run{qualified}, so the nearest" if self.dropped else ""
        return f"held-out error band over {len(self.rows)} {self.matched} rows{miss}: {_spans(self.ranges)}{self.on_gpu}"


def _spans(ranges: dict[str, tuple[float, float]]) -> str:
    return ", ".join(f"{name} {lo:+.0%}..{hi:+.0%}" for name, (lo, hi) in ranges.items())


def _ranges(chosen: list[dict]) -> dict[str, tuple[float, float]]:
    ranges = {}
    for name, figure in BANDED:
        errs = [r["errors"][figure] for r in chosen if figure in r["errors"]]
        if errs:
            ranges[name] = (min(errs), max(errs))
    return ranges


def _on_gpu(table: list[dict], model: str, gpu: str, band_rows: list[str]) -> str:
    """The model's held-out rows on the GPU that the band left out (other software, or the other kind), which a band
    matched on the software or the kind does not show: a plan on a GPU whose public runs of that model miss should say
    so whichever release it plans."""
    rows = [r for r in table if r.get("hardware") == gpu and r.get("model") == model and r["id"] not in band_rows]
    if not rows:
        return ""
    kinds = sorted({f"{r['software']} {'P/D' if r.get('pd') else 'colocated'}" for r in rows})
    return f"; on the {gpu} itself, {len(rows)} held-out {model} rows ({', '.join(kinds)}): {_spans(_ranges(rows))}"


def load(path: Path = ERRORS) -> list[dict]:
    return json.loads(path.read_text()) if path.exists() else []


def band(d: Deployment, pd: bool, table: list[dict] | None = None) -> Band:
    """The error band of the held-out rows closest to ``d`` (``pd``: disaggregated): same model, software, GPU and
    P/D-ness; failing that without the GPU, then on the GPU without the P/D-ness, then the model and software alone;
    then the same four steps over every model of the software; then any row. A model's own rows come first: another
    model's misses (a front end a source does not explain, kernels another architecture runs) say little about it."""
    table = load() if table is None else table
    gpu = d.gpu().name
    kind = "P/D" if pd else "colocated"
    wanted = {"model": d.model, "software": d.software, "hardware": gpu, "pd": pd}
    labels = {"model": d.model, "software": d.software, "hardware": gpu, "pd": kind}
    orders = (("hardware", "pd"), ("pd",), ("hardware",), ())
    tries = [("model", "software") + rest for rest in orders] + [("software",) + rest for rest in orders] + [()]
    for keys in tries:
        chosen = [r for r in table if all(r.get(k) == wanted[k] for k in keys)]
        if chosen:
            matched = ", ".join(labels[k] for k in keys) or "all"
            dropped = " ".join(labels[k] for k in wanted if k not in keys and k != "software")
            if not keys:
                dropped = " ".join(labels[k] for k in wanted)
            ids = [r["id"] for r in chosen]
            on_gpu = "" if {"model", "hardware"} <= set(keys) else _on_gpu(table, d.model, gpu, ids)
            return Band(ids, matched, dropped, _ranges(chosen), on_gpu)
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
        out.append({"id": r.row_id, "model": d.model, "software": d.software, "hardware": d.gpu().name, "pd": r.pd,
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
