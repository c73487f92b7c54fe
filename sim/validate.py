"""The simulator against public serving runs (sim/data/serving_runs.csv): each run replayed, each figure predicted.

Every row of the table is a published serving benchmark of a model pdserve profiles (source URL, date, software and version,
launch flags, workload, the measured result block). Rows are split into ``calibration`` (the runs the issue quoted
and the runs perfmodel's overheads are fitted on) and ``held-out`` (everything else), fixed before any fitting. A row
the simulator can replay names its deployment (``--deployment`` keys), the scheduler flags its launch set, and its
workload (random lengths, number of prompts, request rate or concurrency); the others say why not.

Goals on held-out rows: duration and throughput within +-15%, mean TTFT and mean TPOT within +-25%. A row outside
them is named in KNOWN_MISSES with the mechanism the model lacks; the test checks the set is exact.

``python -m pdserve.sim.validate`` prints both tables (``--rows ID,..`` for some, ``--json`` for all figures,
``--markdown`` as the docs show them; the tables are sim/validation_report.py's).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.perfmodel.deployment import parse_deployment
from pdserve.perfmodel.family_misses import SERVING_MISSES
from pdserve.sim.cluster import Cluster, ClusterSpec, Pool, SimRequest
from pdserve.sim.report import summary
from pdserve.workload.arrivals import arrival_stream
from pdserve.workload.datasets import FIRST_RANDOM_ID, parse_range, random_requests

DATA = Path(__file__).resolve().parent / "data" / "serving_runs.csv"
# Per-request (prompt, output) lengths of runs whose source publishes them (a benchmark's saved result file), one
# file per run: sim/data/request_lengths/NAME.csv, replayed with the workload key ``lengths=NAME``
LENGTHS = DATA.parent / "request_lengths"
VOCAB = 49152
SEED = 42
# (figure, CSV column, summary key, unit scale, goal): the goal applies to held-out rows; None: reported only
FIGURES = (
    ("duration", "duration_s", "duration", 1.0, 0.15),
    ("req/s", "request_throughput", "request_throughput", 1.0, 0.15),
    ("out tok/s", "output_tok_s", "output_throughput", 1.0, 0.15),
    ("total tok/s", "total_tok_s", "total_token_throughput", 1.0, 0.15),
    ("mean TTFT", "mean_ttft_ms", "mean_ttft_ms", 1.0, 0.25),
    ("median TTFT", "median_ttft_ms", "median_ttft_ms", 1.0, None),
    ("mean TPOT", "mean_tpot_ms", "mean_tpot_ms", 1.0, 0.25),
    ("median TPOT", "median_tpot_ms", "median_tpot_ms", 1.0, None),
    ("mean ITL", "mean_itl_ms", "mean_itl_ms", 1.0, None),
    ("median ITL", "median_itl_ms", "median_itl_ms", 1.0, None),
)
PER_GPU = {"output_tok_s": "per_gpu_output_tok_s", "total_tok_s": "per_gpu_total_tok_s"}
_EARLY_SGLANG = ("SGLang v0.4.3 (February 2025) had neither FlashMLA nor DeepGEMM: MLA decode ran on its Triton kernel "
                 "and this was its first DP-attention implementation; the model prices the attention of the FlashMLA/FA3 "
                 "generation, so it runs these 2.5-3.5x too fast (a lone request's TPOT: 43.6 ms measured at "
                 "concurrency 4, 14 ms modeled)")
_VLLM_V0 = ("vLLM 0.7's V0 engine: with MLA it turns chunked prefill off and runs whole prompts through its early MLA "
            "prefill path (TTFT at concurrency 4: 976 ms measured, 624 ms modeled), and its synchronous per-step "
            "scheduling and output handling add 26-48% to every TPOT here (25.7 ms against 19.0 at concurrency 4)")
_FRONT_END = ("1,000 requests of 128 tokens, all at once: each passes the server's single front-end process (HTTP, chat "
              "template, tokenization, detokenization, streaming), which then caps the run at {rate} requests/s; the "
              "model counts the front end as a per-request latency, not as a queue")
_SGLANG_FRONT_END = ("SGLang's latency to a first token at low concurrency differs by release on the same recipe (1k "
                     "prompts at concurrency 8: 331 ms on v0.5.7, 165 ms on v0.5.12); the model has one fitted "
                     "per-request overhead for SGLang (139 ms), {side}")
# Held-out rows with a goal figure outside its goal, each with the mechanism the model lacks. They stay in the table
# and in every summary; tests/stack/sim/test_serving_validation.py checks that this is exactly the set of misses.
KNOWN_MISSES: dict[str, str] = {
    **{f"dstack-sgl-dpa-3200x{n}": _EARLY_SGLANG for n in (
        "800-c128", "800-c64", "800-c32", "800-c16", "800-c8", "800-c4", "1600-c128", "3200-c128", "6400-c128")},
    **{f"dstack-vllm-tp8-3200x{n}": _VLLM_V0 for n in (
        "800-c128", "800-c64", "800-c32", "800-c16", "800-c8", "800-c4", "1600-c128", "3200-c128", "6400-c128")},
    "sgl3602-h200-ep8-r40": _EARLY_SGLANG.split(";")[0] + "; this run predates v0.4.3.post2 (SGLang main, Feb 2025)",
    "sgl3602-h200-tp8-r40": _EARLY_SGLANG.split(";")[0] + "; this run predates v0.4.3.post2 (SGLang main, Feb 2025)",
    "gps-vllm-tp8-128x4": _FRONT_END.format(rate=45),
    "gps-sgl-dpa-128x4": _FRONT_END.format(rate=156),
    "ix870-sgl-tp8-1k1k-c4": ("the source flags this point itself: TPOT 22.7 ms at concurrency 4 against 12.8 ms at "
                              "concurrency 8 in the same sweep (another runner); InferenceX's published v0.5.12 point "
                              "is 9.7 ms, within 10% of the model"),
    **{f"ix870-sgl-tp8-1k1k-c{c}": _SGLANG_FRONT_END.format(side="low for v0.5.7") for c in (8, 16, 32)},
    **{f"ix-pub-sgl0512-tp8-{n}": _SGLANG_FRONT_END.format(side="high for v0.5.12") for n in (
        "1k1k-c4", "1k1k-c8", "1k1k-c16", "8k1k-c4", "8k1k-c8")},
    "ix-pub-sgl0512-tp8-8k1k-c64": ("64 clients with 8k-token prompts keep the prefill queue full: TTFT is prefill "
                                    "throughput, which the model puts 7-14% above SGLang's on TP8 (the calibration "
                                    "rows), compounded by queueing"),
    **{f"gps-vllm-tp8-{n}": ("prefill-heavy throughput 18-19% above vLLM's: in v0.11 its TP8 MoE ran DeepGEMM's grouped "
                             "GEMM by default, which vLLM pull request 29346 later measured slower than Triton at TP8 "
                             "and turned off; the model prices TP8 MoE at Triton's rate (SGLang v0.5.3 on the same "
                             "workloads, the calibration rows: 12-14%)") for n in ("4k200", "2k100")},
    "sgl7631-h20-tp8-1k512-c8": ("the first single-node H20 serving run replayed: decode is priced 49% slow (median "
                                 "ITL 29.4 ms modeled, 19.7 measured). 20.5 ms of the modeled step is the H20 "
                                 "per-kernel overhead (1,919 kernels x 10.7 us), fitted on Ant Group's two-node EP16 "
                                 "decode with MTP; the measured ITL leaves about 5.7 us per kernel for this TP8 node "
                                 "beside its 8.9 ms of weights, communication and attention. What the fitted figure "
                                 "carries from that deployment (cross-node DeepEP, MTP's verify steps) does not apply "
                                 "here, and no single-node H20 row is calibration to fit it apart"),
}
KNOWN_MISSES.update(SERVING_MISSES)


@dataclass
class Figure:
    name: str
    measured: float
    predicted: float
    goal: float | None

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0

    @property
    def missed(self) -> bool:
        return self.goal is not None and abs(self.error) > self.goal


@dataclass
class Replay:
    row_id: str
    split: str
    figures: list[Figure] = field(default_factory=list)
    note: str = ""  # why it is not modeled
    setup: str = ""
    pd: bool = False  # a disaggregated (prefill/decode) run

    @property
    def missed(self) -> list[Figure]:
        return [f for f in self.figures if f.missed]


def rows(path: Path = DATA) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _number(text: str) -> float | None:
    m = re.match(r"\s*([0-9][0-9,]*\.?[0-9]*)", text or "")
    return float(m.group(1).replace(",", "")) if m else None


def measured(row: dict, column: str) -> float | None:
    """A figure as published; node totals from per-GPU figures (InferenceX publishes per GPU)."""
    value = _number(row.get(column, ""))
    if value is None and column in PER_GPU:
        m = re.search(rf"{PER_GPU[column]}=([0-9.]+)", row.get("notes", ""))
        gpus = _number(row["gpus"])
        value = float(m.group(1)) * gpus if m and gpus else None
    return value


def workload(spec: str) -> tuple[list[SimRequest], list[float], int | None, float]:
    """``input=819:1024,output=819:1024,prompts=40,concurrency=4`` (or ``rate=inf|R``): requests, arrival offsets,
    the concurrency cap and the rate. Random token ids, lengths uniform in each range, a fixed seed; or
    ``lengths=NAME`` for each request's measured lengths in order (:data:`LENGTHS`)."""
    kv = dict(item.split("=", 1) for item in spec.split(","))
    if "lengths" in kv:
        requests = measured_requests(kv["lengths"])
        if "prompts" in kv and int(kv["prompts"]) != len(requests):
            raise ValueError(f"workload: prompts={kv['prompts']} but {kv['lengths']} holds {len(requests)} requests")
    else:
        bench = random_requests(int(kv["prompts"]), VOCAB, parse_range(kv["input"], "input"),
                                parse_range(kv["output"], "output"), seed=SEED)
        requests = [SimRequest(r.token_ids, r.output_len) for r in bench]
    n = len(requests)
    rate = float(kv.get("rate", "inf"))
    offsets = [0.0] * n if math.isinf(rate) else list(itertools.islice(arrival_stream(rate, 1.0, SEED), n))
    concurrency = int(kv["concurrency"]) if "concurrency" in kv else None
    return requests, offsets, concurrency, rate


