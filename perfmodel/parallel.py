"""How a model is spread over GPUs, and what each GPU therefore holds and moves."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParallelConfig:
    """tp: tensor parallel degree of attention and dense layers; ep: expert parallel degree (1 = experts split
    tensor-parallel instead); dp_attention: every GPU holds the whole attention and serves its own share of the batch;
    two_batch_overlap: the step is split in two micro-batches so one's communication hides behind the other's compute.
    """

    gpus: int = 8
    tp: int = 8
    ep: int = 8
    dp_attention: bool = False
    gpus_per_node: int = 8
    two_batch_overlap: bool = False

    def __post_init__(self) -> None:
        for name in ("gpus", "tp", "ep", "gpus_per_node"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be positive, got {getattr(self, name)}")
        for name in ("tp", "ep"):
            if getattr(self, name) > self.gpus:
                raise ValueError(f"{name}: {getattr(self, name)} exceeds gpus ({self.gpus})")
            if self.gpus % getattr(self, name):
                raise ValueError(f"{name}: gpus ({self.gpus}) is not a multiple of {name} ({getattr(self, name)})")
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise ValueError(f"gpus: {self.gpus} GPUs do not fill whole nodes of {self.gpus_per_node}")

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

    def nodes_spanned(self, ranks: int) -> int:
        """Nodes one group of ``ranks`` consecutive GPUs covers."""
        return -(-ranks // self.gpus_per_node)

    def describe(self) -> str:
        attn = "DP attention" if self.dp_attention else f"TP{self.tp} attention"
        moe = f"EP{self.ep}" if self.ep > 1 else f"TP{self.tp} experts"
        tbo = ", two-batch overlap" if self.two_batch_overlap else ""
        return f"{self.gpus} GPUs ({self.nodes} node{'s' if self.nodes > 1 else ''}), {attn}, {moe}{tbo}"
