"""Stop rules as a table of scripted token streams: (token id, text delta) pairs fed to StopChecker."""

from dataclasses import dataclass, field

import pytest

from pdserve.engine.params import SamplingParams
from pdserve.engine.text.stop import FinishReason, StopChecker

EOS = 2


@dataclass
class Case:
    name: str
    pieces: list  # [(token_id, delta)]
    params: dict = field(default_factory=dict)
    text: str = ""
    reason: FinishReason = FinishReason.STOP
    stop_reason: object = None  # vLLM's: the stop string or stop_token_ids entry; None for EOS and length
    first_chunk: str | None = None  # what the first step may stream
    context_length: int = 1000


def tokens(*deltas):
    return [(100 + i, d) for i, d in enumerate(deltas)]


def tokens_by_text(*deltas):
    """Equal texts get equal ids, as the repetition check compares ids."""
    return [(1000 + ord(d), d) for d in deltas]


CASES = [
    Case("eos ends, its text not emitted", tokens("Hello", " world") + [(EOS, "")], text="Hello world"),
    Case("ignore_eos continues to length", tokens("a") + [(EOS, "<eos>")] + tokens("b"),
         params=dict(ignore_eos=True, max_tokens=3), text="a<eos>b", reason=FinishReason.LENGTH),
    Case("stop token id", tokens("x", "y") + [(77, "z")] + tokens("w"), params=dict(stop_token_ids=[77]),
         text="xy", stop_reason=77),
    Case("EOS listed in stop_token_ids reports it", tokens("x") + [(EOS, "")], params=dict(stop_token_ids=[EOS]),
         text="x", stop_reason=EOS),
    Case("stop string inside one token", tokens("The end. More"), params=dict(stop=[". M"]), text="The end",
         stop_reason=". M"),
    Case("stop straddles tokens", tokens("Par", "is", " is", " nice"), params=dict(stop=["is is"]), text="Par",
         stop_reason="is is", first_chunk="Par"),
    Case("stop straddles, included", tokens("Par", "is", " is", " nice"),
         params=dict(stop=["is is"], include_stop_str_in_output=True), text="Paris is", stop_reason="is is"),
    Case("overlapping stops: earliest wins", tokens("abc", "def"), params=dict(stop=["cde", "bcdx", "def"]),
         text="ab", stop_reason="cde"),
    Case("same start: longest wins", tokens("xabcd"), params=dict(stop=["ab", "abc"]), text="x", stop_reason="abc"),
    Case("stop in the very first token", tokens("STOP here"), params=dict(stop=["STOP"]), text="", stop_reason="STOP"),
    Case("max_tokens = 1", tokens("only", "never"), params=dict(max_tokens=1), text="only",
         reason=FinishReason.LENGTH, first_chunk="only"),
    Case("held-back text released at finish", tokens("wait", " for i"), params=dict(stop=["for it"], max_tokens=2),
         text="wait for i", reason=FinishReason.LENGTH),
    Case("held back then released when it cannot match", tokens("ab", "c", "x"), params=dict(stop=["abcd"], max_tokens=3),
         text="abcx", reason=FinishReason.LENGTH, first_chunk=""),
    Case("no stop: nothing held, first chunk not empty", tokens("Hello", "!"), params=dict(stop=["zz"], max_tokens=2),
         text="Hello!", reason=FinishReason.LENGTH, first_chunk="Hello"),
    Case("min_tokens gates eos", [(EOS, "")] + tokens("a", "b") + [(EOS, "")], params=dict(min_tokens=2),
         text="ab"),
    Case("min_tokens gates stop ids", [(77, "z")] + tokens("a") + [(77, "z")],
         params=dict(min_tokens=2, stop_token_ids=[77]), text="za", stop_reason=77),
    Case("min_tokens gates stop strings", tokens("END", "x", "END"), params=dict(min_tokens=2, stop=["END"]),
         text="ENDx", stop_reason="END"),
    Case("repetition loop", tokens_by_text("a", "b", "a", "b", "a", "b", "a", "b"),
         params=dict(repetition_max_repeats=2, max_tokens=50), text="ababab", reason=FinishReason.REPETITION),
    Case("context length", tokens("a", "b", "c"), params=dict(max_tokens=50), text="ab", reason=FinishReason.LENGTH,
         context_length=10),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_stop_rules(case):
    params = SamplingParams(**case.params).validate()
    checker = StopChecker(params, frozenset({EOS}), 8, case.context_length)
    chunks, result, output_ids = [], None, []
    for token_id, delta in case.pieces:
        output_ids.append(token_id)
        result = checker.step(output_ids, delta)
        chunks.append(result.text)
        if result.finished:
            break
    assert result is not None and result.finished, "the case must finish"
    assert "".join(chunks) == case.text == checker.output_text
    assert result.finish_reason is case.reason
    assert result.stop_reason == case.stop_reason
    if case.first_chunk is not None:
        assert chunks[0] == case.first_chunk


def test_abort_flushes_held_text():
    checker = StopChecker(SamplingParams(stop=["abc"]).validate(), frozenset(), 1, 100)
    assert checker.step([5], "xab").text == "x"
    result = checker.finish(FinishReason.ABORT)
    assert result.text == "ab" and checker.output_text == "xab"


def test_engine_min_tokens_masks_stop_ids(tiny_runtime):
    """The sampler never picks a stop id (or EOS) before min_tokens, so generation really runs that long."""
    from pdserve.engine.llm_engine import LLMEngine

    prompt = [1, 100, 101, 102]
    first = LLMEngine(tiny_runtime).generate([prompt], SamplingParams(max_tokens=1, temperature=0.0))[0].output_ids[0]
    eos = tiny_runtime.tokenizer.eos_id
    ungated = SamplingParams(max_tokens=10, temperature=0.0, stop_token_ids=[first])
    assert len(LLMEngine(tiny_runtime).generate([prompt], ungated)[0].output_ids) == 1
    gated = SamplingParams(max_tokens=10, min_tokens=4, temperature=0.0, stop_token_ids=[first])
    seq = LLMEngine(tiny_runtime).generate([prompt], gated)[0]
    assert len(seq.output_ids) >= 5
    assert first not in seq.output_ids[:4] and eos not in seq.output_ids[:4]
