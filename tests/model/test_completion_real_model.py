"""The completeness rule with SmolLM2-135M as its own judge: "What is the capital of France?" with ignore_eos and
max_tokens 64, greedy.

What we observed (and pin here): after "The capital of France is Paris." (7 tokens) the model's own check gives
P(yes) = 0.275. With a threshold of 0.25 the answer ends right there, finish reason complete, where without the rule
it runs on past its end of turn (into an invented "system" and "user" turn) to the 64-token limit. With 0.5 no check
passes: the checks after 7, 30 and 53 tokens read P(yes) = 0.275, 0.202 and 0.163. A 135M-parameter model is a weak
judge that leans to "no" on complete and partial answers alike (docs/stop-rules.md has the measurement).
"""

import pytest

from pdserve.engine.llm_engine import LLMEngine
from pdserve.engine.params import SamplingParams
from pdserve.engine.text.stop import FinishReason

pytestmark = pytest.mark.real_model
QUESTION = "What is the capital of France?"


def answer(runtime, threshold: float):
    engine = LLMEngine(runtime)
    seq = engine.add_request(runtime.tokenizer.encode_chat([{"role": "user", "content": QUESTION}]),
                             SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True,
                                            stop_when_complete=threshold))
    checks = [(len(s.output_ids), r.check.p_yes) for s, r in engine.stream() if r.check is not None]
    return seq, checks


def test_the_answer_ends_complete_right_after_paris(real_runtime):
    seq, checks = answer(real_runtime, 0.25)
    assert seq.output_text == "The capital of France is Paris."
    assert seq.finish_reason is FinishReason.COMPLETE and len(seq.output_ids) == 7
    [(at, p_yes)] = checks
    assert at == 7 and p_yes == pytest.approx(0.275, abs=0.01)


def test_at_one_half_the_small_judge_never_says_complete(real_runtime):
    seq, checks = answer(real_runtime, 0.5)
    assert seq.finish_reason is FinishReason.LENGTH and len(seq.output_ids) == 64
    assert seq.output_text.startswith("The capital of France is Paris.\n")  # and on past the end of its turn
    assert [at for at, _ in checks] == [7, 30, 53] and max(p for _, p in checks) < 0.3
