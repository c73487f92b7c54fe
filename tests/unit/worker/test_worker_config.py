"""A worker's flags become a WorkerConfig once: what it holds, what it refuses, and the process-info labels it
gives (common/ no longer reads a worker's flags for them)."""

from __future__ import annotations

import pytest

from pdserve.common.metrics import PROCESS_INFO, set_process_info
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.perfmodel.deployment import deployment_from_args
from pdserve.worker.config import WorkerConfig
from pdserve.worker.flags import build_worker, worker_parser


def config(*flags: str, role: SchedulerRole = SchedulerRole.DECODE) -> WorkerConfig:
    return WorkerConfig.from_args(worker_parser("decode_server", 50071, max_queue=512).parse_args(list(flags)), role)


def test_the_flags_are_read_once_into_the_config():
    c = config("--kvstore", "127.0.0.1:1,127.0.0.1:2", "--kv-shm", "--max-queue", "7", "--pace", "realtime",
               "--time-scale", "4", "--drain-timeout-s", "5", "--max-num-seqs", "3", "--port", "6001")
    assert c.kvstore == ("127.0.0.1:1", "127.0.0.1:2") and c.kv_shm and c.max_queue == 7
    assert (c.pace, c.time_scale, c.drain_timeout_s, c.port) == ("realtime", 4.0, 5.0, 6001)
    assert c.scheduler_role is SchedulerRole.DECODE
    assert c.scheduler.max_num_seqs == 3 and c.scheduling().config.max_num_seqs == 3
    assert c.deployment == deployment_from_args(worker_parser("x", 1, 1).parse_args([]))
    assert config("--kvstore", "").kvstore == ()


@pytest.mark.parametrize("flags, field", [
    (["--time-scale", "0"], "time_scale"),
    (["--deployment", "gpus=1"], "gpus"),
])
def test_a_config_that_cannot_run_is_refused_naming_the_field(flags, field):
    with pytest.raises(ValueError, match=field):
        config(*flags)


def test_process_info_takes_its_labels_from_the_config():
    c = config("--pace", "realtime", "--time-scale", "2", "--deployment", "hardware=H200")
    set_process_info("decode", "m", "fp", c)
    labels = PROCESS_INFO.collect()[0].samples[0].labels
    assert labels["perf_hardware"] == "H200" and labels["pace"] == "realtime" and labels["time_scale"] == "2"
    assert labels["service"] == "decode" and labels["model_fingerprint"] == "fp"
    set_process_info("router", "m", "fp")
    labels = PROCESS_INFO.collect()[0].samples[0].labels
    assert labels["perf_hardware"] == "" and labels["pace"] == "" and labels["service"] == "router"


@pytest.mark.parametrize("content", [b"not a model at all\n", None])
def test_a_model_that_is_not_a_gguf_file_is_refused_naming_model(tmp_path, content):
    """A worker started by hand with a --model that is no GGUF file (or none at all) blames --model, not
    --kv-dtype: the loader's ModelLoadError is a ValueError too."""
    path = tmp_path / "model.safetensors"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SystemExit) as exc:
        build_worker(config("--model", str(path)))
    assert str(exc.value).startswith(f"--model {path}: ") and "--kv-dtype" not in str(exc.value)


def test_a_16_bit_cache_of_the_synthetic_backend_still_names_kv_dtype():
    with pytest.raises(SystemExit, match="^--kv-dtype: "):
        build_worker(config("--model", "synthetic", "--kv-dtype", "float16"))


def test_a_forward_is_512_prompt_tokens_where_its_kv_leaves_and_the_whole_step_where_it_stays():
    """A prefill worker stores each forward's KV while the next computes; a decode (or colocated) worker keeps its
    prompts' KV, so it computes the step in one forward; the flag overrides either."""
    from pdserve.worker.forwards import DEFAULT_COMPUTE_CHUNK_TOKENS, forward_tokens

    def forward(c: WorkerConfig, budget: int) -> int:
        return forward_tokens(c.compute_chunk_tokens, c.scheduler_role, budget)
    assert forward(config(role=SchedulerRole.PREFILL), 2048) == DEFAULT_COMPUTE_CHUNK_TOKENS == 512
    assert forward(config(role=SchedulerRole.DECODE), 2048) == 2048
    assert forward(config(role=SchedulerRole.BOTH), 4096) == 4096
    assert forward(config("--compute-chunk-tokens", "256", role=SchedulerRole.DECODE), 2048) == 256
    assert forward(config("--compute-chunk-tokens", "1024", role=SchedulerRole.PREFILL), 2048) == 1024
    worker = build_worker(config("--model", "synthetic", "--max-num-batched-tokens", "1024"))
    assert worker.compute_chunk_tokens == 1024
    with pytest.raises(ValueError, match="compute-chunk-tokens"):
        config("--compute-chunk-tokens", "0")
