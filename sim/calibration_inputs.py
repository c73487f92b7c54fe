"""The load-test results ``pdserve calibrate`` reads, in the three formats users have, as one measurement each:

- ``pdserve bench serve --save-result`` JSON: its per-request records (``requests``) and vLLM's keys;
- ``vllm bench serve --save-result`` JSON (vllm/benchmarks/serve.py): vLLM's keys, with ``input_lens`` /
  ``output_lens`` per request only with ``--save-detailed``;
- SGLang ``bench_serving`` JSONL (python/sglang/bench_serving.py, ``--output-file``): one run a line, with
  ``input_lens`` / ``output_lens`` only with ``--output-details``.

Each gives the workload to replay (every request's prompt and output length, or the run's means when the file has
no per-request lengths), how it was loaded (rate, burstiness, concurrency cap), and the measured figures the fit
aims at (mean TTFT, mean TPOT, request throughput). What cannot be used is refused with the reason.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from pdserve.perfmodel.models import MODELS

MAX_REQUESTS = 20_000


@dataclass
class Measurement:
    name: str  # file[:line]
    source: str  # pdserve | vllm | sglang
    input_lens: list[int]
    output_lens: list[int]
    rate: float  # requests/s; inf: all at once
    burstiness: float
    max_concurrency: int | None
    measured: dict[str, float]  # mean_ttft_ms, mean_tpot_ms, request_throughput
    model: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def mean_input(self) -> float:
        return sum(self.input_lens) / len(self.input_lens)

    @property
    def mean_output(self) -> float:
        return sum(self.output_lens) / len(self.output_lens)

    def describe(self) -> str:
        load = "all at once" if math.isinf(self.rate) else f"{self.rate:g} req/s"
        if self.max_concurrency:
            load += f", concurrency {self.max_concurrency}"
        return (f"{self.name} ({self.source}): {len(self.input_lens)} requests, mean {self.mean_input:.0f} prompt / "
                f"{self.mean_output:.0f} output tokens, {load}")


def _fail(name: str, why: str) -> ValueError:
    return ValueError(f"calibrate: {name}: {why}")


def _number(d: dict, key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _rate(value, name: str) -> float:
    if value in (None, "inf") or (isinstance(value, float) and math.isinf(value)):
        return math.inf
    if value == "trace":
        raise _fail(name, "a trace-timed run (request_rate 'trace'): its arrival times are not in the file")
    if not isinstance(value, (int, float)) or value <= 0:
        raise _fail(name, f"request_rate {value!r} is not a positive number or 'inf'")
    return float(value)


def _lengths(d: dict, name: str) -> tuple[list[int], list[int], list[str]]:
    """Per-request lengths of the successful requests, else the run's means repeated."""
    notes = []
    ins, outs = d.get("input_lens"), d.get("output_lens")
    if isinstance(ins, list) and isinstance(outs, list) and ins and len(ins) == len(outs):
        errors = d.get("errors") if isinstance(d.get("errors"), list) else [""] * len(ins)
        pairs = [(int(i), int(o)) for i, o, e in zip(ins, outs, errors + [""] * (len(ins) - len(errors)))
                 if not e and isinstance(i, (int, float)) and isinstance(o, (int, float)) and i > 0 and o > 0]
        if pairs:
            return [p[0] for p in pairs], [p[1] for p in pairs], notes
    completed = _number(d, "completed")
    total_in, total_out = _number(d, "total_input_tokens"), _number(d, "total_output_tokens")
    if not completed or not total_in or not total_out:
        raise _fail(name, "neither per-request lengths (input_lens/output_lens) nor completed and total token counts")
    n = int(completed)
    notes.append("no per-request lengths (saved without --save-detailed / --output-details): replayed at the means")
    return [max(1, round(total_in / n))] * n, [max(1, round(total_out / n))] * n, notes


def _measured(d: dict, name: str, clock: str = "") -> dict[str, float]:
    got = {k: _number(d, clock + k) for k in ("mean_ttft_ms", "mean_tpot_ms", "request_throughput")}
    if not got["mean_ttft_ms"] and not got["mean_tpot_ms"]:
        raise _fail(name, "no latency figures (mean_ttft_ms, mean_tpot_ms): nothing to fit to")
    return {k: v for k, v in got.items() if v}


def parse_run(d: dict, name: str) -> Measurement:
    if not isinstance(d, dict):
        raise _fail(name, "not a JSON object with a run's results")
    if isinstance(d.get("requests"), list) and "backend" in d:
        source = "pdserve"
    elif "model_id" in d or "endpoint_type" in d:
        source = "vllm"
    elif "mean_e2e_latency_ms" in d or "random_input_len" in d:
        source = "sglang"
    else:
        raise _fail(name, "not a pdserve bench serve, vllm bench serve or SGLang bench_serving result (none of "
                          "their keys: requests, model_id, mean_e2e_latency_ms)")
    # a pdserve stack reports its modeled clock too: the emulated cluster's own time, what the model predicts
    modeled = source == "pdserve" and _number(d, "modeled_mean_ttft_ms") is not None
    measured = _measured(d, name, "modeled_" if modeled else "")
    ins, outs, notes = _lengths(d, name)
    if modeled:
        notes.append("a paced pdserve stack: its modeled-clock figures (modeled_*) are fitted")
    if len(ins) > MAX_REQUESTS:
        raise _fail(name, f"{len(ins)} requests; at most {MAX_REQUESTS} are replayed")
    concurrency = d.get("max_concurrency")
    if concurrency is not None and (not isinstance(concurrency, int) or concurrency < 1):
        raise _fail(name, f"max_concurrency {concurrency!r} is not a positive integer")
    model = str(d.get("model_id") or d.get("model") or "")
    return Measurement(name, source, ins, outs, _rate(d.get("request_rate"), name),
                       float(_number(d, "burstiness") or 1.0), concurrency, measured, model, notes)


def read_results(path: str) -> list[Measurement]:
    """Every run in a result file (a JSON object, or JSONL with one run a line)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise FileNotFoundError(f"calibrate: {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(path, f"cannot be read ({exc})") from None
    try:
        return [parse_run(json.loads(text), path)]
    except json.JSONDecodeError:
        pass
    runs = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                runs.append(parse_run(json.loads(line), f"{path}:{i}"))
            except json.JSONDecodeError:
                raise _fail(f"{path}:{i}", "neither a JSON file nor JSON lines") from None
    if not runs:
        raise _fail(path, "empty")
    return runs


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower().rsplit("/", 1)[-1])


def check_model(m: Measurement, model: str) -> None:
    """Refuse a run that names another modeled model than the deployment's (a name no profile knows passes)."""
    if not m.model:
        return
    name = _norm(m.model)
    known = sorted((k for k in MODELS if _norm(k) in name), key=len, reverse=True)
    if known and _norm(known[0]) != _norm(model) and MODELS[known[0]] is not MODELS.get(model):
        raise _fail(m.name, f"model {m.model!r} is {known[0]}, the deployment's is {model} (--deployment model=...)")
