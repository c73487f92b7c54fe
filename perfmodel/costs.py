"""The cost of a step as the timing model builds it: a roofline per operator group (:class:`GroupCost`) and their sum
with communication and overheads (:class:`Breakdown`), kept whole so ``explain`` can show the arithmetic."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GroupCost:
    """One operator group on the busiest GPU: the arithmetic behind its seconds."""

    flops: float = 0.0
    bytes: float = 0.0
    compute_s: float = 0.0
    memory_s: float = 0.0
    factors: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"

    def plus(self, other: "GroupCost") -> "GroupCost":
        factors = dict(self.factors)
        factors.update(other.factors)
        return GroupCost(self.flops + other.flops, self.bytes + other.bytes, self.compute_s + other.compute_s,
                         self.memory_s + other.memory_s, factors)


@dataclass
class Breakdown:
    """Seconds per component of one modeled step (or request); ``groups`` keeps the arithmetic of each roofline."""

    parts: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
    steps: int = 1
    groups: dict[str, GroupCost] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())

    def add(self, other: "Breakdown") -> "Breakdown":
        for k, v in other.parts.items():
            self.parts[k] = self.parts.get(k, 0.0) + v
        for k, g in other.groups.items():
            self.groups[k] = self.groups[k].plus(g) if k in self.groups else g
        self.tokens += other.tokens
        self.steps += other.steps
        return self

    def as_dict(self) -> dict[str, float]:
        return dict(self.parts, total=self.seconds)
