"""The timing model against published measurements, plus its physics on known facts."""

import pytest

from perfmodel.hardware import gpu
from perfmodel.memory import memory_fit
from perfmodel.models import DEEPSEEK_R1, MODELS
from perfmodel.parallel import ParallelConfig
from perfmodel.timing import TimingModel, expected_distinct_experts
from perfmodel.validate import INCONSISTENT, TOLERANCE, format_table, validate

RESULTS = validate()


@pytest.mark.parametrize("r", [r for r in RESULTS if r.checked], ids=lambda r: r.row_id)
def test_prediction_within_tolerance(r):
    assert abs(r.error) <= TOLERANCE, format_table([r])


def test_every_single_node_row_is_modeled():
    single = [r for r in RESULTS if not r.note.startswith("multi-node")]
    assert len(single) == 10
    assert all(r.predicted_s is not None for r in single)
    unchecked = {r.row_id for r in single if not r.checked}
    assert unchecked == set(INCONSISTENT), "every exception is named, with its reason"
    assert all(r.note for r in RESULTS if r.predicted_s is None)


def test_deepseek_r1_facts():
    m = DEEPSEEK_R1
    assert round(m.total_params / 1e9) == 671
    assert 36e9 < m.active_params < 38e9
    assert m.kv_bytes_per_token == 70_272
    assert round(m.attention_params / 1e6) == 187 and round(m.expert_params / 1e6) == 44
    assert MODELS["smollm2-135m"].total_params == pytest.approx(134.5e6, rel=0.01)


def test_memory_fit_matches_hardware_notes():
    p = ParallelConfig(8, 8, 8)
    small, large = memory_fit(DEEPSEEK_R1, gpu("H20-96G"), p), memory_fit(DEEPSEEK_R1, gpu("H20-141G"), p)
    assert 80e9 < small.weight_bytes_per_gpu < 90e9
    assert small.kv_bytes_free_per_gpu < 5e9  # "almost no room for KV"
    assert 35e9 < large.kv_bytes_free_per_gpu < 45e9  # "about 40 GB per GPU"
    assert large.max_batch(2048) > 10 * small.max_batch(2048)


def test_timing_responds_to_the_batch():
    tm = TimingModel("deepseek-r1", "H20-141G", ParallelConfig(8, 8, 8))
    one, many = tm.decode_step_time([2048]), tm.decode_step_time([2048] * 64)
    assert many.seconds > one.seconds  # more experts touched, more KV read
    assert many.seconds / 64 < one.seconds / 4  # but batching amortizes the weights
    assert tm.decode_step_time([8192] * 8).parts["attention_core"] > tm.decode_step_time([512] * 8).parts[
        "attention_core"]
    long_prefill = tm.prefill_time([4096])
    assert long_prefill.seconds > tm.prefill_time([128]).seconds
    assert tm.prefill_time([96], [4000]).seconds < long_prefill.seconds / 3  # a cached prefix is not recomputed
    assert expected_distinct_experts(1, 256, 8) == pytest.approx(8)
    assert expected_distinct_experts(10_000, 256, 8) == pytest.approx(256)
    assert tm.kv_transfer_time(1000, "rdma") > tm.kv_transfer_time(1000, "nvlink")
