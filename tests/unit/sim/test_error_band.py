"""``pdserve plan``'s error bands: the held-out rows closest to a shape, and the stored errors being current."""

from __future__ import annotations

import pytest

from pdserve.perfmodel.deployment import parse_deployment
from pdserve.sim.error_band import band, error_rows, load
from pdserve.sim.validate import replay, rows

TABLE = [
    {"id": "a", "model": "deepseek-r1", "software": "sglang", "hardware": "H200", "pd": False,
     "errors": {"out tok/s": -0.10, "mean TTFT": 0.20, "mean TPOT": 0.05}},
    {"id": "b", "model": "deepseek-r1", "software": "sglang", "hardware": "H200", "pd": False,
     "errors": {"out tok/s": 0.04, "mean TTFT": -0.30, "mean TPOT": -0.02}},
    {"id": "c", "model": "deepseek-r1", "software": "vllm", "hardware": "H200", "pd": False,
     "errors": {"mean TTFT": 0.5}},
    {"id": "d", "model": "gpt-oss-20b", "software": "sglang", "hardware": "H100", "pd": False,
     "errors": {"mean TTFT": -0.93}},
    {"id": "e", "model": "deepseek-r1", "software": "sglang-0.4", "hardware": "MI300X", "pd": False,
     "errors": {"out tok/s": 2.3, "mean TTFT": -0.71, "mean TPOT": -0.70}},
]


def test_band_takes_the_closest_rows_and_says_what_it_dropped():
    exact = band(parse_deployment("hardware=H200"), pd=False, table=TABLE)
    assert exact.rows == ["a", "b"] and not exact.dropped
    assert exact.ranges["TTFT"] == (-0.30, 0.20) and exact.ranges["throughput"] == (-0.10, 0.04)
    assert "2 deepseek-r1, sglang, H200, colocated rows" in exact.describe() and "-30%..+20%" in exact.describe()
    pd = band(parse_deployment("hardware=H200"), pd=True, table=TABLE)
    assert pd.rows == ["a", "b"] and pd.dropped == "P/D" and "no held-out P/D run" in pd.describe()
    other_gpu = band(parse_deployment("hardware=H20-96G,software=vllm"), pd=False, table=TABLE)
    assert other_gpu.rows == ["c"] and other_gpu.dropped == "H20-96G"
    assert band(parse_deployment(""), pd=False, table=[]).describe().startswith("no held-out run")


def test_a_band_without_the_gpu_says_what_the_models_rows_on_that_gpu_say():
    """A current SGLang on MI300X has no row of its own, so the band is the H200's; the MI300X rows of an older release
    (here 70% fast) are printed beside it instead of being hidden by the software match. Another model's rows on the
    GPU are not (GPT-OSS on an H100 says nothing about DeepSeek there); a model with no row for this software is shown
    its own rows on the GPU under another; a P/D plan on a GPU with colocated rows of the same software sees them."""
    amd = band(parse_deployment("hardware=MI300X"), pd=False, table=TABLE)
    assert amd.rows == ["a", "b"] and amd.dropped == "MI300X"
    assert "no held-out MI300X run of this software and kind, so the nearest" in amd.describe()
    assert amd.describe().endswith("; on the MI300X itself, 1 held-out deepseek-r1 rows (sglang-0.4 colocated): "
                                   "throughput +230%..+230%, TTFT -71%..-71%, TPOT -70%..-70%")
    assert not band(parse_deployment("hardware=H200"), pd=False, table=TABLE).on_gpu
    assert not band(parse_deployment("hardware=H100"), pd=False, table=TABLE).on_gpu
    amd_pd = band(parse_deployment("hardware=MI300X,software=sglang-0.4"), pd=True, table=TABLE)
    assert amd_pd.rows == ["e"] and not amd_pd.on_gpu  # the GPU kept: its colocated rows are the band itself
    oss = band(parse_deployment("model=gpt-oss-20b,hardware=H100,software=vllm"), pd=False, table=TABLE)
    assert oss.rows == ["c"] and "on the H100 itself, 1 held-out gpt-oss-20b rows (sglang colocated)" in oss.describe()
    assert "no held-out gpt-oss-20b H100 run" in oss.describe()


def test_a_models_own_rows_come_before_another_models():
    """A DeepSeek shape on an H100 takes DeepSeek's rows on other GPUs, not GPT-OSS's on the H100 (whose TTFT the
    source does not explain); a model with no row of its own falls back to the software's rows and says so."""
    deepseek = band(parse_deployment("hardware=H100"), pd=False, table=TABLE)
    assert deepseek.rows == ["a", "b"] and deepseek.dropped == "H100"
    other = band(parse_deployment("model=qwen3-32b,hardware=H100"), pd=False, table=TABLE)
    assert other.rows == ["d"] and other.dropped == "qwen3-32b" and "no held-out qwen3-32b run" in other.describe()


def test_stored_errors_are_those_of_the_current_model():
    """The file plan reads matches a fresh replay of one held-out row, and names only replayed held-out rows."""
    stored = load()
    assert stored, "sim/data/validation_errors.json is missing: python -m pdserve.sim.error_band"
    table = {r["id"]: r for r in rows()}
    assert all(table[s["id"]]["split"] == "held-out" and not table[s["id"]]["not_modeled"] for s in stored)
    cheapest = min(stored, key=lambda s: int(dict(x.split("=") for x in table[s["id"]]["workload"].split(","))
                                             ["prompts"]))
    fresh = error_rows([replay(table[cheapest["id"]])])[0]
    for name, err in cheapest["errors"].items():
        assert fresh["errors"][name] == pytest.approx(err, abs=1e-3), (cheapest["id"], name)
