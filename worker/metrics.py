"""What a worker measures, in both clocks: each step (phase, wall and modeled time, tokens), pacing lag, and the
inter-token latency of its sequences."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
