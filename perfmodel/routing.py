"""How unevenly routed tokens land on expert-parallel GPUs: the busiest GPU sets the MoE step.

DeepSeek-V3/R1 routes group-limited: each token keeps its best ``topk_groups`` of ``n_expert_groups`` expert groups, then
its ``experts_per_token`` experts inside them. Experts sit on GPUs in contiguous blocks (at EP8 one group per GPU).
With uniform routing the mean GPU receives tokens x k / EP expert-token pairs; the maximum over GPUs is what the step
waits for. At batch 1 one GPU can hold up to 8 of a token's 8 experts against a mean of 1; at large batches the
maximum converges to the mean. No closed form covers the group step, so the expected maximum comes from a seeded Monte
Carlo run, cached per shape: exactly up to EXACT_TOKENS tokens, then on a geometric grid (a quarter apart) with the
excess over the mean interpolated between its points, so a simulation meeting every batch size runs a dozen.
Uniform routing is the floor: real routing is skewed, and expert-parallel load balancers (EPLB) bring it back
towards this floor, not below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

SEED = 20250101
MAX_SAMPLES = 20_000  # token draws per estimate (trials x tokens); a new shape costs <= ~60 ms
SIMULATED_TOKENS = 256  # beyond this the excess over the mean shrinks as 1/sqrt(tokens) (a sum of many draws)
EXACT_TOKENS = 16
GRID = (16, 20, 25, 32, 40, 50, 64, 80, 101, 128, 161, 203, 256)  # EXACT_TOKENS to SIMULATED_TOKENS, x1.26


@dataclass(frozen=True)
class ExpertLoad:
    """Per GPU, for one MoE layer: expert-token pairs (mean and expected max) and distinct experts (expected max)."""

    mean_pairs: float
    max_pairs: float
    max_distinct_experts: float
    mean_distinct_experts: float

    @property
    def imbalance(self) -> float:
        """Expected busiest GPU over the mean GPU (1.0 = perfectly even)."""
        return self.max_pairs / self.mean_pairs if self.mean_pairs else 1.0


@lru_cache(maxsize=4096)
def expert_load(tokens: int, experts: int, per_token: int, ep: int, groups: int = 1, topk_groups: int = 1) -> ExpertLoad:
    """Expected expert load per GPU for ``tokens`` tokens routed uniformly (group-limited when groups > 1)."""
    if tokens <= 0:
        return ExpertLoad(0.0, 0.0, 0.0, 0.0)
    ep = max(1, ep)
    mean = tokens * per_token / ep
    if tokens > SIMULATED_TOKENS:
        base = _simulated(SIMULATED_TOKENS, experts, per_token, ep, groups, topk_groups)
        excess = (base.imbalance - 1.0) * (SIMULATED_TOKENS / tokens) ** 0.5
        return ExpertLoad(mean, mean * (1.0 + excess), base.max_distinct_experts, base.mean_distinct_experts)
    if tokens <= EXACT_TOKENS or tokens in GRID:
        return _simulated(tokens, experts, per_token, ep, groups, topk_groups)
    hi = next(g for g in GRID if g > tokens)
    lo = GRID[GRID.index(hi) - 1]
    a, b = (_simulated(g, experts, per_token, ep, groups, topk_groups) for g in (lo, hi))
    w = (math.log(tokens) - math.log(lo)) / (math.log(hi) - math.log(lo))
    between = lambda x, y: x + w * (y - x)  # noqa: E731
    return ExpertLoad(mean, mean * between(a.imbalance, b.imbalance),
                      between(a.max_distinct_experts, b.max_distinct_experts),
                      between(a.mean_distinct_experts, b.mean_distinct_experts))


@lru_cache(maxsize=1024)
def _simulated(tokens: int, experts: int, per_token: int, ep: int, groups: int, topk_groups: int) -> ExpertLoad:
    """The seeded Monte Carlo estimate for exactly ``tokens`` tokens."""
    rng = np.random.default_rng(SEED)
    per_group = experts // groups
    trials = max(4, min(64, MAX_SAMPLES // tokens))
    chunk = max(1, min(tokens, MAX_SAMPLES // trials))
    max_pairs = max_distinct = mean_distinct = 0.0
    for _ in range(trials):
        pairs = np.zeros(ep)
        hit = np.zeros(experts, dtype=bool)
        done = 0
        while done < tokens:
            n = min(chunk, tokens - done)
            if groups > 1:
                # each token's top groups: a random subset of topk_groups of the groups
                chosen_groups = np.argsort(rng.random((n, groups)), axis=1)[:, :topk_groups]
                # then per_token experts among the chosen groups' experts
                slot = np.argsort(rng.random((n, topk_groups * per_group)), axis=1)[:, :per_token]
                expert = chosen_groups[np.arange(n)[:, None], slot // per_group] * per_group + slot % per_group
            else:
                expert = np.argsort(rng.random((n, experts)), axis=1)[:, :per_token]
            pairs += np.bincount((expert * ep // experts).ravel(), minlength=ep)
            hit[expert.ravel()] = True
            done += n
        distinct = np.bincount(np.flatnonzero(hit) * ep // experts, minlength=ep)
        max_pairs += pairs.max()
        max_distinct += distinct.max()
        mean_distinct += distinct.mean()
    return ExpertLoad(tokens * per_token / ep, float(max_pairs / trials), float(max_distinct / trials),
                      float(mean_distinct / trials))
