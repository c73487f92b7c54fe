"""The validation's tables: each replayed run's figures against the measured ones, split by colocated and P/D and
by calibration and held-out (the text ``python -m pdserve.sim.validate`` prints, and the markdown
docs/validation.md shows), the summary per split and the trend of an error with load."""

from __future__ import annotations

import math

from pdserve.sim.validate import KNOWN_MISSES, Figure, Replay


def _cell(f: Figure | None) -> str:
    return f"{f.measured:>9.4g} {f.error * 100:>+6.0f}%{'!' if f.missed else ' '}" if f else f"{'-':>18}"


def format_table(replays: list[Replay]) -> str:
    shown = ("duration", "out tok/s", "mean TTFT", "mean TPOT", "median TTFT", "median TPOT", "median ITL")
    lines = []
    for kind, split, part in _groups(replays):
        head = " ".join(f"{n:>18}" for n in shown)
        lines += [f"{kind} {split} rows: measured, and the simulator's error (! outside the goal)",
                  f"{'row':<34} {head}", "-" * (35 + 19 * len(shown))]
        for r in part:
            if r.note:
                lines.append(f"{r.row_id:<34} {r.note}")
                continue
            by = {f.name: f for f in r.figures}
            lines.append(f"{r.row_id:<34} " + " ".join(_cell(by.get(n)) for n in shown))
            if r.missed and split == "held-out":
                lines.append(f"{'':<34} miss: {KNOWN_MISSES.get(r.row_id, 'UNEXPLAINED')}")
        s = summary_of(part)
        lines.append(f"{kind} {split}: {s['replayed']} of {s['rows']} rows replayed; goal figures: {s['within']} of "
                     f"{s['figures']} within their goal; mean |error| duration {_pct(s['duration'])}, mean TTFT "
                     f"{_pct(s['mean TTFT'])}, mean TPOT {_pct(s['mean TPOT'])}")
        lines.append("")
    return "\n".join(lines).rstrip()


def format_markdown(replays: list[Replay]) -> str:
    """The tables docs/validation.md shows: per split, each row's measured figure and error; each named miss's
    mechanism once, numbered, under its table."""
    shown = ("duration", "out tok/s", "mean TTFT", "mean TPOT", "median TPOT")
    lines: list[str] = []
    for kind, split, part in _groups(replays):
        why: list[str] = []
        lines += [f"**{kind}, {split}** (measured, then the simulator's error; ! outside the goal)", "",
                  "| row | " + " | ".join(shown) + " | miss |", "|---" * (len(shown) + 2) + "|"]
        for r in part:
            if r.note:
                lines.append(f"| {r.row_id} | {r.note} |" + " |" * len(shown))
                continue
            by = {f.name: f for f in r.figures}
            cells = [f"{_value(f.measured)} ({f.error * 100:+.0f}%{'!' if f.missed else ''})" if (f := by.get(n))
                     else "-" for n in shown]
            mark = ""
            if r.missed and split == "held-out":
                text = KNOWN_MISSES.get(r.row_id, "UNEXPLAINED")
                why += [] if text in why else [text]
                mark = f"[{why.index(text) + 1}]"
            lines.append(f"| {r.row_id} | " + " | ".join(cells) + f" | {mark} |")
        s = summary_of(part)
        lines += ["", f"{kind} {split}: {s['replayed']} of {s['rows']} rows replayed; goal figures: {s['within']} of "
                      f"{s['figures']} within their goal; mean |error| duration {_pct(s['duration'])}, mean TTFT "
                      f"{_pct(s['mean TTFT'])}, mean TPOT {_pct(s['mean TPOT'])}", ""]
        lines += [f"{i}. {text}" for i, text in enumerate(why, 1)] + ([""] if why else [])
        lines += ["By the scheduling profile each row was replayed with:", ""] if s["replayed"] else []
        for profile in sorted({r.setup.split(":")[0] for r in part if not r.note}):
            p = summary_of([r for r in part if not r.note and r.setup.split(":")[0] == profile])
            lines.append(f"- {profile}: {p['replayed']} rows, {p['within']} of {p['figures']} goal figures within "
                         f"their goal; mean |error| duration {_pct(p['duration'])}, output throughput "
                         f"{_pct(p['out tok/s'])}, mean TTFT {_pct(p['mean TTFT'])}, mean TPOT {_pct(p['mean TPOT'])}")
        lines.append("")
    return "\n".join(lines).rstrip()


def _groups(replays: list[Replay]):
    """(kind, split, rows) with rows: colocated and disaggregated (P/D) runs apart, calibration before held-out."""
    for kind, pd in (("colocated", False), ("P/D", True)):
        for split in ("calibration", "held-out"):
            part = [r for r in replays if r.split == split and r.pd == pd]
            if part:
                yield kind, split, part


def _value(x: float) -> str:
    return f"{x:,.0f}" if x >= 1000 else f"{x:.4g}"


def summary_of(replays: list[Replay]) -> dict:
    done = [r for r in replays if not r.note]
    goal = [f for r in done for f in r.figures if f.goal is not None]
    out = {"rows": len(replays), "replayed": len(done), "figures": len(goal),
           "within": sum(not f.missed for f in goal)}
    for name in ("duration", "mean TTFT", "mean TPOT", "out tok/s"):
        errs = [abs(f.error) for r in done for f in r.figures if f.name == name]
        out[name] = sum(errs) / len(errs) if errs else None
    return out


def _pct(x: float | None) -> str:
    """A mean error as a percentage, "-" where no row gave that figure."""
    return "-" if x is None else f"{x:.1%}"


def trend(replays: list[Replay], xs: dict[str, float], figure: str) -> float:
    """Slope of ``figure``'s error against log2(x) over the rows in ``xs`` (row id -> concurrency, prompt length, ...):
    0 means the error does not grow with load or length."""
    pts = [(math.log2(xs[r.row_id]), f.error) for r in replays if r.row_id in xs for f in r.figures if f.name == figure]
    if len(pts) < 2:
        return 0.0
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else 0.0
