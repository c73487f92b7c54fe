"""The repetition stop rule, kept incrementally: it finds exactly the loops the definition names (N + 1 copies in a row
of a loop of at most repetition_max_period tokens), also for a checker that starts on a resumed sequence."""

import random

from pdserve.engine.params import SamplingParams
from pdserve.engine.text.stop import StopChecker


def by_definition(ids: list[int], max_period: int, repeats: int) -> bool:
    for period in range(1, max_period + 1):
        span = period * (repeats + 1)
        if span <= len(ids) and ids[-span:][period:] == ids[-span:][:-period]:
            return True
    return False


def checker(max_period: int, repeats: int) -> StopChecker:
    params = SamplingParams(max_tokens=100_000, repetition_max_repeats=repeats, repetition_max_period=max_period)
    return StopChecker(params, frozenset(), 0, 1_000_000)


def test_it_finds_exactly_the_loops_the_definition_names():
    rng = random.Random(1)
    for _ in range(300):
        max_period, repeats = rng.randint(1, 8), rng.randint(1, 4)
        c, ids = checker(max_period, repeats), []
        for _ in range(200):
            ids.append(rng.choice([1, 2, 3]) if rng.random() < 0.7 or not ids else ids[-rng.randint(1, len(ids))])
            assert c._repeats_loop(ids) == by_definition(ids, max_period, repeats), (max_period, repeats, ids)


def test_a_checker_for_a_resumed_sequence_catches_up():
    ids = [5, 6, 7] * 4
    assert checker(3, 3)._repeats_loop(ids)  # four copies: more than 3 repeats
    assert not checker(3, 4)._repeats_loop(ids)
