"""The model and GPU profiles beyond DeepSeek-on-Hopper: each profile's arithmetic against its published facts, the
config.json parser (``--model-config``) and what it refuses, name resolution, precisions per GPU generation, and the
planner's search space per model."""

from __future__ import annotations

import json

import pytest

from pdserve.perfmodel.communication import allreduce_seconds
from pdserve.perfmodel.deployment import Deployment, check_deployment, deployment_text, parse_deployment
from pdserve.perfmodel.hardware import GPUS, gpu
from pdserve.perfmodel.hf_config import load_model_config, profile_from_config
from pdserve.perfmodel.model_configs import PUBLISHED
from pdserve.perfmodel.models import CATALOG, MODELS, model_profile, resolve_model_name
from pdserve.perfmodel.profile import windowed_pairs
from pdserve.sim.candidates import instance_shapes

NEW_MODELS = ("qwen3-235b-a22b", "qwen3-30b-a3b", "qwen3-32b", "kimi-k2", "glm-4.5", "gpt-oss-120b", "gpt-oss-20b",
              "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b")
NEW_GPUS = ("B200", "GB200", "A100-40G", "A100-80G", "L20", "L40S", "H100-PCIe", "H100-NVL", "H200-NVL", "MI300X")


@pytest.mark.parametrize("name", list(CATALOG))
def test_parameter_counts_match_the_published_ones(name):
    """Total parameters within the stated tolerance; active ones within 5% under either convention (with or without
    the input embedding)."""
    m, pub = MODELS[name], CATALOG[name]
    assert m.total_params / 1e9 == pytest.approx(pub.total_b, rel=pub.tolerance), name
    active = [m.active_params / 1e9, (m.active_params + m.embedding_params) / 1e9]
    assert min(abs(a / pub.active_b - 1) for a in active) <= 0.05, (name, active, pub.active_b)
    assert pub.source.startswith("https://")


@pytest.mark.parametrize("name, bf16_bytes", [
    ("qwen3-235b-a22b", 94 * 2 * 4 * 128 * 2),  # layers x (K, V) x KV heads x head_dim x 2 bytes
    ("qwen3-30b-a3b", 48 * 2 * 4 * 128 * 2),
    ("qwen3-32b", 64 * 2 * 8 * 128 * 2),
    ("kimi-k2", 61 * (512 + 64) * 2),  # MLA: latent + shared RoPE key
    ("glm-4.5", 92 * 2 * 8 * 128 * 2),
    ("gpt-oss-120b", 18 * 2 * 8 * 64 * 2),  # only the 18 full-attention layers grow with the context
    ("gpt-oss-20b", 12 * 2 * 8 * 64 * 2),
    ("llama-3.1-8b", 32 * 2 * 8 * 128 * 2),
    ("llama-3.1-70b", 80 * 2 * 8 * 128 * 2),
    ("llama-3.1-405b", 126 * 2 * 8 * 128 * 2),
])
def test_kv_bytes_per_token_follow_from_the_config(name, bf16_bytes):
    m = MODELS[name]
    assert m.kv_bytes_per_token == bf16_bytes
    assert m.with_kv_precision("fp8").kv_bytes_per_token == bf16_bytes / 2


def test_gpt_oss_sliding_window_layers_hold_only_the_window():
    m = MODELS["gpt-oss-120b"]
    assert (m.sliding_window, m.n_sliding_layers, m.n_full_layers, m.attention_sinks) == (128, 18, 18, True)
    per_layer = 2 * 8 * 64 * 2
    assert m.kv_bytes_for(100) == 36 * per_layer * 100
    assert m.kv_bytes_for(10_000) == 18 * per_layer * 10_000 + 18 * per_layer * 128
    # a decode query at position 10,001 attends 10,001 keys in full layers, 128 in sliding ones
    full = 2.0 * 64 * 2 * 64 * (18 * 10_001 + 18 * 128)
    assert m.attention_flops(1, 10_000, absorbed=False) == pytest.approx(full)
    assert windowed_pairs(3, 126, 128) == 127 + 128 + 128
    assert windowed_pairs(200, 0, 128) == 128 * 129 / 2 + 72 * 128


