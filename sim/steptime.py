"""Modeled step durations for the simulator: the same perfmodel calls the workers' clock makes, made cheap.

A decode step with tensor-parallel attention costs a(batch) + b(batch) x (sum of contexts) exactly: every
operator group but the attention core is independent of the contexts, and the attention core's FLOPs and KV bytes
are both proportional to the summed context, so its roofline is too. So each batch size is priced twice (at two
uniform contexts) and every later step of that size is a multiply-add. Data-parallel attention prices the busiest
replica, which depends on how the contexts split; those steps call the model each time. Prefill steps are memoized
on their exact (new tokens, cached tokens) shape.
"""

from __future__ import annotations

from pdserve.perfmodel.timing import TimingModel

_C0, _C1 = 1024, 9216  # the two uniform contexts that fix the affine law (any two distinct values give the same)


class StepTimer:
    def __init__(self, timing: TimingModel) -> None:
        self.timing = timing
        self.affine = timing.parallel.attention_replicas == 1
        self._decode: dict[int, tuple[float, float]] = {}
        self._prefill: dict[tuple, float] = {}

    def decode_seconds(self, context_lens: list[int]) -> float:
        """As common.clock.StepClock.decode_seconds (contexts include the token being decoded)."""
        b = len(context_lens)
        if not b:
            return 0.0
        if not self.affine:
            return self.timing.decode_step_time(context_lens).seconds
        law = self._decode.get(b)
        if law is None:
            t0 = self.timing.decode_step_time([_C0] * b).seconds
            t1 = self.timing.decode_step_time([_C1] * b).seconds
            slope = (t1 - t0) / (b * (_C1 - _C0))
            law = self._decode[b] = (t0 - slope * b * _C0, slope)
        return law[0] + law[1] * sum(context_lens)

    def prefill_seconds(self, work: list[tuple[int, int]]) -> float:
        """As StepClock.prefill_seconds: (new tokens, cached tokens) per sequence."""
        key = tuple(work)
        t = self._prefill.get(key)
        if t is None:
            if len(self._prefill) > 200_000:
                self._prefill.clear()
            t = self._prefill[key] = self.timing.prefill_time([n for n, _ in work], [c for _, c in work]).seconds
        return t

    def transfer_seconds(self, tokens: int, link: str) -> float:
        return self.timing.kv_transfer_time(tokens, link)
