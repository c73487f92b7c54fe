"""The completeness rule (stop_when_complete) on the tiny model whose judge always reads P(yes) = 0.5
(tests/tiny_model.py, even_judge): a threshold of 0.5 passes every check, 0.51 none, so where a sequence ends is set by
the check schedule alone. The tokens come from near-uniform draws (temperature 50, seeded), which put a sentence end
every few dozen tokens."""

import re
import weakref

import numpy as np
import pytest

from pdserve.engine.llm_engine import LLMEngine
from pdserve.engine.model import llama as model_module
from pdserve.engine.params import SamplingParams
from pdserve.engine.sched.scheduler import Scheduler, SchedulerConfig, SchedulerRole
from pdserve.engine.text.completion import CompletionState, answer_ids, ends_sentence
from pdserve.engine.text.stop import FinishReason

PROMPT = list(range(3, 40))
BASE = dict(max_tokens=120, temperature=50.0, seed=0, ignore_eos=True)
PASSES, NEVER = 0.5, 0.51  # against the even judge's 0.5
SENTENCE_END = re.compile("[.!?。！？…\n][ \t\"')\\]}”’」』）]*$")  # the documented rule, written out again


def run(runtime, **overrides):
    """(sequence, [(output length, result)]) of one request through the in-process engine."""
    engine = LLMEngine(runtime)
    seq = engine.add_request(PROMPT, SamplingParams(**dict(BASE, **overrides)))
    return seq, [(len(s.output_ids), r) for s, r in engine.stream()]


def checked_at(results) -> list[int]:
    return [n for n, r in results if r.check is not None]


def expected_checks(boundaries: list[int], min_tokens: int = 0, interval: int = 16) -> list[int]:
    """Where the schedule puts checks: sentence ends past min_tokens (never the first token), interval apart."""
    out: list[int] = []
    for g in boundaries:
        if g > max(1, min_tokens) and (not out or g - out[-1] >= interval):
            out.append(g)
    return out


@pytest.fixture(scope="module")
def baseline(tiny_judge_runtime):
    """The run without the rule: its tokens, per-token texts, and where sentences end."""
    seq, results = run(tiny_judge_runtime)
    texts = [r.text for _, r in results]
    boundaries = [n for n, text in enumerate(texts, 1) if SENTENCE_END.search(text)]
    assert len(boundaries) >= 4 and boundaries[0] > 1, boundaries  # the seed gives the tests something to check
    return seq, texts, boundaries


def test_the_even_judge_reads_one_half_and_the_check_never_changes_the_tokens(tiny_judge_runtime, baseline):
    whole, _, boundaries = baseline
    seq, results = run(tiny_judge_runtime, stop_when_complete=NEVER)
    assert seq.output_ids == whole.output_ids and seq.finish_reason is FinishReason.LENGTH
    assert checked_at(results) == expected_checks(boundaries)
    assert {r.check.p_yes for _, r in results if r.check} == {0.5}
    turn = len(tiny_judge_runtime.judge.turn_ids)
    for n, r in results:  # the newest token and the turn, after everything cached before it
        if r.check:
            assert r.check.tokens == 1 + turn and r.check.context == len(PROMPT) + n - 1
    assert seq.completion.checks == len(checked_at(results))
    assert seq.completion.check_tokens == seq.completion.checks * (1 + turn)


def test_a_passing_check_ends_the_answer_after_its_sentence_with_reason_complete(tiny_judge_runtime, baseline):
    whole, texts, boundaries = baseline
    seq, results = run(tiny_judge_runtime, stop_when_complete=PASSES)
    first = boundaries[0]
    assert seq.finish_reason is FinishReason.COMPLETE and seq.stop_reason is None
    assert seq.output_ids == whole.output_ids[:first]
    assert seq.output_text == "".join(texts[:first])
    last_n, last = results[-1]
    assert last_n == first and last.finished and last.check is not None and last.check.p_yes == 0.5


def test_min_tokens_gates_the_checks_and_the_interval_spaces_them(tiny_judge_runtime, baseline):
    _, _, boundaries = baseline
    gate = boundaries[0]  # no check at or before it
    for min_tokens, interval in ((0, 1), (gate, 16), (0, 30)):
        _, results = run(tiny_judge_runtime, stop_when_complete=NEVER, min_tokens=min_tokens,
                         stop_when_complete_interval=interval)
        assert checked_at(results) == expected_checks(boundaries, min_tokens, interval), (min_tokens, interval)
    seq, _ = run(tiny_judge_runtime, stop_when_complete=PASSES, min_tokens=gate)
    assert seq.finish_reason is FinishReason.COMPLETE and len(seq.output_ids) == boundaries[1]


