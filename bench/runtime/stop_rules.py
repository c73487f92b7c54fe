"""``pdserve bench stop-rules``: what the completeness rule (stop_when_complete) saves and costs, against EOS.

The built-in English and Chinese chat prompts run greedy through the in-process engine, all in one batch, four ways
in one process:

- **EOS**: the model ends its answers itself (end of turn), or at ``--max-tokens``;
- **ignore_eos**: EOS ignored, every answer runs to ``--max-tokens`` (what the rule is a safety net for);
- **complete >= t** for each ``--thresholds`` value: EOS ignored, the rule on.

Greedy answers share their tokens up to where a run ends them (checked: each run's tokens are a prefix of the
ignore_eos run's), so for every prompt the rule's cut point C compares with the EOS point E (the end-of-turn token):
cut before it (C < E - 1: the tokens of the answer lost), exactly at it (C = E - 1: the same text as EOS gives), or
after it (C >= E: tokens past the end of turn kept). The checks' cost: extra forward tokens and wall seconds in the
checks' forwards (timed around them), per answer.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, field

from pdserve.engine.llm_engine import LLMEngine
from pdserve.engine.params import SamplingParams
from pdserve.engine.runtime import Runtime
from pdserve.engine.sequence import Sequence
from pdserve.engine.text.stop import FinishReason
from pdserve.workload.datasets import builtin_requests
from pdserve.workload.report import fixed_width

LANGS = ("all", "en", "zh")


@dataclass
class Row:
    run: str
    lang: str
    answers: int
    tokens: int  # generated, all answers
    ended_by_rule: int = 0  # finish reason complete
    before_eos: int = 0  # cut before the EOS point: tokens of the answer lost
    lost_tokens: list[int] = field(default_factory=list)
    at_eos: int = 0  # cut exactly where EOS would have ended the answer
    after_eos: int = 0  # cut past the EOS point: tokens past the end of the answer kept
    extra_tokens: list[int] = field(default_factory=list)
    no_eos: int = 0  # cut in an answer the model does not end within max_tokens
    to_limit: int = 0  # ran to max_tokens
    checks: int = 0
    check_tokens: int = 0
    wall_s: float = 0.0  # the whole run (the same for every language of one run)
    check_wall_s: float = 0.0  # the checks' forwards


def prompts(runtime: Runtime, max_tokens: int) -> list[tuple[str, list[int]]]:
    """(language, chat prompt ids) of the built-in prompt set."""
    out = []
    for request in builtin_requests(max_tokens):
        text = "".join(m["content"] for m in request.messages)
        lang = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en"
        out.append((lang, runtime.tokenizer.encode_chat(request.messages)))
    return out


@dataclass
class Run:
    seqs: list[Sequence]
    wall_s: float
    check_wall_s: float  # inside the completeness checks' forwards
    checks: list[tuple[int, int, float]]  # (prompt index, output length at the check, P(yes))


def run_all(runtime: Runtime, ids: list[list[int]], params: SamplingParams) -> Run:
    """The prompts in one batch, with every completeness check recorded and timed."""
    judge = runtime.judge
    check = judge.check
    run = Run([], 0.0, 0.0, [])
    index: dict[int, int] = {}

    def timed_check(due):
        t0 = time.perf_counter()
        check(due)
        run.check_wall_s += time.perf_counter() - t0
        run.checks += [(index[id(seq)], len(seq.output_ids), result.check.p_yes) for seq, result in due
                       if result.check is not None]

    judge.check = timed_check
    try:
        engine = LLMEngine(runtime)
        t0 = time.perf_counter()
        run.seqs = [engine.add_request(p, params) for p in ids]
        index.update((id(seq), i) for i, seq in enumerate(run.seqs))
        for _ in engine.stream():
            pass
        run.wall_s = time.perf_counter() - t0
        return run
    finally:
        del judge.check


def eos_point(seq: Sequence, eos_ids: frozenset[int]) -> int | None:
    """Output length at which the model's own end of turn would have ended the answer (None: it never ends it)."""
    return next((i + 1 for i, t in enumerate(seq.output_ids) if t in eos_ids), None)


def summarize(name: str, langs: list[str], run: Run, eos_at: list[int | None]) -> list[Row]:
    rows = []
    for lang in LANGS:
        mine = [(s, e) for s, e, lg in zip(run.seqs, eos_at, langs) if lang in ("all", lg)]
        row = Row(name, lang, len(mine), sum(len(s.output_ids) for s, _ in mine), wall_s=run.wall_s,
                  check_wall_s=run.check_wall_s)
        for seq, eos in mine:
            if seq.completion is not None:
                row.checks += seq.completion.checks
                row.check_tokens += seq.completion.check_tokens
            if seq.finish_reason is FinishReason.LENGTH:
                row.to_limit += 1
            if seq.finish_reason is not FinishReason.COMPLETE:
                continue
            row.ended_by_rule += 1
            cut, end = len(seq.output_ids), None if eos is None else eos - 1  # end: the answer's last token
            if end is None:
                row.no_eos += 1
            elif cut > end:
                row.after_eos += 1
                row.extra_tokens.append(cut - end)
            elif cut == end:
                row.at_eos += 1
            else:
                row.before_eos += 1
                row.lost_tokens.append(end - cut)
        rows.append(row)
    return rows


