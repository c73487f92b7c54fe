"""Where the performance model is trusted: a model x GPU table of held-out validation rows and their mean error.

Each cell counts the held-out rows of both validation sets that ran that model on that GPU: step-level rows
(perfmodel/data/published_measurements.csv, priced by ``python -m pdserve.perfmodel.validate``) and serving rows
(sim/data/serving_runs.csv, replayed by ``python -m pdserve.sim.validate``), with the mean |error| of the modeled ones
(a serving row contributes each of its figures that has a goal). A cell with no held-out row says so: no public
measurement the model was checked against. ``python -m pdserve.sim.coverage`` prints the table as the docs show it
(``--no-serving`` counts the serving rows without replaying them, which takes minutes).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field

from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.perfmodel import validate as step_validation
from pdserve.perfmodel.hardware import GPUS
from pdserve.perfmodel.models import CATALOG, model_profile
from pdserve.sim import validate as serving_validation


@dataclass
class Cell:
    held_out: int = 0
    calibration: int = 0
    errors: list[float] = field(default_factory=list)  # |error| of the modeled held-out figures
    priced: int = 0  # held-out rows the model priced (step) or replayed (serving)
    within: int = 0  # of their figures, those within the goal

    @property
    def mean_error(self) -> float | None:
        return sum(self.errors) / len(self.errors) if self.errors else None


def _model_of(text: str) -> str:
    """The profile a row's free-text model names (DeepSeek-R1-0528, "DeepSeek-V3 + DeepSeek-R1", qwen3-32b, ...)."""
    t = text.strip()
    if t.lower().startswith("deepseek"):
        return "deepseek-r1"
    try:
        return model_profile(t.split(" ")[0]).name
    except ValueError:
        return t


def step_cells(results: list | None = None) -> dict[tuple[str, str], Cell]:
    rows = {r["id"]: r for r in step_validation.rows()}
    results = results if results is not None else step_validation.validate()
    cells: dict[tuple[str, str], Cell] = {}
    for v in results:
        row = rows[v.row_id]
        model = "deepseek-r1-awq" if "awq" in row["precision"] else _model_of(row["model"])
        cell = cells.setdefault((model, step_validation._gpu_name(row["hardware"])), Cell())
        if v.split == "held-out":
            cell.held_out += 1
            if v.error is not None:
                cell.errors.append(abs(v.error))
                cell.priced += 1
                cell.within += v.within_goal
        else:
            cell.calibration += 1
    return cells


def _serving_key(row: dict) -> tuple[str, str]:
    if row["deployment"]:  # a P/D row names each role's pool: its cell is its first pool's model and GPU
        d = serving_validation.pools(row["deployment"], SchedulerOverrides())[0].deployment
        return d.profile().name, d.gpu().name
    hardware = re.sub(r"\s*\(.*", "", row["hardware"]).replace(" SXM", "").strip()
    try:
        gpu = step_validation._gpu_name(hardware)
    except ValueError:
        gpu = hardware
    return _model_of(row["model"]), gpu


def serving_cells(replay: bool = True) -> dict[tuple[str, str], Cell]:
    rows = serving_validation.rows()
    replays = {r.row_id: r for r in serving_validation.validate()} if replay else {}
    cells: dict[tuple[str, str], Cell] = {}
    for row in rows:
        cell = cells.setdefault(_serving_key(row), Cell())
        if row["split"] != "held-out":
            cell.calibration += 1
            continue
        cell.held_out += 1
        r = replays.get(row["id"])
        if r is not None and r.figures:
            goal = [f for f in r.figures if f.goal is not None]
            cell.errors += [abs(f.error) for f in goal]
            cell.priced += 1
            cell.within += sum(not f.missed for f in goal)
    return cells


def _cell_text(step: Cell | None, serving: Cell | None) -> str:
    parts = []
    for label, c in (("step", step), ("serving", serving)):
        if c and c.held_out:
            err = f" {c.mean_error:.0%}" if c.mean_error is not None else " (none priced)"
            parts.append(f"{c.held_out} {label}{err}")
    return "; ".join(parts) or "-"


def coverage_details(step: dict, serving: dict) -> str:
    """Per model x GPU with held-out rows: rows, rows priced, mean |error| and figures within the goal."""
    lines = ["| model | GPU | step rows (priced) | mean abs error | within +-15% | serving rows (replayed) | "
             "mean abs error | figures within goal |", "|---|---|---|---|---|---|---|---|"]
    for key in sorted(set(step) | set(serving)):
        cols = []
        for c in (step.get(key), serving.get(key)):
            if not c or not c.held_out:
                cols += ["-", "-", "-"]
                continue
            err = f"{c.mean_error:.1%}" if c.mean_error is not None else "-"
            cols += [f"{c.held_out} ({c.priced})", err, f"{c.within} of {len(c.errors)}" if c.errors else "-"]
        if any(x != "-" for x in cols):
            lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(cols) + " |")
    return "\n".join(lines)


def coverage_markdown(step: dict, serving: dict, models: list[str] | None = None,
                      gpus: list[str] | None = None) -> str:
    """Rows: models; columns: GPUs; each cell 'N step, mean |error|; M serving, mean |error|' of held-out rows."""
    models = models or list(CATALOG) + ["deepseek-r1-awq"]
    gpus = gpus or list(GPUS)
    lines = ["| model \\ GPU | " + " | ".join(gpus) + " |", "|---|" + "---|" * len(gpus)]
    for m in models:
        lines.append(f"| {m} | " + " | ".join(_cell_text(step.get((m, g)), serving.get((m, g))) for g in gpus) + " |")
    extra = sorted({k for k in list(step) + list(serving) if k[0] not in models or k[1] not in gpus})
    if extra:
        lines.append("")
        lines.append("Rows outside the table (a model or GPU without a profile): " + "; ".join(
            f"{m} on {g}: {_cell_text(step.get((m, g)), serving.get((m, g)))}" for m, g in extra))
    return "\n".join(lines)


def held_out_counts(step: dict, serving: dict) -> tuple[dict[str, int], dict[str, int]]:
    """Held-out rows (both sets) per model and per GPU: the validation status ``pdserve perf --list`` prints."""
    per_model: dict[str, int] = {}
    per_gpu: dict[str, int] = {}
    for cells in (step, serving):
        for (m, g), c in cells.items():
            per_model[m] = per_model.get(m, 0) + c.held_out
            per_gpu[g] = per_gpu.get(g, 0) + c.held_out
    return per_model, per_gpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-serving", action="store_true", help="count the serving rows without replaying them")
    a = ap.parse_args(argv)
    step, serving = step_cells(), serving_cells(replay=not a.no_serving)
    print(coverage_markdown(step, serving) + "\n\n" + coverage_details(step, serving))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
