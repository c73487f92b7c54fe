"""The full stack on the real SmolLM2: the hand-off through the kvstore loses nothing."""

import pytest

from pdserve.client.client import PdserveClient
from pdserve.engine.params import SamplingParams
from tests.helpers import reference, start_stack

pytestmark = pytest.mark.real_model

PROMPTS = ["What is the capital of France?", "巴黎是法国的", "Write a short poem about the sea.",
           "List three prime numbers larger than 100."]


@pytest.mark.parametrize("shards", [1, 2])
def test_disaggregated_equals_in_process_engine(real_runtime, shards):
    params = SamplingParams(max_tokens=24, temperature=0.0)
    prompts = [real_runtime.tokenizer.encode_chat([{"role": "user", "content": p}]) for p in PROMPTS]
    expected = reference(real_runtime, prompts, [params] * len(prompts))
    stack = start_stack(n_kvstore=shards)
    try:
        with PdserveClient(stack.router_target) as c:
            for text, want in zip(PROMPTS, expected):
                chunks = list(c.generate(messages=[{"role": "user", "content": text}], **vars(params)))
                assert [t for ch in chunks for t in ch.token_ids] == want.output_ids, text
                assert "".join(ch.text for ch in chunks) == want.output_text
                assert chunks[-1].finish_reason == want.finish_reason.value
        assert expected[0].output_text == "The capital of France is Paris."
    finally:
        stack.stop()
