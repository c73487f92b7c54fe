"""The per-kernel overhead: kernels counted from each architecture, and charged for every kernel a forward launches."""

from __future__ import annotations

from dataclasses import replace

import pytest

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
    grouped, plain = model_profile("deepseek-r1"), model_profile("kimi-k2")  # Kimi-K2: no expert groups
    assert layer_kernels(grouped).moe_ffn == layer_kernels(plain).moe_ffn + 1


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