@dataclass
class JudgeRow:
    """The checks of one run by where they fell: at the answer's end (the model's own end of turn is its next token),
    before it, or past it (or in an answer the model does not end within max_tokens)."""

    where: str
    checks: int
    mean_p_yes: float | None


def judge_rows(run: Run, eos_at: list[int | None]) -> list[JudgeRow]:
    groups: dict[str, list[float]] = {"at the answer's end": [], "before it": [], "past it / no EOS": []}
    for i, at, p in run.checks:
        end = None if eos_at[i] is None else eos_at[i] - 1
        key = "past it / no EOS" if end is None or at > end else "at the answer's end" if at == end else "before it"
        groups[key].append(p)
    return [JudgeRow(k, len(v), sum(v) / len(v) if v else None) for k, v in groups.items()]


def measure(runtime: Runtime, max_tokens: int, thresholds: list[float],
            interval: int) -> tuple[list[Row], list[JudgeRow]]:
    """The rows of every run, and where the checks of the highest threshold's run fell with their P(yes)."""
    langs, ids = zip(*prompts(runtime, max_tokens))
    greedy = dict(max_tokens=max_tokens, temperature=0.0)
    # warm-up (compiled kernels, the judge's turn), so that no timed run pays for it
    run_all(runtime, list(ids[:4]), SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True,
                                                   stop_when_complete=1.0, stop_when_complete_interval=1))
    full = run_all(runtime, list(ids), SamplingParams(**greedy, ignore_eos=True))
    eos_at = [eos_point(s, runtime.tokenizer.eos_ids) for s in full.seqs]
    runs = [("EOS", SamplingParams(**greedy))]
    runs += [(f"complete >= {t:g}", SamplingParams(**greedy, ignore_eos=True, stop_when_complete=t,
                                                   stop_when_complete_interval=interval)) for t in thresholds]
    rows = summarize("ignore_eos", list(langs), full, eos_at)
    judged: list[JudgeRow] = []
    for (name, params), threshold in zip(runs, [None, *thresholds]):
        run = run_all(runtime, list(ids), params)
        for seq, whole in zip(run.seqs, full.seqs):  # greedy: the same tokens as far as the run went
            if seq.output_ids != whole.output_ids[:len(seq.output_ids)]:
                raise AssertionError(f"{name}: {seq.request_id} is not a prefix of its ignore_eos answer")
        rows += summarize(name, list(langs), run, eos_at)
        if threshold is not None and threshold == max(thresholds):
            judged = judge_rows(run, eos_at)
    return rows, judged


def format_rows(rows: list[Row], model_name: str, max_tokens: int, interval: int) -> str:
    columns = [("run", "<15"), ("lang", "<4"), ("answers", ">7"), ("tokens", ">6"), ("complete", ">8"),
               ("before EOS", ">10"), ("lost", ">5"), ("at EOS", ">6"), ("after EOS", ">9"), ("extra", ">5"),
               ("no EOS", ">6"), ("to limit", ">8"), ("checks/ans", ">10.2f"), ("check tok/ans", ">13.1f"),
               ("wall s", ">6.1f"), ("checks s", ">8.1f")]
    table = [(r.run, r.lang, r.answers, r.tokens, r.ended_by_rule, r.before_eos, _mean(r.lost_tokens), r.at_eos,
              r.after_eos, _mean(r.extra_tokens), r.no_eos, r.to_limit, r.checks / r.answers,
              r.check_tokens / r.answers, r.wall_s, r.check_wall_s) for r in rows]
    head = (f"stop rules: {model_name}, built-in prompts, greedy, max_tokens {max_tokens}, check interval {interval}. "
            "EOS point: the ignore_eos answer's first end-of-turn token; lost / extra: mean tokens of the answer cut "
            "off / kept past its end")
    return "\n".join([head, *fixed_width(columns, table)])


def format_judge(rows: list[JudgeRow], threshold: float) -> str:
    table = [(r.where, r.checks, "-" if r.mean_p_yes is None else f"{r.mean_p_yes:.3f}") for r in rows]
    head = f"the judge: checks of the complete >= {threshold:g} run by where they fell, and their mean P(yes)"
    return "\n".join([head, *fixed_width([("where", "<20"), ("checks", ">6"), ("mean P(yes)", ">11")], table)])


def _mean(values: list[int]) -> str:
    return f"{sum(values) / len(values):.1f}" if values else "-"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="GGUF path (default: SmolLM2-135M-Instruct)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--thresholds", default="0.5,0.3", help="stop_when_complete values, comma-separated")
    p.add_argument("--interval", type=int, default=16, help="stop_when_complete_interval")
    p.add_argument("--json", default=None, help="also write the rows to this file")


def main(a: argparse.Namespace) -> int:
    runtime = Runtime.load(a.model)
    thresholds = [float(x) for x in a.thresholds.split(",") if x]
    rows, judged = measure(runtime, a.max_tokens, thresholds, a.interval)
    print(format_rows(rows, runtime.model_name, a.max_tokens, a.interval))
    if judged:
        print("\n" + format_judge(judged, max(thresholds)))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"model": runtime.model_name, "max_tokens": a.max_tokens, "interval": a.interval,
                       "rows": [asdict(r) for r in rows], "judge": [asdict(r) for r in judged]}, fh, indent=2)
    return 0
