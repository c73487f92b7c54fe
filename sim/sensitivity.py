"""How much a plan's answer moves with the timing model's known uncertainties (docs/perf-model.md): each
variant rebuilds a deployment's TimingModel with one assumption changed, and the planner re-evaluates candidates
under it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pdserve.perfmodel.deployment import Deployment
from pdserve.perfmodel.timing import TimingModel


def _scaled_overhead(factor: float) -> Callable[[TimingModel], None]:
    def apply(t: TimingModel) -> None:
        t.overheads = replace(t.overheads, kernel_overhead_s=t.overheads.kernel_overhead_s * factor)
    return apply


def _gpu(**changes) -> Callable[[TimingModel], None]:
    def apply(t: TimingModel) -> None:
        t.gpu = replace(t.gpu, **changes)
    return apply


def _balanced(t: TimingModel) -> None:
    t.balanced_routing = True


def _faster_gemms(factor: float) -> Callable[[TimingModel], None]:
    def apply(t: TimingModel) -> None:
        t.gpu = replace(t.gpu, gemm_efficiency=min(1.0, t.gpu.gemm_efficiency * factor))
    return apply


# (name, why it is uncertain, change)
VARIANTS: list[tuple[str, str, Callable[[TimingModel], None]]] = [
    ("per-kernel overhead x0.5", "H20's 10.7 us per kernel (335 us a DeepSeek layer) is fitted on one 2-node EP16 "
     "deployment with MTP", _scaled_overhead(0.5)),
    ("per-kernel overhead x1.5", "the same fit, the other way", _scaled_overhead(1.5)),
    ("HBM 4.0 TB/s", "H20-141G's 4.8 TB/s is an estimate; 4.0 is the 96 GB part's datasheet figure",
     _gpu(hbm_bandwidth=4.0e12)),
    ("GEMMs 31% faster", "the model's H20 TP8 prefill (stock SGLang's FP8 kernels) is 23% below Ant Group's measured "
     "16,500 tok/s per node", _faster_gemms(1.31)),
    ("balanced expert routing", "uniform routing's expected busiest GPU vs a perfect load balancer", _balanced),
]


def variant(d: Deployment, change: Callable[[TimingModel], None]) -> Deployment:
    """A copy of ``d`` whose timing() has ``change`` applied."""
    copy = replace(d, _cache={})
    t = copy.timing()
    change(t)
    return copy
