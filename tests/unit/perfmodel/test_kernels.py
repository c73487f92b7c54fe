"""The per-kernel overhead: kernels counted from each architecture, and charged for every kernel a forward launches."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pdserve.perfmodel.fit import gauss_newton
from pdserve.perfmodel.kernels import kernels_per_forward, kernels_per_layer, layer_kernels
from pdserve.perfmodel.models import model_profile
from pdserve.perfmodel.parallel import ParallelConfig
from pdserve.perfmodel.timing import TimingModel


def test_a_llama_layer_launches_ten_kernels():
    k = layer_kernels(model_profile("llama-3.1-8b"))
    assert (k.attention, k.dense_ffn, k.moe_ffn) == (6, 4, 0)
    assert kernels_per_forward(model_profile("llama-3.1-8b")) == 32 * 10


def test_a_deepseek_moe_layer_launches_about_three_times_a_llama_layer():
    m = model_profile("deepseek-r1")
    k = layer_kernels(m)
    assert k.attention + k.moe_ffn == 32  # MLA's projections, FP8 activation quantization, grouped top-k, shared expert
    assert 3.0 < kernels_per_layer(m) / kernels_per_layer(model_profile("llama-3.1-8b")) < 3.3


def test_what_adds_kernels():
    llama = model_profile("llama-3.1-8b")
    assert layer_kernels(llama.with_weight_precision("fp8")).attention == layer_kernels(llama).attention + 2
    qwen3 = model_profile("qwen3-32b")
    assert qwen3.qk_norm and not llama.qk_norm
    assert layer_kernels(qwen3).attention == layer_kernels(llama).attention + 2
    assert model_profile("glm-4.5").qk_norm
    # sigmoid scores with a correction bias go through vLLM's grouped_topk with or without groups (Kimi-K2 has none)
    deepseek, kimi, glm = model_profile("deepseek-r1"), model_profile("kimi-k2"), model_profile("glm-4.5")
    assert layer_kernels(deepseek).moe_ffn == layer_kernels(kimi).moe_ffn and glm.biased_routing
    qwen = model_profile("qwen3-235b-a22b")
    assert not qwen.biased_routing and layer_kernels(qwen).moe_ffn == 1 + 6 + 1


def test_the_step_overhead_is_kernels_times_the_per_kernel_figure():
    t = TimingModel("qwen3-30b-a3b", "H100", ParallelConfig(gpus=1, tp=1, ep=1), "vllm")
    step = t.decode_step_time([1000] * 4)
    kernels = kernels_per_forward(t.model)
    assert step.parts["overhead"] == pytest.approx(kernels * t.overheads.kernel_overhead_s
                                                   + t.overheads.step_overhead_s)
    assert step.groups["overhead"].factors["kernels"] == kernels
    # the same per-kernel figure: a model launching half the kernels pays half the per-kernel part
    halved = TimingModel(replace(t.model, n_layers=t.model.n_layers // 2), "H100", t.parallel, "vllm")
    assert halved.decode_step_time([1000]).parts["overhead"] - t.overheads.step_overhead_s == pytest.approx(
        (step.parts["overhead"] - t.overheads.step_overhead_s) / 2)


def test_the_fits_finite_differences_are_relative_to_each_constant():
    """A per-kernel constant is microseconds, a per-request one a tenth of a second: each is probed by rel_step of
    itself (an absolute 1e-7 s floor probed 2.8 us by 3.5% and moved a calibration's other constant 2x), and a zero
    constant by rel_step of its typical size."""
    probes: list[np.ndarray] = []

    def residuals(theta: np.ndarray) -> np.ndarray:
        probes.append(theta.copy())
        return np.array([theta[0] / 2.845e-6 - 1.0, theta[1] / 0.139 - 1.0])

    start = np.array([2.845e-6, 0.0])
    theta = gauss_newton(residuals, start, np.array([1e-6, 0.05]), iterations=1, rel_step=0.02)
    assert probes[1][0] / start[0] - 1 == pytest.approx(0.02)
    assert probes[2][1] == pytest.approx(0.05 * 0.02)
    assert theta == pytest.approx([2.845e-6, 0.139])


def test_a_gauss_newton_step_that_overshoots_is_halved():
    """arctan's full Gauss-Newton step from 2 away overshoots further each time (the undamped fit diverges); halving
    each step until the squared residual falls converges on the root."""
    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.arctan(theta - 5.0)

    theta = gauss_newton(residuals, np.array([7.0]), np.array([1.0]), iterations=30, tolerance=1e-9)
    assert theta[0] == pytest.approx(5.0, abs=1e-6)
