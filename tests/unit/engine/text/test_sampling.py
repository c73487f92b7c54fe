import numpy as np
import pytest

from pdserve.engine.params import InvalidParameter, SamplingParams
from pdserve.engine.text.sampling import Sampler

V = 50


def logits(seed=0):
    return np.random.default_rng(seed).standard_normal(V).astype(np.float32) * 3


def sample_and_record(s: Sampler, row: np.ndarray) -> int:
    """What a sequence does with each token: sample it, then record it (Sequence.append_token)."""
    token = s.sample(row)
    s.record(token)
    return token


def draw(params, n=30, prompt=(1, 2)):
    s = Sampler(params, V, list(prompt))
    return [sample_and_record(s, logits(i)) for i in range(n)]


def test_greedy_is_argmax():
    assert draw(SamplingParams(temperature=0.0), 5) == [int(np.argmax(logits(i))) for i in range(5)]


def test_same_seed_same_output_and_different_seed_differs():
    p = dict(temperature=1.0, seed=7)
    assert draw(SamplingParams(**p)) == draw(SamplingParams(**p))
    assert draw(SamplingParams(temperature=1.0, seed=8)) != draw(SamplingParams(**p))


def test_top_k_1_and_tiny_top_p_are_greedy():
    greedy = draw(SamplingParams(temperature=0.0))
    assert draw(SamplingParams(temperature=1.0, top_k=1, seed=1)) == greedy
    assert draw(SamplingParams(temperature=1.0, top_p=1e-6, seed=1)) == greedy
    assert draw(SamplingParams(temperature=1.0, min_p=1.0, seed=1)) == greedy


def test_top_k_limits_candidates():
    row = logits(0)
    allowed = set(np.argsort(-row)[:3].tolist())
    s = Sampler(SamplingParams(temperature=5.0, top_k=3, seed=3), V, [1])
    assert {s.sample(row) for _ in range(200)} <= allowed


def test_penalties_discourage_repeats():
    flat = np.zeros(V, dtype=np.float32)
    flat[10] = 1.0
    s = Sampler(SamplingParams(temperature=0.0, frequency_penalty=2.0), V, [1])
    assert sample_and_record(s, flat) == 10
    assert sample_and_record(s, flat) != 10  # 1.0 - 2.0 * count falls below the zeros
    s = Sampler(SamplingParams(temperature=0.0, repetition_penalty=2.0), V, [10])
    flat2 = flat.copy()
    flat2[11] = 0.6
    assert s.sample(flat2) == 11  # 10 appears in the prompt: 1.0 / 2 < 0.6


@pytest.mark.parametrize("field,value", [
    ("temperature", -1.0), ("top_p", 0.0), ("top_k", -5), ("min_p", 2.0), ("max_tokens", 0),
    ("repetition_penalty", 0.0), ("presence_penalty", 3.0), ("stop", ["x"] * 20), ("stop", ["y" * 300]),
    ("temperature", float("nan")), ("stop_when_complete", 1.5), ("stop_when_complete", -0.1),
    ("stop_when_complete", float("nan")), ("stop_when_complete_interval", 0), ("stop_when_complete_interval", 5000),
])
def test_validation_names_the_field(field, value):
    with pytest.raises(InvalidParameter) as err:
        SamplingParams(**{field: value}).validate()
    assert err.value.field == field and field in str(err.value)
