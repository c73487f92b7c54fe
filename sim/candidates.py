"""The deployments ``pdserve plan`` searches: per GPU type, the instance shapes that hold the model (GPUs, TP, EP),
with and without DP attention (and its groups), colocated and in every x prefill + y decode layout within the node
limit, each kept only where the software's scheduler can run it in that role."""

from __future__ import annotations

import itertools
from dataclasses import replace

from pdserve.common.scheduling import modeled_scheduling
from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.perfmodel.deployment import Deployment, check_deployment
from pdserve.perfmodel.hardware import gpu as gpu_by_name
from pdserve.sim.planner import Candidate

MAX_DEFAULT_TP = 8  # tensor parallelism beyond one 8-GPU board is rare even inside a 72-GPU NVLink domain


def instance_shapes(base: Deployment, hardware: str, max_nodes: int, gpus_per_node: int = 8,
                    tp_sizes: tuple[int, ...] = ()) -> list[tuple[int, int, int]]:
    """(GPUs, attention TP, EP) of the instances ``base``'s model can run on ``hardware``, smallest first: powers of
    two inside a node (an NVLink domain: 72 GPUs for GB200), then whole nodes up to ``max_nodes``. TP divides the
    attention heads and stays inside a node, at most 8 (``tp_sizes`` overrides it); routed experts spread over all the
    instance's GPUs
    (the largest degree that divides the expert count); a dense model has no expert parallelism."""
    m = base.profile()
    sizes = [2 ** k for k in range(7) if 2 ** k < gpus_per_node] + [n * gpus_per_node for n in range(1, max_nodes + 1)]
    out = []
    for g in sizes:
        tps = [t for t in (tp_sizes or (min(g, gpus_per_node, MAX_DEFAULT_TP),))
               if t <= g and g % t == 0 and m.n_heads % t == 0]
        if m.n_routed_experts:
            ep = max(e for e in range(1, g + 1) if g % e == 0 and m.n_routed_experts % e == 0)
        else:
            ep = 1
        out += [(g, tp, ep) for tp in tps]
    return out


def candidates(hardware: list[str], max_nodes: int, model: str = "deepseek-r1", gpus_per_node: int = 8,
               dp_attention: tuple[bool, ...] = (False, True), tp_sizes: tuple[int, ...] = (8,),
               sizes: int = 2, overrides: SchedulerOverrides | None = None,
               base: Deployment | None = None, group_tp_sizes: tuple[int, ...] = (1,)) -> list[Candidate]:
    """Per GPU type, DP-attention setting and attention TP degree: instances of the ``sizes`` smallest sizes that
    hold the model (:func:`instance_shapes`: EP8 on one node, EP16 on two for an MoE model), each colocated and in
    every x prefill + y decode layout within ``max_nodes``. "Hold" as the scheduler will run it: with the software's
    memory fraction for that layout (SGLang reserves more with DP attention) or the user's. ``base`` carries the
    model (or its config.json), software and precisions; DP attention is tried for MoE models only, its groups
    ``group_tp_sizes`` GPUs each (1: a group per GPU; 2: SGLang's ``--dp-size`` of half the TP size)."""
    base = base or Deployment(model=model)
    moe = bool(base.profile().n_routed_experts)
    out = []
    for hw, dp in itertools.product(hardware, dp_attention if moe else (False,)):
        found, last_size, seen = 0, 0, set()
        gpn = max(gpus_per_node, gpu_by_name(hw).nvlink_domain)  # a GB200 "node" is its 72-GPU NVLink rack
        for gpus, tp, ep in instance_shapes(base, hw, max_nodes, gpn, tp_sizes):
            if found == sizes and gpus != last_size:
                break
            if dp and gpus == 1:
                continue
            for size, groups in _attention_groups(tp, group_tp_sizes) if dp else ((0, 0),):
                if dp and (gpus, size) in seen:
                    continue  # with DP attention the TP degree only splits the dense layers: one of them is enough
                d = replace(base, hardware=hw, gpus=gpus, tp=tp, ep=ep, dp_attention=dp, dp=groups,
                            gpus_per_node=gpn, _cache={})
                fits = {role: _fits(d, role, overrides) for role in SchedulerRole}
                disaggregated = fits[SchedulerRole.PREFILL] and fits[SchedulerRole.DECODE]
                if not (fits[SchedulerRole.BOTH] or disaggregated):
                    continue
                if gpus != last_size:
                    found += 1
                    last_size = gpus
                seen.add((gpus, size))
                out += _layouts(d, fits[SchedulerRole.BOTH], disaggregated, max_nodes, gpn)
    return out


def _attention_groups(tp: int, group_tp_sizes: tuple[int, ...]) -> list[tuple[int, int]]:
    """(GPUs per group, the ``dp`` value that gives it: 0 for a group per GPU) for each of ``group_tp_sizes`` that
    divides ``tp`` into two groups or more."""
    return [(size, 0 if size == 1 else tp // size) for size in group_tp_sizes if size < tp and tp % size == 0]


def _layouts(d: Deployment, colocated: bool, disaggregated: bool, max_nodes: int, gpus_per_node: int
             ) -> list[Candidate]:
    """``d`` colocated (when it fits that role) and as every x prefill + y decode within ``max_nodes``."""
    out = [Candidate(d, 0, 1)] if colocated else []
    nodes = -(-d.gpus // gpus_per_node)
    for x, y in itertools.product(range(1, max_nodes + 1), repeat=2):
        if disaggregated and (x + y) * nodes <= max_nodes:
            out.append(Candidate(d, x, y))
    return out


def _fits(d: Deployment, role: SchedulerRole, overrides: SchedulerOverrides) -> bool:
    """Whether ``d`` runs in ``role``: a software may reserve memory per role (SGLang v0.5.23 keeps prefill graphs
    off a decode instance and decode graphs off a prefill one), so a layout can fit one role and not another."""
    try:
        check_deployment(d)
        modeled_scheduling(d, role, overrides)
    except ValueError:
        return False
    return True