def test_precisions_default_to_the_checkpoint_and_change_on_request():
    oss = MODELS["gpt-oss-120b"]
    assert (oss.weight_precision, oss.expert_precision, oss.checkpoint_precision) == ("bf16", "mxfp4", "mxfp4")
    assert MODELS["kimi-k2"].weight_precision == "fp8" and MODELS["qwen3-235b-a22b"].weight_precision == "bf16"
    # gpt-oss-120b fits one 80 GB GPU as published: MXFP4 experts (0.53 B/param) + BF16 rest, ~65 GB
    one = check_deployment(Deployment(model="gpt-oss-120b", hardware="H100", gpus=1, tp=1, ep=1))
    assert 60e9 < one.weight_bytes_per_gpu < 70e9
    bf16 = Deployment(model="gpt-oss-120b", weight_precision="bf16", hardware="H100", gpus=4, tp=4, ep=4)
    assert bf16.profile().expert_weight_precision == "bf16"
    experts = check_deployment(bf16).weights["routed_experts"] * 4
    assert experts / one.weights["routed_experts"] == pytest.approx(2.0 / (0.5 + 1 / 32))
    fp8 = parse_deployment("model=llama-3.1-70b,weight_precision=fp8,hardware=H100,gpus=2,tp=2,ep=1")
    assert fp8.memory().weights["dense_ffn"] == pytest.approx(
        parse_deployment("model=llama-3.1-70b,hardware=H100,gpus=2,tp=2,ep=1").memory().weights["dense_ffn"] / 2)
    with pytest.raises(ValueError, match="weight_precision: 'fp6' is not one of bf16, fp8, fp4, mxfp4, int4"):
        parse_deployment("model=llama-3.1-8b,weight_precision=fp6").profile()


def test_names_users_guess_and_hugging_face_ids_resolve():
    assert model_profile("Qwen/Qwen3-235B-A22B").name == "qwen3-235b-a22b"
    assert model_profile("Qwen/Qwen3-235B-A22B-FP8").weight_precision == "fp8"
    assert model_profile("meta-llama/Llama-3.1-70B-Instruct").name == "llama-3.1-70b"
    assert model_profile("moonshotai/Kimi-K2-Instruct").n_routed_experts == 384
    assert resolve_model_name("GLM-4.5") == ("glm-4.5", "")
    assert model_profile("deepseek-ai/DeepSeek-R1-0528").name == "deepseek-r1"
    for name in NEW_MODELS:
        assert model_profile(PUBLISHED[name]["hf_id"]) is MODELS[name]
    assert gpu("h20-3e").name == "H20-141G" and gpu("a100").name == "A100-80G" and gpu("gb200-nvl72").name == "GB200"


def test_unknown_model_and_gpu_are_refused_with_the_known_ones():
    with pytest.raises(ValueError) as e:
        model_profile("qwen4-1t")
    assert "model: unknown profile 'qwen4-1t'" in str(e.value)
    assert all(n in str(e.value) for n in NEW_MODELS) and "--model-config" in str(e.value)
    with pytest.raises(ValueError) as e:
        gpu("H300")
    assert "hardware: unknown GPU 'H300'" in str(e.value) and all(g in str(e.value) for g in NEW_GPUS)


