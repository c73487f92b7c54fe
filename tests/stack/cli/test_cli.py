"""The command line: `pdserve perf --json`, `pdserve up` stopping cleanly, loader errors, reflection and health."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import gguf
import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from pdserve.engine.gguf_file import ModelLoadError
from pdserve.engine.model.gguf_model import load_gguf
from tests import REPO_ROOT
from tests.helpers import pdserve_up, processes_mentioning

ROOT = REPO_ROOT


def pdserve(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pdserve.cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, **kwargs)


def test_perf_json_has_the_documented_keys():
    out = pdserve("perf", "--deployment", "model=deepseek-r1,hardware=H20-141G,gpus=8,tp=8,ep=8",
                  "--prefill-lens", "4096,4096", "--decode-batch", "32", "--context-len", "2048", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["prefill"]["seconds"] > 0 and report["prefill"]["tokens_per_second"] > 0
    assert report["decode"]["step_seconds"] > 0 and report["decode"]["tokens_per_second"] > 0
    assert report["kv_bytes_per_token"] == 70272
    assert report["memory"]["fits"] is True and report["memory"]["max_kv_tokens"] > 0


def test_perf_rejects_unknown_hardware():
    out = pdserve("perf", "--deployment", "hardware=TPU-v9")
    assert out.returncode == 2 and "TPU-v9" in out.stderr


def test_up_serves_then_stops_every_process_on_sigterm(tiny_model_path, tmp_path):
    model = tmp_path / "up-test-model.gguf"  # a unique path to find this stack's processes by
    model.write_bytes(Path(tiny_model_path).read_bytes())
    proc, lines = pdserve_up(["--model", str(model), "--port", "0"], until="try:")
    try:
        router = next(line.split()[1] for line in lines if line.startswith("router"))
        assert len(processes_mentioning(str(model))) == 4  # kvstore, prefill, decode, router
        with grpc.insecure_channel(router) as ch:
            status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
            assert status == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert processes_mentioning(str(model)) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_reflection_lists_the_services(tiny_stack):
    with grpc.insecure_channel(tiny_stack.router_target) as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        [reply] = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
        names = {s.name for s in reply.list_services_response.service}
    assert {"pdserve.v1.Router", "grpc.health.v1.Health"} <= names


def _write_gguf(path: Path, arch: str, tensor_type=None) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(16)
    w.add_embedding_length(32)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_vocab_size(4)
    data = np.zeros((4, 256), dtype=np.float32)
    if tensor_type is None:
        w.add_tensor("token_embd.weight", data)
    else:
        w.add_tensor("token_embd.weight", gguf.quants.quantize(data, tensor_type), raw_dtype=tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_loader_names_an_unsupported_architecture(tmp_path):
    with pytest.raises(ModelLoadError, match="'gpt2' is not supported"):
        load_gguf(_write_gguf(tmp_path / "gpt2.gguf", "gpt2"))


def test_loader_names_an_unsupported_tensor_type(tmp_path):
    path = _write_gguf(tmp_path / "iq.gguf", "llama", gguf.GGMLQuantizationType.TQ1_0)
    with pytest.raises(ModelLoadError, match="TQ1_0"):
        load_gguf(path)


def test_missing_file_is_a_clear_error():
    out = pdserve("generate", "hi", "--in-process", "--model", os.devnull + ".missing.gguf")
    assert out.returncode == 2 and "does not exist" in out.stderr
