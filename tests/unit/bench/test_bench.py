"""The load tool: datasets, arrivals, and its statistics against fake servers with known, fixed delays.

The fakes (tests/bench_fakes.py) answer after TTFT_S, then ITL_S between tokens; the measured figures must equal
those delays up to the cost of a loopback round trip: bounded below exactly, above by half the delay again (room for
a loaded 2-core machine; a wrong definition, e.g. TPOT as e2e / tokens = 80 ms instead of 50 ms, still fails).
Modeled figures come from the final chunk and must match exactly.
"""

import asyncio
import json
import math

import numpy as np
import pytest

from pdserve.bench.serve.backends import GrpcBackend, OpenAIBackend
from pdserve.bench.serve.command import with_backend
from pdserve.bench.serve.runner import run
from pdserve.cli.main import main as pdserve
from pdserve.workload import datasets as ds
from pdserve.workload.arrivals import arrival_offsets, modeled_makespan
from pdserve.workload.record import LoadSpec, Sampling
from pdserve.workload.report import format_result, result_json
from pdserve.workload.stats import parse_goodput, summarize
from tests import bench_fakes as fake

SLACK = 0.5  # upper bound: expected x (1 + SLACK) + 10 ms


@pytest.fixture(scope="module")
def fake_router():
    server, target = fake.start_fake_router()
    yield target
    server.stop(0)


@pytest.fixture(scope="module")
def fake_openai():
    server, base_url = fake.start_fake_openai()
    yield base_url
    server.shutdown()


QUICK = {"ttft_s": 0.02, "itl_s": 0.005}  # for tests that check arrivals and reports, not the delays


@pytest.fixture(scope="module")
def quick_router():
    server, target = fake.start_fake_router(**QUICK)
    yield target
    server.stop(0)


@pytest.fixture(scope="module")
def quick_openai():
    server, base_url = fake.start_fake_openai(**QUICK)
    yield base_url
    server.shutdown()


# --- datasets and arrivals ------------------------------------------------------------------------------------------

def test_random_prompts_lengths_and_shared_prefix():
    reqs = ds.random_requests(50, 1000, (40, 60), (5, 9), prefix_fraction=0.5, seed=3)
    assert all(40 <= len(r.token_ids) <= 60 and 5 <= r.output_len <= 9 for r in reqs)
    assert all(ds.FIRST_RANDOM_ID <= t < 1000 for r in reqs for t in r.token_ids)
    shortest = min(len(r.token_ids) for r in reqs)
    prefix = reqs[0].token_ids[:int(shortest * 0.5)]
    assert all(r.token_ids[:len(prefix)] == prefix for r in reqs)
    assert reqs[0].token_ids[int(60 * 0.5) + 1:] != reqs[1].token_ids[int(60 * 0.5) + 1:]
    assert [r.token_ids for r in ds.random_requests(5, 1000, (8, 8), (1, 1), seed=1)] == \
        [r.token_ids for r in ds.random_requests(5, 1000, (8, 8), (1, 1), seed=1)]


def test_builtin_prompts_are_chat_in_english_and_chinese():
    reqs = ds.builtin_requests(32)
    text = " ".join(m["content"] for r in reqs for m in r.messages)
    assert len(reqs) >= 20 and all(r.messages[-1]["role"] == "user" for r in reqs)
    assert "capital of France" in text and "巴黎是法国的" in text


def test_trace_replays_hash_blocks_and_timing(tmp_path):
    path = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 1000, "input_length": 20, "output_length": 4, "hash_ids": [1, 2]},
            {"timestamp": 3000, "input_length": 12, "output_length": 2, "hash_ids": [1]},
            {"timestamp": 3500, "input_length": 30, "output_length": 3, "hash_ids": [9, 2]}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    reqs = ds.trace_requests(path, vocab=1000, block_tokens=8, time_scale=2.0)
    assert [r.arrival_s for r in reqs] == [0.0, 1.0, 1.25]
    assert [len(r.token_ids) for r in reqs] == [20, 12, 30] and [r.output_len for r in reqs] == [4, 2, 3]
    assert reqs[0].token_ids[:8] == reqs[1].token_ids[:8]     # hash id 1 in both
    assert reqs[0].token_ids[8:16] == reqs[2].token_ids[8:16]  # hash id 2 second in both
    assert reqs[0].token_ids[:8] != reqs[2].token_ids[:8]


def test_sharegpt_takes_first_turn_and_reply_length(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "a b c d e f"}]},
        {"conversations": [{"from": "human", "value": "only a question"}]},
    ]))
    reqs = ds.sharegpt_requests(path, None, lambda text: len(text.split()))
    assert len(reqs) == 1 and reqs[0].messages == [{"role": "user", "content": "Hi there"}]
    assert reqs[0].output_len == 6


