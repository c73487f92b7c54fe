"""Modeled step durations for the simulator: the same perfmodel call the workers' clock makes
(``TimingModel.step_time`` on the step the scheduler composed), made cheap.

A decode step costs a(batch) + b(batch) x (sum of contexts) exactly: every operator group but the attention core is
independent of the contexts, and the attention core's FLOPs and KV bytes are both proportional to the summed context,
so its roofline is too. With data-parallel attention the same holds for the busiest rank's own share (which picks
it) and, once it is picked, for the step: the other ranks only count through the step's token total. So each shape
is priced twice (at two uniform contexts) and every later step of that shape is a multiply-add. Prefill-only steps are
memoized on their exact (new tokens, cached tokens) shape; mixed steps, and data-parallel steps with a prefill or
two-batch overlap, call the model each time.
"""

from __future__ import annotations

from pdserve.engine.sched.scheduler import Step
from pdserve.perfmodel.timing import TimingModel

_C0, _C1 = 1024, 9216  # the two uniform contexts that fix the affine law (any two distinct values give the same)


def _affine(price, b: int) -> tuple[float, float]:
    """(a, slope) with price(contexts) = a + slope x sum(contexts) for ``b`` contexts."""
    t0, t1 = price([_C0] * b), price([_C1] * b)
    slope = (t1 - t0) / (b * (_C1 - _C0))
    return t0 - slope * b * _C0, slope


class StepTimer:
    def __init__(self, timing: TimingModel) -> None:
        self.timing = timing
        p = timing.parallel
        self.ranked = p.attention_replicas > 1
        self.fast_ranks = self.ranked and not p.two_batch_overlap
        self._decode: dict[int, tuple[float, float]] = {}
        self._rank: dict[int, tuple[float, float]] = {}
        self._busiest: dict[tuple[int, int], tuple[float, float]] = {}
        self._prefill: dict[tuple, float] = {}

    def step_seconds(self, step: Step) -> float:
        """As worker.clock.StepClock.step_seconds: the modeled duration of a step the scheduler composed."""
        if step.ranks is None and not self.ranked:
            if not step.prefills:
                return self.decode_seconds([seq.kv.length + 1 for seq in step.decodes])
            if not step.decodes:
                return self.prefill_seconds([(n, seq.kv.length) for seq, n in step.prefills])
        batches = step.rank_batches()
        if self.fast_ranks and not step.prefills:
            return self._ranked_decode_seconds([d for _, d in batches if d])
        return self.timing.step_time(batches).seconds

    def decode_seconds(self, context_lens: list[int]) -> float:
        """A decode step of one attention group (contexts include the token being decoded)."""
        b = len(context_lens)
        if not b:
            return 0.0
        if self.ranked:
            return self.timing.decode_step_time(context_lens).seconds
        law = self._decode.get(b)
        if law is None:
            law = self._decode[b] = _affine(lambda c: self.timing.step_time([([], c)]).seconds, b)
        return law[0] + law[1] * sum(context_lens)

    def prefill_seconds(self, work: list[tuple[int, int]]) -> float:
        """A prefill-only step of one attention group: (new tokens, cached tokens) per sequence."""
        key = tuple(work)
        t = self._prefill.get(key)
        if t is None:
            if len(self._prefill) > 200_000:
                self._prefill.clear()
            t = self._prefill[key] = self.timing.step_time([(work, [])]).seconds
        return t

    def _ranked_decode_seconds(self, ranks: list[list[int]]) -> float:
        """A decode step over data-parallel attention ranks: the busiest rank by its own share, then the step."""
        def own(r: list[int]) -> float:
            law = self._rank.get(len(r))
            if law is None:
                law = self._rank[len(r)] = _affine(
                    lambda c: self.timing.rank_seconds([], [(1, x) for x in c]), len(r))
            return law[0] + law[1] * sum(r)

        busiest = max(ranks, key=own)
        b, tokens = len(busiest), sum(len(r) for r in ranks)
        law = self._busiest.get((b, tokens))
        if law is None:
            law = self._busiest[(b, tokens)] = _affine(lambda c: self.timing.busiest_rank_step(
                [], [(1, x) for x in c], tokens, tokens, False).seconds, b)
        return law[0] + law[1] * sum(busiest)

    def transfer_seconds(self, tokens: int, link: str) -> float:
        return self.timing.kv_transfer_time(tokens, link)