def test_gpu_generations_run_what_they_have_and_the_rest_weight_only():
    b200, h100, a100, l40s = gpu("B200"), gpu("H100"), gpu("A100-80G"), gpu("L40S")
    assert [b200.tensor_precision(p) for p in ("fp4", "mxfp4", "fp8", "int4")] == ["fp4", "fp8", "fp8", "bf16"]
    assert [h100.tensor_precision(p) for p in ("fp4", "mxfp4", "fp8")] == ["bf16", "bf16", "fp8"]
    assert [a100.tensor_precision(p) for p in ("fp4", "mxfp4", "fp8")] == ["bf16", "bf16", "bf16"]
    assert l40s.tensor_precision("fp8") == "fp8" and l40s.tensor_precision("fp4") == "bf16"
    assert a100.gemm_rate("fp8") == a100.gemm_rate("bf16")  # Ampere has no FP8 tensor cores
    assert b200.gemm_rate("fp4") == pytest.approx(2 * b200.gemm_rate("fp8"))
    # Blackwell applies block scales in the MMA: no promotion loss against BF16, unlike Hopper
    assert b200.fp8_gemm_efficiency() == b200.gemm_efficiency > h100.fp8_gemm_efficiency()
    assert GPUS["GB200"].nvlink_domain == 72 and GPUS["L20"].nvlink_domain == 1
    # CDNA 3: FP8 matrix cores without block scales (Hopper's promotion, fewer FLOP/s per CU to hide it), no FP4
    mi300x = gpu("mi300x")
    assert [mi300x.tensor_precision(p) for p in ("fp4", "mxfp4", "fp8")] == ["bf16", "bf16", "fp8"]
    assert h100.fp8_gemm_efficiency("triton") < mi300x.fp8_gemm_efficiency("triton") < mi300x.gemm_efficiency
    assert mi300x.fp8_gemm_efficiency("deepgemm") == pytest.approx(1273 / 2614.9)  # AMD's measured FP8 ceiling
    # a point-to-point mesh: a TP2 pair has one 128 GB/s link, TP8 all seven; NVSwitch gives any group the full rate
    assert mi300x.group_bandwidth(2) == 128e9 and mi300x.group_bandwidth(8) == mi300x.nvlink_bandwidth == 896e9
    assert h100.group_bandwidth(2) == h100.nvlink_bandwidth
    assert allreduce_seconds(1e6, mi300x, 2) > 5 * allreduce_seconds(1e6, mi300x, 8)
    for name in NEW_GPUS:
        g = gpu(name)
        assert g.bf16_flops > 0 and g.hbm_bytes > 30e9 and g.hbm_bandwidth > 5e11 and g.nvlink_bandwidth > 0


def test_model_config_file_becomes_the_same_profile(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(PUBLISHED["qwen3-235b-a22b"]["config"]))
    from_file = load_model_config(str(tmp_path))
    built_in = MODELS["qwen3-235b-a22b"]
    assert (from_file.total_params, from_file.kv_bytes_per_token, from_file.n_moe_layers) == \
        (built_in.total_params, built_in.kv_bytes_per_token, built_in.n_moe_layers)
    d = parse_deployment(deployment_text(type("A", (), {"deployment": "hardware=H20-96G", "model_config": str(path)})))
    assert d.profile().total_params == built_in.total_params and check_deployment(d).fits


@pytest.mark.parametrize("change, field", [
    ({"architectures": ["MambaForCausalLM"]}, "architectures 'MambaForCausalLM' is not modeled"),
    ({"layer_types": ["linear_attention"] * 94}, "layer_types linear_attention is not modeled"),
    ({"linear_num_value_heads": 32}, "linear_num_value_heads announces linear-attention"),
    ({"decoder_sparse_step": 2}, "decoder_sparse_step other than 1"),
    ({"num_key_value_heads": 5}, "num_key_value_heads 5 does not divide num_attention_heads 64"),
    ({"quantization_config": {"quant_method": "bitsandbytes"}},
     "quantization_config.quant_method 'bitsandbytes' is not modeled"),
    ({"hidden_size": "4096"}, "hidden_size must be a non-negative integer"),
])
def test_what_a_config_cannot_model_is_refused_naming_the_field(change, field):
    cfg = dict(PUBLISHED["qwen3-235b-a22b"]["config"], **change)
    with pytest.raises(ValueError, match="model_config: " + field.replace("(", r"\(")):
        profile_from_config(cfg)


def test_unreadable_model_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match="model_config: cannot read"):
        load_model_config(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="model_config: .* is not JSON"):
        load_model_config(str(tmp_path / "bad.json"))