@pytest.mark.parametrize("content, message", [
    ('{"prompt": "ok"}\nnot json\n', "data.jsonl:2: not JSON"),
    ('{"text": "no prompt field"}\n', "data.jsonl:1: needs a non-empty 'prompt'"),
    ('{"prompt": "x", "output_len": -3}\n', "data.jsonl:1: 'output_len' must be a positive integer"),
])
def test_bad_jsonl_names_line_and_field(tmp_path, content, message):
    path = tmp_path / "data.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        ds.prompt_file_requests(path, 8)


def test_arrivals_poisson_gamma_and_seed():
    offsets = arrival_offsets(4000, rate=8.0, burstiness=1.0, seed=0)
    gaps = np.diff(offsets)
    assert offsets[0] == 0.0 and offsets == arrival_offsets(4000, 8.0, 1.0, seed=0)
    assert abs(gaps.mean() - 1 / 8) < 0.01 and abs(gaps.std() / gaps.mean() - 1.0) < 0.1  # exponential: CV 1
    bursty = np.diff(arrival_offsets(4000, rate=8.0, burstiness=0.25, seed=0))
    assert abs(bursty.std() / bursty.mean() - 2.0) < 0.2  # gamma shape k: CV 1/sqrt(k)
    assert arrival_offsets(3, math.inf) == [0.0, 0.0, 0.0]


def test_modeled_makespan_replays_the_concurrency_cap():
    assert modeled_makespan([0, 0, 0, 0], [1.0] * 4, max_concurrency=1) == 4.0
    assert modeled_makespan([0, 0, 0, 0], [1.0] * 4, max_concurrency=2) == 2.0
    assert modeled_makespan([0, 0, 0, 0], [1.0] * 4, max_concurrency=None) == 1.0
    assert modeled_makespan([0, 10], [1.0, 2.0], max_concurrency=1) == 12.0


def test_goodput_flag_parsing():
    assert parse_goodput(["ttft:500", "e2el:2000"]) == {"ttft": 0.5, "e2el": 2.0}
    with pytest.raises(ValueError, match="'latency' is not one of"):
        parse_goodput(["latency:5"])


# --- statistics against the fakes ----------------------------------------------------------------------------------

def _run(factory, requests, spec):
    return asyncio.run(with_backend(factory, lambda backend, _: run(backend, requests, spec)))


def _check_known_delays(s: dict, n_ok: int) -> None:
    assert s["completed"] == n_ok
    assert s["total_output_tokens"] == n_ok * fake.TOKENS
    assert s["total_input_tokens"] == n_ok * fake.PROMPT_TOKENS
    assert s["cached_prompt_tokens"] == n_ok * fake.CACHED_TOKENS
    assert s["prefix_hit_rate"] == pytest.approx(fake.CACHED_TOKENS / fake.PROMPT_TOKENS)
    ttft, itl = fake.TTFT_S * 1000, fake.ITL_S * 1000
    e2e = ttft + (fake.TOKENS - 1) * itl
    for key, expected in (("median_ttft_ms", ttft), ("median_itl_ms", itl), ("median_tpot_ms", itl),
                          ("median_e2el_ms", e2e), ("mean_ttft_ms", ttft), ("p99_e2el_ms", e2e)):
        assert expected - 1.0 <= s[key] <= expected * (1 + SLACK) + 10.0, (key, s[key], expected)
    # the modeled clock is the final chunk's, exactly
    assert s["modeled_median_ttft_ms"] == pytest.approx(fake.MODELED["ttft_modeled_s"] * 1000)
    assert s["modeled_p99_tpot_ms"] == pytest.approx(fake.MODELED["tpot_modeled_s"] * 1000)
    assert s["modeled_mean_e2el_ms"] == pytest.approx(fake.MODELED["e2e_modeled_s"] * 1000)


def test_grpc_backend_reports_the_fake_routers_delays(fake_router):
    requests = ds.random_requests(4, fake.VOCAB, (10, 10), (fake.TOKENS, fake.TOKENS), seed=0)
    requests += [ds.BenchRequest(output_len=5, prompt="please FAIL")] * 2
    spec = LoadSpec(max_concurrency=2, progress=False)
    result = _run(lambda: GrpcBackend(fake_router), requests, spec)
    # SLOs between the wall TTFT (200 ms) and the modeled TTFT (123 ms): good in one clock only
    s = summarize(result, (50.0, 99.0), parse_goodput(["ttft:150"]))
    _check_known_delays(s, 4)
    assert s["failed"] == 2
    assert s["errors_by_status"] == [{"status": "RESOURCE_EXHAUSTED", "message": "fake queue is full", "count": 2}]
    assert s["request_goodput"] == 0.0
    assert s["modeled_request_goodput"] == pytest.approx(s["modeled_request_throughput"])
    # four requests of 141 modeled ms, two at a time: two rounds
    assert s["modeled_duration"] == pytest.approx(2 * fake.MODELED["e2e_modeled_s"])
    assert s["request_throughput"] == pytest.approx(4 / s["duration"])
    block = format_result(s, percentiles=(50.0, 99.0))
    assert "Mean TTFT (ms):" in block and "RESOURCE_EXHAUSTED: fake queue is full" in block


