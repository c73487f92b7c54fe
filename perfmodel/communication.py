"""Communication per layer on the modeled deployment: tensor-parallel all-reduce (interpolated from measured NVLink
figures, plus a hierarchical step over the NICs when the group spans nodes) and expert-parallel all-to-all (NVLink
inside a node, each GPU's share of the NICs across nodes)."""

from __future__ import annotations

import math

import numpy as np

from pdserve.perfmodel.hardware import GIGA, GPU
from pdserve.perfmodel.overheads import global_constant

# One-shot custom all-reduce (message <= 4 MB) then NCCL ring, 8 GPUs on NVLink (900 GB/s class) [M].
ALLREDUCE_BYTES = np.array([2e3, 1e6, 4e6, 16e6, 64e6])


ALLREDUCE_SECONDS = np.array([6e-6, 17e-6, 34e-6, 111e-6, 322e-6])


# GPUs without NVLink (L20, L40S) all-reduce over PCIe, peer to peer through the switch: a small message's latency
# is a kernel launch and a flag exchange, 8.4 us for 2 KB or less on 8 PCIe GPUs with peer-to-peer enabled
# (nccl-tests all_reduce_perf, github.com/tinygrad/open-gpu-kernel-modules issue 45) [M], not the NVLink figure
# scaled by the link's rate; its bytes move at the bus bandwidth NCCL reaches on PCIe Gen4 x16, 20-30 GB/s in the
# all_reduce_perf tables of github.com/NVIDIA/nccl issues 1453 and 1530 [M]: 0.7 of the 32 GB/s a direction [E].
PCIE_ALLREDUCE_LATENCY_S = 8.4e-6
PCIE_BUS_EFFICIENCY = 0.7


# Extra latency of a hierarchical all-reduce that crosses nodes (NCCL over InfiniBand, small messages): fitted by
# perfmodel/fit.py (global constant internode_allreduce_latency_s); this default is only the fallback [E].
INTERNODE_ALLREDUCE_LATENCY_S = 30e-6


# Expert-parallel all-to-all inside one node (DeepEP) [M]: low-latency mode, 128 tokens top-8 on an H20 node,
# dispatch + combine about 222 us for ~22 MB per rank -> ~110 GB/s plus launch latency; normal mode ~330 GB/s.
# Both measured on 900 GB/s NVLink and scaled by NVLink bandwidth elsewhere (H800: DeepEP reports ~155 GB/s).
A2A_LATENCY_S = 25e-6


A2A_BANDWIDTH_DECODE = 110 * GIGA


A2A_BANDWIDTH_PREFILL = 330 * GIGA


def allreduce_seconds(nbytes: float, gpu: GPU, ranks: int, gpus_per_node: int = 8) -> float:
    """All-reduce of ``nbytes`` over ``ranks`` GPUs: log-log interpolation of the NVLink measurements inside a node
    (latency plus bytes over PCIe where the part has no NVLink); across nodes a hierarchical all-reduce adds the
    inter-node step over each GPU's share of the NICs."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    local = min(ranks, gpus_per_node)
    if gpu.nvlink_domain <= 1:  # no NVLink: a ring over PCIe moves 2 (n - 1) / n of the message through each GPU
        t = PCIE_ALLREDUCE_LATENCY_S + 2 * (local - 1) / local * nbytes / (
            gpu.nvlink_bandwidth / 2 * PCIE_BUS_EFFICIENCY)
    elif nbytes >= ALLREDUCE_BYTES[-1]:
        t = ALLREDUCE_SECONDS[-1] * nbytes / ALLREDUCE_BYTES[-1]
    else:  # np.interp holds the first point below the measured range
        t = math.exp(np.interp(math.log(nbytes), np.log(ALLREDUCE_BYTES), np.log(ALLREDUCE_SECONDS)))
    if gpu.nvlink_domain > 1:  # measured on 900 GB/s NVLink
        t *= max(1.0, 900 * GIGA / gpu.group_bandwidth(local))
    nodes = -(-ranks // gpus_per_node)
    if nodes > 1:
        latency = global_constant("internode_allreduce_latency_s", INTERNODE_ALLREDUCE_LATENCY_S)
        t += latency + 2 * (nodes - 1) / nodes * (nbytes / local) / gpu.nic_bandwidth_per_gpu(gpus_per_node)
    return float(t)


def all_to_all_seconds(local_bytes: float, remote_bytes: float, gpu: GPU, decode: bool,
                       gpus_per_node: int = 8) -> float:
    """Dispatch + combine through the busiest GPU: ``local_bytes`` over NVLink, ``remote_bytes`` over its share of
    the NICs, concurrently."""
    if local_bytes <= 0 and remote_bytes <= 0:
        return 0.0
    local_bw = (A2A_BANDWIDTH_DECODE if decode else A2A_BANDWIDTH_PREFILL) * min(1.0, gpu.nvlink_bandwidth / (900 * GIGA))
    return 2 * A2A_LATENCY_S + max(local_bytes / local_bw, remote_bytes / gpu.nic_bandwidth_per_gpu(gpus_per_node))


def expert_copies(experts_per_token: int, topk_groups: int, nodes: int, decode: bool) -> tuple[float, float]:
    """Copies of one token's hidden state sent inside its node and to other nodes per MoE layer (uniform placement).

    Low-latency (decode) all-to-all sends one copy per expert, k (1 - 1/nodes) of them off the node. Normal (prefill)
    all-to-all sends one copy per destination node over RDMA and fans out over NVLink there: with group-limited
    routing a token reaches topk_groups groups, so (nodes - 1)(1 - (1 - 1/nodes)^topk_groups) other nodes."""
    local = experts_per_token / nodes
    if nodes <= 1:
        return float(experts_per_token), 0.0
    if decode:
        return local, experts_per_token * (1.0 - 1.0 / nodes)
    return local, (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** topk_groups)
