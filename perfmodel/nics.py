"""The RDMA NICs of each node type: how many per 8-GPU server, their line rate, what one of them really moves, and
where each fact is published. The KV hand-off (handoff.py) and the cross-node collectives (communication.py, through
``GPU.nic_bandwidth`` and ``GPU.nics``) read them; ``--deployment nics=N,nic_gbps=G`` overrides them for a cluster
built otherwise (e.g. H200 on AWS p5en: 16 x 200 Gb/s EFA)."""

from __future__ import annotations

from dataclasses import dataclass

GIGA = 1e9

# What one 400 Gb/s (50 GB/s) NIC moves in practice: DeepEP's internode normal kernels measure 43-58 GB/s of RDMA
# bandwidth per CX7 400 Gb/s NIC on H800 (github.com/deepseek-ai/DeepEP README, "Normal kernels with pure RDMA") [M];
# 45 GB/s (0.90 of line rate) is the figure the model has always used for bulk transfers.
ACHIEVED_FRACTION = 0.90


@dataclass(frozen=True)
class NodeNICs:
    """RDMA NICs of one 8-GPU server as published."""

    nics: int  # per 8-GPU server
    gbps: float  # line rate of one NIC, Gb/s
    fabric: str
    source: str

    @property
    def nic_bandwidth(self) -> float:
        """Bytes/s one NIC really moves."""
        return self.gbps / 8 * GIGA * ACHIEVED_FRACTION


_H20 = NodeNICs(4, 400, "RoCE", "lmsys.org/blog/2025-09-26-sglang-ant-group (Ant Group's H20 servers: 4 x 400 Gb/s "
                "RDMA NICs per 8-GPU node)")
_DGX = ("NVIDIA DGX H100/H200 user guide (docs.nvidia.com/dgx/dgxh100-user-guide): 8 single-port ConnectX-7 400 Gb/s "
        "InfiniBand/Ethernet for the compute fabric, one per GPU")

NODE_NICS: dict[str, NodeNICs] = {
    "H20-96G": _H20,
    # The 141 GB H20 ("H20-3e") ships in the same server designs; no separate NIC figure is published [E].
    "H20-141G": _H20,
    # DeepSeek's H800 nodes: "each connected to a CX7 InfiniBand 400 Gb/s RDMA network card" (DeepEP README).
    "H800": NodeNICs(8, 400, "InfiniBand", "github.com/deepseek-ai/DeepEP README (H800, one CX7 400 Gb/s IB NIC per "
                     "GPU)"),
    "H100": NodeNICs(8, 400, "InfiniBand", _DGX),
    # H200 on InfiniBand as DGX H200; on AWS p5en the same 3,200 Gb/s is 16 x 200 Gb/s EFAv3
    # (aws.amazon.com/ec2/instance-types/p5: p5en.48xlarge, 3200 Gbps EFAv3): nics=16,nic_gbps=200.
    "H200": NodeNICs(8, 400, "InfiniBand (DGX H200) or EFA (AWS p5en: nics=16,nic_gbps=200)", _DGX),
}

DEFAULT = NodeNICs(8, 400, "InfiniBand", "assumed: one 400 Gb/s NIC per GPU as on DGX H100 [E]")


def node_nics(gpu_name: str, nics: int = 0, gbps: float = 0.0) -> NodeNICs:
    """The NICs of ``gpu_name``'s servers, with a deployment's overrides (0: the published default)."""
    base = NODE_NICS.get(gpu_name, DEFAULT)
    if nics < 0:
        raise ValueError(f"nics: must be zero (the GPU's default) or positive, got {nics}")
    if gbps < 0:
        raise ValueError(f"nic_gbps: must be zero (the GPU's default) or positive, got {gbps}")
    if not nics and not gbps:
        return base
    return NodeNICs(nics or base.nics, gbps or base.gbps, base.fabric, "--deployment override")
