"""The synthetic backend answers from the token ids alone: the same whether the prompt is computed at once, in chunks,
after a prefix taken from the kvstore, or recomputed with part of its answer (the real model's property the stack
relies on for prefix reuse, preemption and resumption)."""

import numpy as np
import pytest

from pdserve.engine.model.synthetic import load_synthetic


@pytest.fixture(scope="module")
def model():
    return load_synthetic()[0]


def _next(model, kv, tokens: list[int]) -> int:
    return int(np.argmax(model.prefill([kv], [tokens])[0]))


def _greedy(model, prompt: list[int], n: int, chunks: list[int] | None = None) -> list[int]:
    """``n`` greedy tokens after ``prompt``, prefilled in ``chunks`` (sizes) and then decoded one by one."""
    kv = model.new_kv()
    sizes, done = chunks or [len(prompt)], 0
    for size in sizes:
        token = _next(model, kv, prompt[done:done + size])
        done += size
    out = [token]
    while len(out) < n:
        out.append(int(np.argmax(model.decode_step([kv], [out[-1]])[0])))
    return out


def test_a_one_token_prefill_after_a_cached_block_is_not_taken_for_a_decode_step(model):
    """Issue 22: a 17-token prompt whose first block came from the kvstore answered differently."""
    prompt = list(range(1000, 1017))
    whole = _next(model, model.new_kv(), prompt)
    first = model.new_kv()
    _next(model, first, prompt[:16])
    cached = model.new_kv()
    cached.append_block(first.export_block(0), 16)  # the block as the kvstore hands it over
    assert _next(model, cached, prompt[16:]) == whole


@pytest.mark.parametrize("chunks", [[1] * 40, [16, 16, 8], [17, 23], [39, 1], [40]])
def test_any_chunking_gives_the_same_answer(model, chunks):
    prompt = [int(x) for x in np.random.default_rng(3).integers(100, 40000, 40)]
    assert _greedy(model, prompt, 24, chunks) == _greedy(model, prompt, 24)


def test_recomputing_prompt_and_answer_continues_it_exactly(model):
    """A preempted or resumed sequence prefills prompt + the tokens it already produced, then decodes on."""
    prompt = list(range(5000, 5030))
    answer = _greedy(model, prompt, 30)
    for split in (1, 7, 16, 29):
        assert _greedy(model, prompt + answer[:split], 30 - split) == answer[split:]
