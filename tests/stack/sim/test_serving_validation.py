"""The simulator against every replayable public serving run (python -m pdserve.sim.validate): held-out rows within
the goals (duration and throughput +-15%, mean TTFT and mean TPOT +-25%) except the named misses, each with its
mechanism, and no error that grows with load or prompt length. Not a stack test in the services sense: it lives here
because it simulates ~45 full benchmark runs (about a minute of CPU, spread over the cores), too slow for tests/unit."""

from __future__ import annotations

from pdserve.sim.validate import KNOWN_MISSES, validate
from pdserve.sim.validation_report import format_table, summary_of, trend

REPLAYS = None


def replays():
    global REPLAYS
    if REPLAYS is None:
        REPLAYS = validate()
    return REPLAYS


def test_held_out_misses_are_exactly_the_named_ones():
    held_out = [r for r in replays() if r.split == "held-out"]
    missed = {r.row_id for r in held_out if r.missed}
    assert missed == set(KNOWN_MISSES), format_table([r for r in held_out if r.row_id in missed ^ set(KNOWN_MISSES)])
    assert all(len(why) > 40 for why in KNOWN_MISSES.values())
    s = summary_of(held_out)
    assert s["replayed"] >= 40 and s["within"] >= 60


def test_errors_do_not_trend_with_load_or_prompt_length():
    r = replays()
    for prompt in ("1k1k", "8k1k"):  # InferenceX, SGLang v0.5.12, concurrency 4 to 64
        series = {f"ix-pub-sgl0512-tp8-{prompt}-c{c}": c for c in (4, 8, 16, 32, 64)}
        assert abs(trend(r, series, "mean TPOT")) < 0.03, prompt
        assert abs(trend(r, series, "out tok/s")) < 0.03, prompt
    for stack in ("gps-sgl-dpa", "gps-vllm-tp8"):  # GPUStack, all at once: 2k, 4k and 32k-token prompts
        lengths = {f"{stack}-2k100": 2000, f"{stack}-4k200": 4000, f"{stack}-32k100": 32000}
        assert abs(trend(r, lengths, "duration")) < 0.03, stack
        assert abs(trend(r, lengths, "mean TPOT")) < 0.03, stack