def test_length_and_stop_strings_apply_first(tiny_judge_runtime, baseline):
    _, texts, boundaries = baseline
    first = boundaries[0]
    seq, results = run(tiny_judge_runtime, stop_when_complete=PASSES, max_tokens=first)
    assert seq.finish_reason is FinishReason.LENGTH and not checked_at(results)
    seq, results = run(tiny_judge_runtime, stop_when_complete=NEVER, max_tokens=first + 1)  # checked, then length
    assert seq.finish_reason is FinishReason.LENGTH and checked_at(results) == [first]
    stop = texts[first - 1]  # the sentence end itself is a stop string
    seq, results = run(tiny_judge_runtime, stop_when_complete=PASSES, stop=[stop])
    assert seq.finish_reason is FinishReason.STOP and seq.stop_reason == stop and not checked_at(results)
    assert len(seq.output_ids) == first


def test_text_held_back_for_a_stop_string_is_released_when_complete(tiny_judge_runtime, baseline):
    _, texts, boundaries = baseline
    first = boundaries[0]
    seq, results = run(tiny_judge_runtime, stop_when_complete=PASSES, stop=[texts[first - 1] + "\x01never"])
    assert seq.finish_reason is FinishReason.COMPLETE
    assert "".join(r.text for _, r in results) == seq.output_text == "".join(texts[:first])


def test_the_fork_reads_the_sequence_kv_in_place_and_is_dropped_at_once(tiny_judge_runtime, monkeypatch):
    rt = tiny_judge_runtime
    forks, own_sizes = [], []

    class RecordedFork(model_module.ForkKV):
        def write(self, layer, start, k_new, v_new):
            own_sizes.append(self.own.capacity)
            super().write(layer, start, k_new, v_new)

        def __init__(self, parent):
            super().__init__(parent)
            forks.append(weakref.ref(self))

    monkeypatch.setattr(model_module, "ForkKV", RecordedFork)
    turn = [5, 6, 7, 8, 9]
    for in_slab in (False, True):
        kv = rt.model.new_kv(block_tokens=rt.block_tokens)
        rt.model.prefill([kv], [PROMPT])
        if in_slab:
            rt.slab.place(kv, kv.length + 1)
        k, v, length = kv.k.copy(), kv.v.copy(), kv.length
        want = rt.model.prefill([_private_copy(rt, kv)], [turn])  # the same tokens after a full copy of the KV
        got = rt.model.fork_forward([kv], [turn])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        assert kv.length == length and np.array_equal(kv.k, k) and np.array_equal(kv.v, v)  # never written
        assert forks and all(ref() is None for ref in forks)  # the fork and its own KV are gone after the call
        assert set(own_sizes) == {rt.block_tokens}  # its own storage holds its 5 tokens: the prefix is not copied
        rt.slab.free(kv)


def _private_copy(rt, kv):
    out = rt.model.new_kv(capacity=kv.length, block_tokens=rt.block_tokens)
    out.k[:, :, :kv.length] = kv.k[:, :, :kv.length]
    out.v[:, :, :kv.length] = kv.v[:, :, :kv.length]
    out.length = kv.length
    return out


def test_a_resumed_sequence_keeps_its_check_schedule(tiny_judge_runtime, baseline):
    whole, _, boundaries = baseline
    params = SamplingParams(**dict(BASE, stop_when_complete=NEVER, stop_when_complete_interval=30))
    want = expected_checks(boundaries, interval=30)
    assert len(want) >= 3 and any(want[1] < g < want[1] + 30 for g in boundaries)
    # resumed right at a check, and between checks: where the next sentence end is closer than the interval
    for k in (want[0], want[1], want[1] + 1, want[2] - 1):
        seq = tiny_judge_runtime.new_sequence(PROMPT, params)
        seq.resume_from(whole.output_ids[:k])
        engine = LLMEngine(tiny_judge_runtime)
        engine.scheduler.add(seq)
        results = [(len(s.output_ids), r) for s, r in engine.stream()]
        assert seq.output_ids == whole.output_ids
        assert checked_at(results) == [g for g in want if g > k], k