def test_plan_search_space_follows_the_model():
    qwen = instance_shapes(Deployment(model="qwen3-235b-a22b"), "H20-96G", max_nodes=2)
    assert (8, 8, 8) in qwen and (16, 8, 16) in qwen and all(128 % ep == 0 for _, _, ep in qwen)
    glm = instance_shapes(Deployment(model="glm-4.5"), "H20-96G", max_nodes=4)
    assert (32, 8, 32) in glm and all(160 % ep == 0 and 96 % tp == 0 for _, tp, ep in glm)
    dense = instance_shapes(Deployment(model="llama-3.1-8b"), "A100-80G", max_nodes=1)
    assert dense[0] == (1, 1, 1) and all(ep == 1 for _, _, ep in dense)


@pytest.mark.parametrize("spec", [
    "model=qwen3-235b-a22b,hardware=H20-96G", "model=gpt-oss-120b,hardware=B200,gpus=1,tp=1,ep=1",
    "model=llama-3.1-70b,hardware=A100-80G,gpus=4,tp=4,ep=1", "model=kimi-k2,hardware=H200,gpus=16,tp=8,ep=16",
    "model=glm-4.5,hardware=H20-141G", "model=qwen3-32b,hardware=L20,gpus=2,tp=2,ep=1",
    "model=llama-3.1-405b,hardware=GB200,gpus=8,tp=8,ep=1", "model=qwen3-30b-a3b,hardware=L40S,gpus=2,tp=2,ep=2",
])
def test_every_new_combination_prices_a_step(spec):
    d = parse_deployment(spec)
    check_deployment(d)
    t = d.timing()
    assert 0 < t.decode_step_time([2048] * 8).seconds < t.prefill_time([4096]).seconds


def test_gb200_nvlink_domain_is_one_node_of_72():
    """Without gpus_per_node, a GB200 deployment's 16 GPUs talk over NVLink, not over the NICs of two 8-GPU nodes."""
    d = parse_deployment("model=kimi-k2,hardware=GB200,gpus=16,tp=8,ep=16")
    assert d.gpus_per_node == 72 and d.parallel().nodes == 1
    assert parse_deployment("model=kimi-k2,hardware=GB200,gpus=16,tp=8,ep=16,gpus_per_node=8").parallel().nodes == 2
    assert parse_deployment("hardware=H200").gpus_per_node == 8
    shapes = instance_shapes(Deployment(model="kimi-k2"), "GB200", max_nodes=1, gpus_per_node=72)
    assert (64, 8, 64) in shapes and shapes[-1][0] == 72 and all(tp <= 8 for _, tp, _ in shapes)


def test_coverage_table_counts_held_out_rows_per_model_and_gpu():
    from pdserve.sim.coverage import coverage_markdown, held_out_counts, serving_cells, step_cells

    step, serving = step_cells(), serving_cells(replay=False)
    assert step[("gpt-oss-120b", "A100-80G")].held_out == 1 and step[("gpt-oss-120b", "A100-80G")].priced == 1
    assert serving[("deepseek-r1", "B200")].held_out == 4 and serving[("deepseek-r1", "B200")].priced == 0
    table = coverage_markdown(step, serving)
    row = next(line for line in table.splitlines() if line.startswith("| qwen3-30b-a3b |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    header = [c.strip() for c in table.splitlines()[0].strip("|").split("|")]
    assert cells[header.index("A100-80G")].startswith("3 step ") and cells[header.index("GB200")] == "-"
    per_model, per_gpu = held_out_counts(step, serving)
    assert per_model["qwen3-30b-a3b"] == 7 and per_gpu["B200"] == 6  # 4 DeepSeek-R1 rows, 2 Kimi-K2
    assert per_gpu["L20"] == 2 and cells[header.index("L20")].startswith("2 serving")
    assert per_gpu["MI300X"] == 27 and serving[("deepseek-r1", "MI300X")].held_out == 27