def measured_requests(name: str) -> list[SimRequest]:
    """Requests of the lengths in ``LENGTHS / NAME.csv`` (columns ``input,output``), random token ids; an output
    the run ended at 0 tokens (an immediate end of sequence) still takes its one step."""
    path = LENGTHS / f"{name}.csv"
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not path.is_file():
        raise ValueError(f"workload: lengths={name!r} names no file in {LENGTHS}")
    rng = np.random.default_rng(SEED)
    with path.open(newline="") as fh:
        return [SimRequest(rng.integers(FIRST_RANDOM_ID, VOCAB, int(r["input"])).tolist(), max(1, int(r["output"])))
                for r in csv.DictReader(fh)]


def pools(cell: str, overrides: SchedulerOverrides) -> list[Pool]:
    """A row's cluster: ``KEY=V,..`` for one colocated instance, or ``prefill N x KEY=V,..; decode M x KEY=V,..``
    for a disaggregated run (each role's ``--deployment``, as ``pdserve simulate --prefill N --decode M`` with
    ``--prefill-deployment`` and ``--decode-deployment``)."""
    if not cell.strip().startswith(("prefill", "decode")):
        return [Pool(SchedulerRole.BOTH, parse_deployment(cell), 1, overrides)]
    out = []
    for part in filter(None, (x.strip() for x in cell.split(";"))):
        m = re.fullmatch(r"(prefill|decode)\s+(\d+)\s*x\s*(.*)", part)
        if not m:
            raise ValueError(f"deployment: {part!r} is not 'prefill|decode N x KEY=V,..'")
        out.append(Pool(SchedulerRole(m.group(1)), parse_deployment(m.group(3)), int(m.group(2)), overrides))
    return out


