"""``pdserve bench stop-rules``: every cut is sorted against the answer's EOS point, and the runs compare on the
same tokens (the tiny model whose judge always reads 0.5)."""

from types import SimpleNamespace

from pdserve.bench.runtime.stop_rules import Run, measure, summarize
from pdserve.engine.text.stop import FinishReason


def answer(length: int, reason: FinishReason):
    return SimpleNamespace(output_ids=[7] * length, finish_reason=reason, completion=None)


def test_cuts_are_sorted_against_the_eos_point():
    c = FinishReason.COMPLETE
    seqs = [answer(5, c), answer(9, c), answer(12, c), answer(7, c), answer(30, FinishReason.LENGTH)]
    eos_at = [10, 10, 10, None, 10]  # the end-of-turn token is the 10th: the answer's text ends at 9 tokens
    [row, en, zh] = summarize("complete", ["en", "en", "zh", "zh", "en"], Run(seqs, 1.0, 0.5, []), eos_at)
    assert (row.ended_by_rule, row.before_eos, row.lost_tokens, row.at_eos) == (4, 1, [4], 1)
    assert (row.after_eos, row.extra_tokens, row.no_eos, row.to_limit) == (1, [3], 1, 1)
    assert (en.answers, en.ended_by_rule, zh.answers, zh.no_eos) == (3, 2, 2, 1)
    assert row.tokens == 5 + 9 + 12 + 7 + 30


def test_the_runs_share_their_tokens_and_the_rule_ends_answers(tiny_judge_runtime):
    rows, judged = measure(tiny_judge_runtime, 24, [0.5, 0.51], 4)
    rows = {(r.run, r.lang): r for r in rows}
    full, passing, never = rows["ignore_eos", "all"], rows["complete >= 0.5", "all"], rows["complete >= 0.51", "all"]
    assert full.tokens == 40 * 24 and full.to_limit == 40
    assert never.ended_by_rule == 0 and never.tokens == full.tokens and never.checks > 0
    assert 0 < passing.ended_by_rule == passing.before_eos + passing.at_eos + passing.after_eos + passing.no_eos
    assert passing.ended_by_rule + passing.to_limit == 40 and passing.tokens < full.tokens
    # the 0.51 run's checks, all read at 0.5 by the even judge
    assert sum(j.checks for j in judged) == never.checks and {j.mean_p_yes for j in judged if j.checks} == {0.5}
