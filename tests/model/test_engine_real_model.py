"""Golden outputs of the real SmolLM2-135M-Instruct (greedy), as llama2.c tests its forward pass."""

import numpy as np
import pytest

from pdserve.engine.llm_engine import LLMEngine
from pdserve.engine.params import SamplingParams
from pdserve.engine.text.stop import FinishReason

pytestmark = pytest.mark.real_model


def chat_ids(runtime, text):
    return runtime.tokenizer.encode_chat([{"role": "user", "content": text}])


def test_golden_capital_of_france(real_runtime):
    engine = LLMEngine(real_runtime)
    seq = engine.add_request(chat_ids(real_runtime, "What is the capital of France?"),
                             SamplingParams(max_tokens=32, temperature=0.0))
    deltas = [result.text for s, result in engine.stream() if s is seq]
    assert seq.output_text == "The capital of France is Paris."
    assert "".join(deltas) == seq.output_text
    assert seq.finish_reason is FinishReason.STOP
    assert seq.stop_reason is None  # ended by <|im_end|>: vLLM reports no stop_reason for EOS / end of turn


def test_real_model_batched_equals_single(real_runtime):
    """Batching (different prompt lengths, shared slab) changes nothing in greedy output."""
    prompts = [chat_ids(real_runtime, p) for p in ("What is the capital of France?", "Name three colors.", "Hi")]
    params = SamplingParams(max_tokens=12, temperature=0.0)
    alone = [LLMEngine(real_runtime).generate([p], params)[0].output_ids for p in prompts]
    together = [s.output_ids for s in LLMEngine(real_runtime).generate(prompts, params)]
    assert together == alone


def test_real_model_kv_matches_recompute(real_runtime):
    model = real_runtime.model
    ids = chat_ids(real_runtime, "What is the capital of France?")
    kv = model.new_kv()
    logits = model.prefill([kv], [ids])[0]
    for _ in range(4):
        token = int(np.argmax(logits))
        ids = ids + [token]
        logits = model.decode_step([kv], [token])[0]
        full = model.prefill([model.new_kv()], [ids])[0]
        assert int(np.argmax(full)) == int(np.argmax(logits))
        np.testing.assert_allclose(logits, full, rtol=1e-3, atol=2e-3)


@pytest.mark.parametrize("weight_path, kv_dtype", [("float32", "float32"), ("quantized", "float32"),
                                                   ("auto", "float16"), ("auto", "bfloat16")])
def test_golden_answer_on_each_weight_path_and_kv_dtype(real_runtime, weight_path, kv_dtype):
    """The quantized products (every step, prefill included) and a 16-bit cache leave the greedy answer as it is."""
    model = real_runtime.model
    assert model.weights.quantized is not None and model.crossover >= 0
    try:
        model.weight_path = weight_path
        real_runtime.use_kv_dtype(kv_dtype)
        engine = LLMEngine(real_runtime)
        seq = engine.add_request(chat_ids(real_runtime, "What is the capital of France?"),
                                 SamplingParams(max_tokens=32, temperature=0.0))
        for _ in engine.stream():
            pass
        assert seq.kv.k.dtype.itemsize == (4 if kv_dtype == "float32" else 2)
    finally:
        model.weight_path = "auto"
        real_runtime.use_kv_dtype("float32")
    assert seq.output_text == "The capital of France is Paris."