def test_openai_backend_reports_the_fake_endpoints_delays(fake_openai):
    requests = ([ds.BenchRequest(output_len=5, messages=[{"role": "user", "content": "hi"}])] * 3
                + [ds.BenchRequest(output_len=5, prompt="plain text")] * 2
                + [ds.BenchRequest(output_len=5, token_ids=[101, 102, 103])]
                + [ds.BenchRequest(output_len=5, prompt="FAIL please")])
    spec = LoadSpec(max_concurrency=7, progress=False, sampling=Sampling(ignore_eos=True))  # one round
    result = _run(lambda: OpenAIBackend(fake_openai), requests, spec)
    s = summarize(result, (99.0,), parse_goodput(["ttft:1000", "tpot:1000"]))
    _check_known_delays(s, 6)
    assert s["errors_by_status"] == [{"status": "HTTP 429", "message": "fake rate limit", "count": 1}]
    assert s["request_goodput"] == pytest.approx(s["request_throughput"])
    assert {r.finish_reason for r in result.records if r.ok} == {"length"}
    payload = result_json(s, {"backend": "openai"}, result)
    assert len(payload["requests"]) == 7 and payload["errors"].count("") == 6


def test_rate_and_warmup_are_honoured(quick_router):
    requests = ds.random_requests(4, fake.VOCAB, (10, 10), (5, 5), seed=0)
    spec = LoadSpec(request_rate=40.0, warmup=2, progress=False, seed=1)
    result = _run(lambda: GrpcBackend(quick_router), requests, spec)
    assert len(result.records) == 4  # the warm-up is not counted
    planned = arrival_offsets(4, 40.0, 1.0, seed=1)
    assert [r.scheduled_s for r in result.records] == planned
    assert all(r.start_s >= r.scheduled_s for r in result.records)


def test_duration_mode_sends_until_the_time_is_up(quick_router):
    requests = ds.random_requests(3, fake.VOCAB, (10, 10), (5, 5), seed=0)  # repeated as often as needed
    spec = LoadSpec(request_rate=40.0, duration_s=0.3, progress=False, seed=2)
    result = _run(lambda: GrpcBackend(quick_router), requests, spec)
    expected = [t for t in arrival_offsets(100, 40.0, 1.0, seed=2) if t < 0.3]
    assert [r.scheduled_s for r in result.records] == expected and len(expected) > 3
    assert all(r.ok for r in result.records)
    closed = _run(lambda: GrpcBackend(quick_router), requests, LoadSpec(max_concurrency=2, duration_s=0.25,
                                                                         progress=False))
    # a request lasts 40 ms: two at a time keep sending past the first two, and none starts after the time is up
    assert len(closed.records) > 2 and all(r.start_s < 0.25 for r in closed.records)


def test_cli_end_to_end_against_the_fake_router(quick_router, tmp_path, capsys):
    out = tmp_path / "result.json"
    rc = pdserve(["bench", "serve", "--target", quick_router, "--num-prompts", "4", "--input-len", "8:16", "--output-len", "5",
                  "--max-concurrency", "4", "--goodput", "ttft:1000", "--disable-tqdm", "--save-result", str(out)])
    assert rc == 0
    assert "Serving Benchmark Result" in capsys.readouterr().out
    data = json.loads(out.read_text())
    for key in ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
                "request_goodput", "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
                "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "p90_e2el_ms", "modeled_mean_ttft_ms",
                "modeled_p99_tpot_ms", "modeled_request_goodput", "modeled_output_throughput", "input_lens",
                "output_lens", "ttfts", "itls", "errors", "requests"):
        assert key in data, key
    assert data["completed"] == 4 and len(data["requests"]) == 4 and data["model_id"] == "fake"
    assert all(len(r["itl_s"]) == fake.TOKENS - 1 for r in data["requests"])


def test_cli_against_the_fake_openai_endpoint(quick_openai, tmp_path, capsys):
    out = tmp_path / "http.json"
    assert pdserve(["bench", "serve", "--base-url", quick_openai, "--dataset", "builtin", "--num-prompts", "3",
                    "--output-len", "5", "--disable-tqdm", "--save-result", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["backend"] == "openai" and data["model_id"] == "fake-model" and data["completed"] == 3
    assert data["modeled_mean_ttft_ms"] == pytest.approx(fake.MODELED["ttft_modeled_s"] * 1000)
    capsys.readouterr()
    # random token prompts need the vocabulary, which an OpenAI endpoint does not report
    assert pdserve(["bench", "serve", "--base-url", quick_openai, "--num-prompts", "2", "--disable-tqdm"]) == 2
    assert "--dataset random needs --vocab-size with --base-url" in capsys.readouterr().err
