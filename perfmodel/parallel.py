"""How a model is spread over GPUs, and what each GPU therefore holds and moves."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParallelConfig:
    """tp: tensor parallel degree of attention and dense layers; ep: expert parallel degree (1 = experts split
    tensor-parallel instead); dp_attention: every GPU holds the whole attention and serves its own share of the batch.
    """

    gpus: int = 8
    tp: int = 8
    ep: int = 8
    dp_attention: bool = False
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        if self.gpus <= 0 or self.tp <= 0 or self.ep <= 0:
            raise ValueError("gpus, tp and ep must be positive")
        if self.tp > self.gpus or self.ep > self.gpus:
            raise ValueError(f"tp ({self.tp}) and ep ({self.ep}) cannot exceed gpus ({self.gpus})")
        if self.gpus % self.tp or self.gpus % self.ep:
            raise ValueError(f"gpus ({self.gpus}) must be a multiple of tp ({self.tp}) and ep ({self.ep})")

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)

    @property
    def attention_shards(self) -> int:
        """Ways the attention weights are split (1 with data-parallel attention)."""
        return 1 if self.dp_attention else self.tp

    @property
    def attention_replicas(self) -> int:
        """Groups that each serve a share of the batch with a full copy of attention."""
        return self.gpus // self.attention_shards

    @property
    def expert_split(self) -> int:
        """Ways the routed experts' weights are divided: whole experts over EP ranks, or each expert over TP ranks."""
        return self.ep if self.ep > 1 else self.tp

    def describe(self) -> str:
        attn = "DP attention" if self.dp_attention else f"TP{self.tp} attention"
        moe = f"EP{self.ep}" if self.ep > 1 else f"TP{self.tp} experts"
        return f"{self.gpus} GPUs ({self.nodes} node{'s' if self.nodes > 1 else ''}), {attn}, {moe}"
