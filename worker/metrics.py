"""What a worker measures, in both clocks: each step (phase, wall and modeled time, tokens), pacing lag, and the
inter-token latency of its sequences."""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

from pdserve.common.metrics import MODELED_STEP_BUCKETS, TOKEN_COUNT_BUCKETS, WALL_STEP_BUCKETS, ClockPair

STEP_WALL = Histogram("pdserve_step_wall_seconds", "Wall time of one model step", ["phase"],
                      buckets=WALL_STEP_BUCKETS)
STEP_MODELED = Histogram("pdserve_step_modeled_seconds", "Modeled time of one model step", ["phase"],
                         buckets=MODELED_STEP_BUCKETS)
STEP_TOKENS = Histogram("pdserve_step_batch_tokens", "Tokens processed in one step", ["phase"],
                        buckets=TOKEN_COUNT_BUCKETS)
LAGGED_STEPS = Counter("pdserve_pacing_lagged_steps_total", "Steps whose real compute exceeded the paced budget",
                       ["phase"])
LAG_SECONDS = Counter("pdserve_pacing_lag_seconds_total", "Wall seconds by which steps overran the paced budget",
                      ["phase"])
# vLLM's inter-token latency: one observation per token after a sequence's first on this worker, in both clocks. The
# modeled gap is the worker's modeled busy time between the two tokens (interleaved prefills and recomputation included).
ITL = ClockPair("pdserve_inter_token_latency", "Time between consecutive output tokens of a sequence", ("model_name",),
                WALL_STEP_BUCKETS, MODELED_STEP_BUCKETS)
# Two token budgets, kept apart: "step" composes steps and prices them in the modeled clock (the scheduler's
# --max-num-batched-tokens); "forward" is what one prompt forward computes on this machine (--compute-chunk-tokens).
TOKEN_BUDGET = Gauge("pdserve_token_budget", "Tokens a step may schedule (step) and one prompt forward computes "
                     "on this machine (forward)", ["budget"])
PROMPT_FORWARDS = Counter("pdserve_prompt_forwards_total", "Prompt forwards computed on this machine (a step's prompt "
                          "tokens run in forwards of at most the forward budget)")


class _CoreShareCollector:
    """pdserve_core_share_splits_total{core}: the engine's two-way splits (a product's column halves, attention's
    halves) of a worker that shares the host's cores (engine/model/kernels/core_share.py): "lent" ran on a second
    core another worker left idle, "own" on this worker's core alone while another was busy."""

    def __init__(self, parallel) -> None:
        self.parallel = parallel

    def collect(self):
        family = CounterMetricFamily("pdserve_core_share_splits", "Two-way splits of the engine's work by the core "
                                     "they ran on, in a worker sharing the host's cores", labels=["core"])
        family.add_metric(["lent"], self.parallel.lent)
        family.add_metric(["own"], self.parallel.own)
        yield family


_core_share: _CoreShareCollector | None = None


def export_core_share(parallel) -> None:
    """Export a core-sharing worker's split counts (nothing for a worker with cores of its own); a worker built again
    in the same process replaces the one before."""
    global _core_share
    if _core_share is not None:
        REGISTRY.unregister(_core_share)
        _core_share = None
    if parallel is not None and parallel.shares_cores:
        _core_share = _CoreShareCollector(parallel)
        REGISTRY.register(_core_share)
