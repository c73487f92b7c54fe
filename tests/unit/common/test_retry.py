"""The retry policy for upstream calls: what is retried, how often and after what pauses, and how long a target
that answered UNAVAILABLE is skipped."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from pdserve.common.retry import DEFAULT_RETRY, DownMark, RetryPolicy, live_first


def rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "detail")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_only_unavailable_counts_as_the_target_being_down():
    assert RetryPolicy.unavailable(rpc_error(grpc.StatusCode.UNAVAILABLE))
    for code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INTERNAL, grpc.StatusCode.DEADLINE_EXCEEDED,
                 grpc.StatusCode.CANCELLED, grpc.StatusCode.NOT_FOUND):
        assert not RetryPolicy.unavailable(rpc_error(code))
    assert not RetryPolicy.unavailable(None) and not RetryPolicy.unavailable(ValueError("UNAVAILABLE"))


def test_the_defaults_are_the_routers_and_the_kvstore_clients():
    assert (DEFAULT_RETRY.rounds, DEFAULT_RETRY.round_pause_s, DEFAULT_RETRY.down_for_s,
            DEFAULT_RETRY.lease_attempts) == (3, 0.5, 2.0, 2)


def test_a_marked_target_is_skipped_for_the_policys_while_then_comes_back():
    clock = Clock()
    mark = DownMark(clock)
    policy = RetryPolicy(down_for_s=2.0)
    assert not mark.down
    assert policy.mark_down(mark)  # its first failure: worth a log line
    assert mark.down and not policy.mark_down(mark)  # a second while down: not
    clock.now += 1.999
    assert mark.down
    clock.now += 0.001
    assert not mark.down
    assert policy.mark_down(mark) and mark.clear() and not mark.down and not mark.clear()


def test_live_targets_come_first_and_all_of_them_when_none_is_live():
    assert live_first([1, 2, 3], lambda t: t != 2) == [1, 3]
    assert live_first(iter([1, 2]), lambda t: False) == [1, 2]  # one may be back already
    assert live_first([], lambda t: True) == []


def run_call(policy: RetryPolicy, answers: list, sleeps: list[float], monkeypatch) -> tuple[object, int]:
    """``policy.call`` against a target answering ``answers`` in turn (an exception raised, else returned)."""
    async def fake_sleep(s: float) -> None:
        sleeps.append(s)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    calls = 0
    seen: list[grpc.StatusCode] = []

    async def attempt():
        nonlocal calls
        answer = answers[calls]
        calls += 1
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def main():
        return await policy.call(attempt, on_retry=lambda err: seen.append(err.code()))

    try:
        result = asyncio.run(main())
    except grpc.aio.AioRpcError as err:
        result = err
    assert len(seen) == sum(isinstance(a, BaseException) for a in answers[:calls])
    return result, calls


def test_a_call_is_repeated_while_unavailable_with_growing_pauses(monkeypatch):
    sleeps: list[float] = []
    down = rpc_error(grpc.StatusCode.UNAVAILABLE)
    result, calls = run_call(RetryPolicy(rounds=3, round_pause_s=0.5), [down, down, "made"], sleeps, monkeypatch)
    assert (result, calls, sleeps) == ("made", 3, [0.5, 1.0])


def test_a_call_gives_up_after_its_rounds_with_the_last_error(monkeypatch):
    sleeps: list[float] = []
    down = rpc_error(grpc.StatusCode.UNAVAILABLE)
    result, calls = run_call(RetryPolicy(rounds=2), [down, down, "never"], sleeps, monkeypatch)
    assert result is down and calls == 2 and len(sleeps) == 1


@pytest.mark.parametrize("code", [grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.PERMISSION_DENIED,
                                  grpc.StatusCode.FAILED_PRECONDITION])
def test_other_errors_are_the_callers_answer_at_once(code, monkeypatch):
    sleeps: list[float] = []
    err = rpc_error(code)
    result, calls = run_call(RetryPolicy(rounds=3), [err, "never"], sleeps, monkeypatch)
    assert result is err and calls == 1 and sleeps == []


def test_pauses_grow_by_round_and_the_first_round_does_not_wait(monkeypatch):
    sleeps: list[float] = []

    async def fake_sleep(s: float) -> None:
        sleeps.append(s)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)

    async def main():
        for r in range(4):
            await RetryPolicy(round_pause_s=0.25).pause(r)

    asyncio.run(main())
    assert sleeps == [0.25, 0.5, 0.75]