def test_a_preempted_sequence_keeps_its_check_schedule_and_output(tiny_judge_runtime, baseline):
    rt = tiny_judge_runtime
    whole, _, boundaries = baseline
    # seed 0, added last, is the one preempted (twice): the second time at 60 tokens, after its check at 53; its next
    # sentence end, at 69, is closer than the interval (20): checked there only if preemption forgot the schedule
    params = [SamplingParams(**dict(BASE, seed=s, stop_when_complete=NEVER, stop_when_complete_interval=20))
              for s in (1, 2, 0)]
    alone = []
    for p in params:
        seq, results = run(rt, **{k: getattr(p, k) for k in ("seed", "stop_when_complete",
                                                              "stop_when_complete_interval")})
        alone.append((seq.output_ids, checked_at(results)))
    # 16 blocks of 16 tokens; each sequence grows to 157 tokens (10 blocks): three cannot run together
    scheduler = Scheduler(SchedulerConfig(SchedulerRole.DECODE, kv_blocks=16), rt.free)
    seqs = [rt.new_sequence(PROMPT, p) for p in params]
    for seq in seqs:
        scheduler.add(seq)
    checks: dict[int, list[int]] = {id(s): [] for s in seqs}
    while scheduler.has_work():
        step = scheduler.schedule()
        for seq, result in scheduler.postprocess(step, rt.execute(step)):
            if result.check is not None:
                checks[id(seq)].append(len(seq.output_ids))
    assert scheduler.num_preemptions >= 1
    assert [(s.output_ids, checks[id(s)]) for s in seqs] == alone


@pytest.mark.parametrize("delta,ends", [(".", True), ("Paris.", True), ('."', True), ("?)", True), ("。」", True),
                                        ("…", True), ("\n", True), ("! ", True), ("Paris", False), ('"', False),
                                        ("", False), (". x", False)])
def test_a_sentence_ends_on_its_mark_closing_quotes_and_brackets_aside(delta, ends):
    assert ends_sentence(delta) is ends


def test_the_first_token_never_counts_toward_the_schedule():
    """Prefill samples the first token and no check runs there, so it must not start the interval either."""
    state = CompletionState(threshold=0.5, interval=16, min_tokens=0)
    state.observe(1, ".", False)
    assert not state.due and state.last_due_at == 0
    state.observe(5, ".", False)
    assert state.due and state.last_due_at == 5


def test_the_threshold_is_compared_as_the_wire_carries_it():
    """The router and the workers hold the threshold as float32: 0.7 arrives as 0.69999999; in process the same."""
    wire = float(np.float32(0.7))
    state = CompletionState(threshold=0.7, interval=16, min_tokens=0)
    assert wire < 0.7 and state.passes(wire) and not state.passes(float(np.nextafter(np.float32(wire), 0)))


def test_the_judge_reads_tokens_that_say_only_yes_or_only_no(tiny_judge_runtime):
    """The tiny vocabulary spells " Yes" and " No" with a leading space token: it would count on both sides."""
    tok = tiny_judge_runtime.tokenizer
    yes, no = answer_ids(tok)
    assert sorted(tok.decode([t]) for t in yes) == ["Y", "y"] and sorted(tok.decode([t]) for t in no) == ["N", "n"]


def test_a_check_that_would_not_fit_the_context_is_skipped(tiny_judge_runtime):
    rt = tiny_judge_runtime
    context, turn = rt.config.context_length, len(rt.judge.turn_ids)
    prompt = [3 + i % 37 for i in range(380)]
    engine = LLMEngine(rt)
    seq = engine.add_request(prompt, SamplingParams(**dict(BASE, max_tokens=context - len(prompt),
                                                           stop_when_complete=NEVER, stop_when_complete_interval=1)))
    results = [(len(s.output_ids), r) for s, r in engine.stream()]
    ends = [n for n, r in results if n > 1 and SENTENCE_END.search(r.text)]
    fits = [n for n in ends if len(prompt) + n + turn <= context]  # cached context + the newest token + the turn
    assert fits and fits != ends, ends  # the seed puts sentence ends on both sides of the limit
    assert seq.finish_reason is FinishReason.LENGTH and checked_at(results) == fits


@pytest.mark.parametrize("kv_dtype", ["float16", "bfloat16"])
def test_the_fork_reads_a_16_bit_cache(tiny_judge_runtime, kv_dtype):
    rt = tiny_judge_runtime
    rt.use_kv_dtype(kv_dtype)
    try:
        kv = rt.model.new_kv(block_tokens=rt.block_tokens)
        rt.model.prefill([kv], [PROMPT])
        k = kv.k.copy()
        want = rt.model.prefill([_private_copy(rt, kv)], [[5, 6, 7]])  # its new tokens rounded to 16 bits
        got = rt.model.fork_forward([kv], [[5, 6, 7]])  # the fork keeps its own tokens in float32
        assert got.dtype == np.float32 and np.array_equal(kv.k, k)
        np.testing.assert_allclose(got, want, rtol=0.05, atol=0.05)
    finally:
        rt.use_kv_dtype("float32")