def is_pd(row: dict) -> bool:
    return row.get("pd_disaggregated", "").lower().startswith("yes")


def replay(row: dict) -> Replay:
    out = Replay(row["id"], row["split"], note=row["not_modeled"], pd=is_pd(row))
    if out.note:
        return out
    overrides = SchedulerOverrides.parse(row["scheduler"])
    requests, offsets, concurrency, rate = workload(row["workload"])
    cluster = Cluster(ClusterSpec(pools(row["deployment"], overrides)))
    result = cluster.run(requests, offsets, concurrency)
    s = summary(result, concurrency, rate=rate)
    out.setup = cluster.decodes[0].scheduling.describe()
    for name, column, key, scale, goal in FIGURES:
        value = measured(row, column)
        if value is not None and s.get(key) is not None:
            out.figures.append(Figure(name, value, s[key] * scale, goal))
    return out


def validate(path: Path = DATA, only: set[str] | None = None, jobs: int = 0) -> list[Replay]:
    """Every row (or those in ``only``) replayed, in the file's order, on ``jobs`` processes (0: one per core); each
    replay is a whole simulated benchmark run, independent of the others."""
    chosen = [r for r in rows(path) if not only or r["id"] in only]
    jobs = min(jobs or len(os.sched_getaffinity(0)), len(chosen))
    if jobs <= 1:
        return [replay(r) for r in chosen]
    # spawned, not forked: the caller may hold gRPC channels or threads, which a fork copies badly
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(replay, chosen, chunksize=1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="", help="only these row ids, comma separated")
    ap.add_argument("--json", action="store_true", help="every figure of every row as JSON")
    ap.add_argument("--markdown", action="store_true", help="the tables as docs/validation.md shows them")
    ap.add_argument("--jobs", type=int, default=0, help="processes replaying rows (default: one per core)")
    a = ap.parse_args(argv)
    if a.jobs < 0:
        ap.error("--jobs: 0 (one per core) or more")
    from pdserve.sim.validation_report import format_markdown, format_table

    replays = validate(only={x.strip() for x in a.rows.split(",") if x.strip()} or None, jobs=a.jobs)
    if a.json:
        print(json.dumps([{"id": r.row_id, "split": r.split, "not_modeled": r.note, "setup": r.setup,
                           "figures": [f.__dict__ | {"error": f.error} for f in r.figures]} for r in replays],
                         indent=2))
    else:
        print(format_markdown(replays) if a.markdown else format_table(replays))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
