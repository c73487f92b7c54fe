"""A calibration file: the performance model's fitted constants for one deployment, fitted to a user's own runs by
``pdserve calibrate`` (sim/calibrate.py), and applied with ``--calibration CAL.json``.

It holds the constants ``python -m perfmodel.fit`` fits on published rows (the per-kernel and per-request overheads of
one software profile on one GPU family, perfmodel/overheads.py), the deployment they were fitted for, and the range of
workloads they were fitted on (prompt and output lengths, the load), so that predictions far outside it are warned
about. Applying it overlays those constants on data/calibration.json's for the whole process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pdserve.perfmodel import overheads
from pdserve.perfmodel.deployment import Deployment, parse_deployment
from pdserve.perfmodel.kernels import kernels_per_layer
from pdserve.perfmodel.software import SOFTWARE

FORMAT = "pdserve-calibration/2"
# Format 1 fitted an overhead per layer; 2 fits one per kernel launched (perfmodel/kernels.py). A format-1 file is read
# by dividing its per-layer figure by the mean kernels per layer of the model it was fitted for: the same step times.
FORMAT_PER_LAYER = "pdserve-calibration/1"
PARAMETERS = ("kernel_overhead_s", "request_overhead_s")
# how far outside the fitted range a prediction may go before it is warned about
RANGE_FACTOR = 2.0


def table_key(d: Deployment) -> str:
    """The overheads table's entry a deployment's timing reads (its software's, or the release it is fitted as)."""
    sw = SOFTWARE[d.software]
    return f"{sw.fitted_as or sw.name}@{overheads.family(d.hardware)}"


def current(d: Deployment) -> dict[str, float]:
    """The constants a deployment's timing uses now."""
    o = d.timing().overheads
    return {"kernel_overhead_s": o.kernel_overhead_s, "request_overhead_s": o.request_overhead_s}


def describe_value(name: str, seconds: float) -> str:
    """A constant in the unit people read it in: microseconds per kernel, milliseconds per request."""
    return f"{seconds * 1e6:.2f} us" if name == "kernel_overhead_s" else f"{seconds * 1e3:.2f} ms"


def trial_table(d: Deployment, values: dict[str, float]) -> dict:
    """data/calibration.json's table with ``values`` for the deployment's entry."""
    table = json.loads(json.dumps(overheads._table()))  # a deep copy of what is in force
    entry = table.setdefault(table_key(d), {})
    entry.update(values)
    return table


def deployment_text(d: Deployment) -> str:
    keys = ("model", "hardware", "gpus", "tp", "ep", "dp_attention", "dp", "software", "kv_precision", "gpus_per_node",
            "weight_precision", "model_config")
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k in keys
                    if (v := getattr(d, k, "")) != "" and not (k == "dp" and not v))  # dp=0: the default layout


def load(path: str | Path) -> dict:
    path = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"calibration: {path}: no such file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"calibration: {path}: not a JSON file ({exc})") from None
    if not isinstance(data, dict) or data.get("format") not in (FORMAT, FORMAT_PER_LAYER):
        raise ValueError(f"calibration: {path}: not a calibration file (format {FORMAT!r}; pdserve calibrate writes "
                         "one)")
    fitted = parse_deployment(str(data.get("deployment", "")), None, "calibration deployment")
    params = data.get("parameters")
    names = ("layer_overhead_s", "request_overhead_s") if data["format"] == FORMAT_PER_LAYER else PARAMETERS
    if not isinstance(params, dict) or set(params) - set(names) or not params:
        raise ValueError(f"calibration: {path}: 'parameters' must hold some of {', '.join(names)}")
    for k, v in params.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise ValueError(f"calibration: {path}: parameters.{k} must be a number of seconds in [0, 1), got {v!r}")
    if "layer_overhead_s" in params:
        timing = fitted.timing()
        params["kernel_overhead_s"] = params.pop("layer_overhead_s") / kernels_per_layer(timing.model, timing.gpu)
    return data


def apply_calibration(path: str | Path, deployment: str | None = None, warn=None) -> dict:
    """Use the file's constants from now on in this process; returns the file. ``deployment`` (the command's
    ``--deployment``): when it differs from the one fitted for, the constants still apply to its software and GPU
    family, with a warning that this extrapolates."""
    data = load(path)
    fitted = parse_deployment(data["deployment"], None, "calibration deployment")
    warn = warn or (lambda line: print(f"pdserve: warning: {line}", file=sys.stderr))
    if deployment:
        target = parse_deployment(deployment)
        if table_key(target) != table_key(fitted):
            raise ValueError(f"calibration: fitted for {table_key(fitted)} ({data['deployment']}); --deployment is "
                             f"{table_key(target)}: its constants would not apply")
        if deployment_text(target) != deployment_text(fitted):
            warn(f"calibration fitted for {data['deployment']}, applied to {deployment_text(target)}: extrapolating "
                 "to another deployment")
    overheads.use_table(trial_table(fitted, data["parameters"]))
    return data


def check_range(data: dict, mean_input: float, mean_output: float, warn=None) -> list[str]:
    """Warnings for a workload far (more than RANGE_FACTOR x) outside the prompt and output lengths fitted on."""
    warn = warn or (lambda line: print(f"pdserve: warning: {line}", file=sys.stderr))
    fitted = data.get("fitted_range") or {}
    lines = []
    for name, value in (("input", mean_input), ("output", mean_output)):
        lo, hi = fitted.get(f"mean_{name}_min"), fitted.get(f"mean_{name}_max")
        if lo and hi and not lo / RANGE_FACTOR <= value <= hi * RANGE_FACTOR:
            lines.append(f"mean {name} length {value:.0f} tokens is far outside the {lo:.0f}-{hi:.0f} the calibration "
                         "was fitted on: extrapolating")
    for line in lines:
        warn(line)
    return lines
