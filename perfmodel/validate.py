"""Checks the timing model against published measurements (perfmodel/data/published_measurements.csv).

Every row names its split: ``calibration`` rows fit the overheads (``python -m perfmodel.fit``), ``held-out`` rows are
predictions the fit never saw. The model predicts each row's metric for the row's own shape:

- ``tpot``: the decode step of ``concurrency`` sequences at the run's mean context (input + output / 2); with the
  ``interference`` option (colocated serving at a fixed concurrency) each finished request's replacement is prefilled
  between decode steps, adding (concurrency - 1) x prefill(input) / output to every output token;
- ``ttft``: the request overhead plus the prefill of one prompt;
- ``prefill_throughput_per_node``: the tokens of one prefill step (``chunk`` or tokens per GPU x GPUs) over its time;
- ``decode_throughput_per_gpu`` / ``_per_node``: tokens per decode step (x accept length with MTP) over its time.

Options (column ``options``): ``dp_attention``, ``tbo`` (two-batch overlap), ``kv=fp8``, ``chunk=N``,
``mtp=D/A`` (D tokens verified per step, A accepted on average), ``interference``, ``software=NAME`` (the
software profile; default ``sglang``, ``vllm-awq`` for AWQ weights), ``balanced`` (the source simulated
perfectly balanced routing), ``qkv_a_token_split`` (the source splits the replicated q_a/kv_a projection by tokens).
A row the model cannot represent stays in the table with its reason.
``python -m perfmodel.validate`` prints the table.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

from pdserve.perfmodel.family_misses import STEP_MISSES
from pdserve.perfmodel.hardware import GPUS, gpu
from pdserve.perfmodel.models import WEIGHT_PRECISIONS, model_profile
from pdserve.perfmodel.parallel import ParallelConfig
from pdserve.perfmodel.software import SOFTWARE
from pdserve.perfmodel.timing import TimingModel

DATA = Path(__file__).resolve().parent / "data" / "published_measurements.csv"
GOAL = 0.15  # every held-out row within +-15%
# Held-out rows the model misses by more than GOAL, each with the reason. They stay in the table and in every
# summary; the test checks that this list is exactly the set of misses (no miss unnamed, no stale name).
KNOWN_MISSES: dict[str, str] = {
    "h100-awq-ttft-1k": "the AWQ TTFT source is inconsistent with itself: 1024 -> 4096 tokens adds only 15 ms while "
                        "128 -> 1024 adds 58 ms; no cost that grows with prompt length fits both 1k and 4k",
    "h100-awq-ttft-4k": "the other half of the inconsistent AWQ TTFT pair (see h100-awq-ttft-1k)",
    "h100x16-tp16-ttft-2k": "the source's TTFT is nearly flat in prompt length (128: 180 ms, 2k: 191 ms, 4k: 200 ms): "
                            "4,096 tokens x 74 GFLOP on 16 H100 alone take ~16 ms even at DeepGEMM's FP8 rate",
    "h100x16-tp16-ttft-4k": "as h100x16-tp16-ttft-2k: a flat TTFT the model's per-token costs cannot reproduce",
    "h20-ant-prefill-4k": "the row sits between two FP8 kernel families: stock SGLang 0.5.2 runs a TP8 prefill's GEMMs "
                          "on the CUTLASS block-scaled kernel and Triton's fused MoE (-23.4% here), but Ant Group's "
                          "build replaces the MoE and TP paths (its pull requests 10567 and 10568); with DeepGEMM-class "
                          "kernels the model gives +5.5%",
    "ds-profile-prefill": "multi-node prefill with two-batch overlap: the model still hides more of the all-to-all than "
                          "the traces show (communication 'slower than unit tests' under TBO, LMSYS blog)",
    "sglang-ep-prefill-1k": "multi-node prefill as ds-profile-prefill, plus real expert skew left after EPLB (the "
                            "source's own perfect-EPLB run is 18% faster at 4k)",
    "sglang-ep-prefill-2k": "as sglang-ep-prefill-1k",
    "sglang-ep-prefill-4k": "as sglang-ep-prefill-1k",
    "sglang-ep-prefill-4k-eplb": "multi-node prefill as ds-profile-prefill",
    "sglang-ep-decode-2k": "EP72 with 32 redundant experts (EPLB) at 256 requests per GPU: the real expert skew left "
                           "after EPLB is not modeled (uniform routing is the floor)",
}
KNOWN_MISSES.update(STEP_MISSES)
THROUGHPUT_METRICS = ("prefill_throughput_per_node", "decode_throughput_per_gpu", "decode_throughput_per_node")


@dataclass
class Validation:
    row_id: str
    split: str
    metric: str
    measured: float  # seconds for latencies, tokens/s for throughputs
    predicted: float | None
    unit: str
    batch: int = 0
    note: str = ""

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.measured - 1.0

    @property
    def within_goal(self) -> bool:
        return self.error is not None and abs(self.error) <= GOAL


def _gpu_name(hardware: str) -> str:
    h = hardware.upper()
    if h in {k.upper() for k in GPUS}:  # a profile's own name (B200, A100-80G, L20, H100-NVL, ...)
        return gpu(hardware).name
    for name in ("H200", "H100", "H800"):  # before "H20", which "H200" also starts with
        if h.startswith(name):
            return name
    if h.startswith("H20"):
        return "H20-141G" if "141" in h else "H20-96G"
    return gpu(hardware).name  # ValueError listing the known profiles


def _unit_value(value: float, unit: str) -> float:
    return value / 1000.0 if unit == "ms" else value


def options(row: dict) -> dict[str, str]:
    out = {}
    for item in filter(None, (s.strip() for s in row.get("options", "").split(";"))):
        key, _, value = item.partition("=")
        out[key] = value or "1"
    return out


def _first_int(text: str) -> int | None:
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


def scenario(row: dict, software: str | None = None) -> tuple[TimingModel | None, str]:
    """The timing model for a row, or None and the reason it cannot be modeled."""
    if row["metric"] not in ("tpot", "ttft") + THROUGHPUT_METRICS:
        return None, f"metric {row['metric']} is not modeled: a production average over an unstated mix of batch " \
                     "sizes, contexts and cache hits has no single step to predict"
    if _first_int(row["concurrency_or_batch"]) is None:
        return None, "no batch size given"
    opts = options(row)
    gpus = _first_int(row["gpus"])
    par = row["parallel"]
    tp_match = re.search(r"TP(\d+)", par)
    ep_match = re.search(r"EP(\d+)", par)
    ep = int(ep_match.group(1)) if ep_match else 1
    dp = "dp_attention" in opts
    tp = gpus if (dp or not tp_match) else int(tp_match.group(1))
    awq = "awq" in row["precision"]
    model = model_profile("deepseek-r1-awq" if awq else row.get("model") or "deepseek-r1")
    if not awq and row["precision"] in WEIGHT_PRECISIONS:
        model = model.with_weight_precision(row["precision"])
    if opts.get("kv"):
        model = model.with_kv_precision(opts["kv"])
    sw = SOFTWARE[software or opts.get("software") or ("vllm-awq" if awq else "sglang")]
    if "chunk" in opts:
        sw = sw.with_chunk(int(opts["chunk"]))
    parallel = ParallelConfig(gpus, tp, ep, dp, 8, "tbo" in opts)
    tm = TimingModel(model, _gpu_name(row["hardware"]), parallel, sw)
    if "balanced" in opts:
        tm.balanced_routing = True
    if "qkv_a_token_split" in opts:
        tm.token_split_down_proj = True
    return tm, ""


def predict(row: dict, tm: TimingModel) -> float:
    """The row's metric as the model sees it (seconds for latencies, tokens/s for throughputs)."""
    opts = options(row)
    batch = _first_int(row["concurrency_or_batch"])
    input_len = _first_int(row["input_len"]) or 0
    output_len = _first_int(row["output_len"]) or 0
    metric = row["metric"]
    if metric == "ttft":
        return tm.ttft(input_len)
    if metric == "prefill_throughput_per_node":
        p = tm.parallel
        step_tokens = batch if "chunk" in opts else batch * p.gpus
        prompts = max(1, step_tokens // input_len)
        step = tm.prefill_time([input_len] * prompts)
        return prompts * input_len / step.seconds / p.nodes
    context = _first_int(row["context_len"]) or (input_len + output_len // 2)
    draft, accept = 1, 1.0
    if "mtp" in opts:
        d, _, a = opts["mtp"].partition("/")
        draft, accept = int(d), float(a)
    if metric == "tpot":
        step = tm.decode_step_time([context] * batch).seconds
        if "interference" in opts and output_len:
            step += (batch - 1) * tm.prefill_time([input_len]).seconds / output_len
        return step
    p = tm.parallel
    seqs = batch * p.gpus if "per GPU" in row["concurrency_or_batch"] else batch
    step = tm.decode_step_time([context] * seqs, tokens_per_seq=draft)
    seconds = step.seconds
    if draft > 1:  # the draft (MTP) layer: one more layer's work and overhead, plus its head
        layer_work = sum(v for k, v in step.parts.items() if k not in ("overhead", "lm_head")) / tm.model.n_layers
        seconds += layer_work + step.parts["lm_head"] + tm.draft_layer_overhead_s() + tm.overheads.step_overhead_s
    tokens_per_s = seqs * accept / seconds
    return tokens_per_s / (p.gpus if metric == "decode_throughput_per_gpu" else p.nodes)


def rows(path: Path = DATA) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def evaluate(row: dict, software: str | None = None) -> Validation:
    measured = _unit_value(float(row["value"]), row["unit"])
    batch = _first_int(row["concurrency_or_batch"]) or 0
    tm, reason = scenario(row, software)
    unit = "s" if row["unit"] in ("ms", "s") else row["unit"]
    if tm is None:
        return Validation(row["id"], row["split"], row["metric"], measured, None, unit, batch, reason)
    try:
        predicted = predict(row, tm)
    except ValueError as exc:
        return Validation(row["id"], row["split"], row["metric"], measured, None, unit, batch, str(exc))
    return Validation(row["id"], row["split"], row["metric"], measured, predicted, unit, batch)


def validate(path: Path = DATA) -> list[Validation]:
    return [evaluate(r) for r in rows(path)]


def summary(results: list[Validation], split: str) -> dict[str, float]:
    errs = [abs(r.error) for r in results if r.split == split and r.error is not None]
    if not errs:
        return {"rows": 0, "modeled": 0}
    return {"rows": sum(1 for r in results if r.split == split), "modeled": len(errs),
            "mean_abs_error": sum(errs) / len(errs), "max_abs_error": max(errs),
            "within_goal": sum(1 for e in errs if e <= GOAL)}


def _fmt(value: float, unit: str) -> str:
    return f"{value * 1e3:9.2f}ms" if unit == "s" else f"{value:9,.0f}/s"


def format_table(results: list[Validation]) -> str:
    lines = []
    for split in ("calibration", "held-out"):
        part = [r for r in results if r.split == split]
        if not part:
            continue
        lines += [f"{split} rows", f"{'row':<24} {'metric':<28} {'measured':>11} {'predicted':>11} {'error':>8}",
                  "-" * 88]
        for r in part:
            if r.predicted is None:
                lines.append(f"{r.row_id:<24} {r.metric:<28} {_fmt(r.measured, r.unit):>11} {'-':>11} {'-':>8}  "
                             f"not modeled: {r.note}")
                continue
            flag = "" if r.within_goal else f"  outside +-{GOAL:.0%}: {KNOWN_MISSES.get(r.row_id, 'UNEXPLAINED')}"
            lines.append(f"{r.row_id:<24} {r.metric:<28} {_fmt(r.measured, r.unit):>11} "
                         f"{_fmt(r.predicted, r.unit):>11} {r.error * 100:>+7.1f}%{flag}")
        s = summary(results, split)
        if s.get("modeled"):
            lines.append(f"{split}: {s['modeled']} of {s['rows']} rows modeled, mean |error| "
                         f"{s['mean_abs_error']:.1%}, max {s['max_abs_error']:.1%}, {s['within_goal']} within "
                         f"+-{GOAL:.0%}")
        lines.append("")
    return "\n".join(lines).rstrip()


def batch_trend(results: list[Validation], prefix: str) -> float:
    """Slope of error against log2(batch) over the rows whose id starts with ``prefix`` (0 = no trend)."""
    pts = [(math.log2(max(1, r.batch)), r.error) for r in results
           if r.row_id.startswith(prefix) and r.error is not None and r.metric.startswith(("tpot", "decode"))]
    if len(pts) < 2:
        return 0.0
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else 0.0


if __name__ == "__main__":
    print(format_table(validate()))
