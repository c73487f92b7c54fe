"""How a model is spread over GPUs, and what each GPU therefore holds and moves."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParallelConfig:
    """tp: tensor parallel degree of attention and dense layers; ep: expert parallel degree (1 = experts split
    tensor-parallel instead); dp_attention: attention runs data-parallel, each group of GPUs holding the whole
    attention and serving its own share of the batch; attention_dp: how many such groups a TP group forms (SGLang's
    ``--dp-size`` with ``--enable-dp-attention``: attention is tensor-parallel over ``tp / attention_dp`` GPUs inside
    each group; 0: one group per GPU, attention unsplit); two_batch_overlap: the step is split in two micro-batches
    so one's communication hides behind the other's compute.
    """

    gpus: int = 8
    tp: int = 8
    ep: int = 8
    dp_attention: bool = False
    gpus_per_node: int = 8
    two_batch_overlap: bool = False
    attention_dp: int = 0

    def __post_init__(self) -> None:
        for name in ("gpus", "tp", "ep", "gpus_per_node"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be positive, got {getattr(self, name)}")
        for name in ("tp", "ep"):
            if getattr(self, name) > self.gpus:
                raise ValueError(f"{name}: {getattr(self, name)} exceeds gpus ({self.gpus})")
            if self.gpus % getattr(self, name):
                raise ValueError(f"{name}: gpus ({self.gpus}) is not a multiple of {name} ({getattr(self, name)})")
        if self.attention_dp:
            if not self.dp_attention:
                raise ValueError(f"dp: {self.attention_dp} attention groups need dp_attention")
            if self.attention_dp < 2 or self.tp % self.attention_dp:
                raise ValueError(f"dp: {self.attention_dp} attention groups must be at least 2 and divide "
                                 f"tp ({self.tp})")
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise ValueError(f"gpus: {self.gpus} GPUs do not fill whole nodes of {self.gpus_per_node}")

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)

    @property
    def attention_shards(self) -> int:
        """Ways the attention weights are split: the TP degree, or inside one data-parallel attention group its
        ``tp / attention_dp`` GPUs (1 with one group per GPU)."""
        if not self.dp_attention:
            return self.tp
        return self.tp // self.attention_dp if self.attention_dp else 1

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

    def attention_label(self) -> str:
        """``TP8``, ``DP-attn`` (one group per GPU) or ``DP4-attn TP2`` (four groups of two GPUs in all)."""
        if not self.dp_attention:
            return f"TP{self.tp}"
        shards = self.attention_shards
        return "DP-attn" if shards == 1 else f"DP{self.attention_replicas}-attn TP{shards}"

    def describe(self) -> str:
        shards = self.attention_shards
        if not self.dp_attention:
            attn = f"TP{self.tp} attention"
        else:
            attn = "DP attention" if shards == 1 else f"DP{self.attention_replicas} attention (TP{shards} each)"
        moe = f"EP{self.ep}" if self.ep > 1 else f"TP{self.tp} experts"
        tbo = ", two-batch overlap" if self.two_batch_overlap else ""
        return f"{self.gpus} GPUs ({self.nodes} node{'s' if self.nodes > 1 else ''}), {attn}, {moe}{tbo}"
