"""Resuming a sequence on another worker (Sequence.resume_from): the tokens and the text that follow are exactly those
of an uninterrupted run, whatever the split point (sampler counts and seeded positions, penalties, held-back text)."""

import pytest

from pdserve.engine.llm_engine import LLMEngine
from pdserve.engine.params import InvalidParameter, SamplingParams

PROMPT = list(range(3, 40))
CASES = {
    "greedy-stop-holdback": SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, stop=["zzq", "qq"]),
    "seeded-penalties": SamplingParams(max_tokens=24, temperature=0.9, top_p=0.9, seed=11, ignore_eos=True,
                                       repetition_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.3),
}


def run(runtime, seq) -> list[str]:
    """Texts streamed per token after ``seq`` joins a fresh engine."""
    engine = LLMEngine(runtime)
    engine.scheduler.add(seq)
    return [result.text for _, result in engine.stream()]


@pytest.mark.parametrize("name", list(CASES))
def test_resume_continues_exactly(tiny_runtime, name):
    params = CASES[name]
    whole = tiny_runtime.new_sequence(PROMPT, params)
    texts = run(tiny_runtime, whole)
    assert len(whole.output_ids) == params.max_tokens
    for k in (1, 2, 7, params.max_tokens - 1):
        seq = tiny_runtime.new_sequence(PROMPT, params)
        seq.resume_from(whole.output_ids[:k])
        after = run(tiny_runtime, seq)
        assert seq.output_ids == whole.output_ids  # no gap, no duplicate, the same tokens
        assert "".join(after) == "".join(texts[k:])  # and exactly the text not yet streamed
        assert seq.finish_reason == whole.finish_reason


def test_resume_refuses_tokens_that_already_end_the_request(tiny_runtime):
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    seq = tiny_runtime.new_sequence(PROMPT, params)
    with pytest.raises(InvalidParameter, match="resume_ids"):
        seq.resume_from([5, 6, 7])
