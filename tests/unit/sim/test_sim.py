"""The cluster simulator: exact timing of a lone request, the real scheduler's chunking and preemption, prefix
caching, colocated instances, the result keys, and refusals."""

from __future__ import annotations

import json
import random

import pytest

from pdserve.cli.main import main as cli_main
from pdserve.engine.sched.flags import SchedulerOverrides
from pdserve.engine.sched.scheduler import Scheduler, SchedulerRole
from pdserve.perfmodel.deployment import Deployment, parse_deployment
from pdserve.sim.cluster import Cluster, ClusterSpec, Pool, SimRequest
from pdserve.sim.report import instance_rows, summary
from pdserve.sim.steptime import StepTimer

D = Deployment()


def pd_spec(n_p: int = 1, n_d: int = 1, **kw) -> ClusterSpec:
    return ClusterSpec([Pool(SchedulerRole.PREFILL, D, n_p), Pool(SchedulerRole.DECODE, D, n_d)], **kw)


def test_affine_decode_law_matches_the_timing_model():
    timer = StepTimer(D.timing())
    rng = random.Random(1)
    for batch in (1, 7, 64):
        contexts = [rng.randint(10, 30_000) for _ in range(batch)]
        assert timer.decode_seconds(contexts) == pytest.approx(D.timing().decode_step_time(contexts).seconds,
                                                               rel=1e-9)


def test_lone_request_times_are_the_modeled_steps():
    t = D.timing()
    prompt, out = 1000, 5
    result = Cluster(pd_spec()).run(
        [SimRequest(list(range(100, 100 + prompt)), out)], [0.0])
    seq = result.sequences[0]
    assert seq.prefill_instance == "p0" and seq.decode_instance == "d0"
    # the front end's fitted latency, then the prompt's one step (SGLang's 8,192-token chunk holds it whole)
    assert seq.frontend_s == t.overheads.request_overhead_s > 0
    prefilled = seq.frontend_s + t.prefill_time([prompt], [0]).seconds
    # then the hand-off (one 8-GPU instance per node: prefill and decode on two nodes, RDMA), after which the decode
    # side (idle) sends the first token
    handoff = D.handoff().seconds(prompt, "rdma")
    assert handoff > t.kv_transfer_time(prompt, "rdma") > 0  # the handshake comes on top of the wire
    assert seq.transfer_s == pytest.approx(handoff)
    assert seq.first_token_s == pytest.approx(prefilled + handoff)
    steps = [t.decode_step_time([prompt + i + 1]).seconds for i in range(out - 1)]
    assert seq.finish_s == pytest.approx(seq.first_token_s + sum(steps))
    assert len(seq.output_ids) == out
    s = summary(result)
    assert s["completed"] == 1 and s["mean_ttft_ms"] == pytest.approx(1000 * seq.first_token_s)
    assert s["modeled_mean_tpot_ms"] == pytest.approx(1000 * sum(steps) / (out - 1))


def test_smaller_instances_share_a_node_and_use_nvlink():
    half = Deployment(model="llama-3-70b", gpus=4, tp=4, ep=1, hardware="H200")
    spec = ClusterSpec([Pool(SchedulerRole.PREFILL, half, 1), Pool(SchedulerRole.DECODE, half, 1)])
    result = Cluster(spec).run([SimRequest(list(range(100, 600)), 3)], [0.0])
    assert result.sequences[0].transfer_s == pytest.approx(half.handoff().seconds(500, "nvlink"))


def test_the_real_scheduler_chunks_prompts_and_preempts():
    cluster = Cluster(ClusterSpec([Pool(SchedulerRole.PREFILL, D, 1, SchedulerOverrides(max_num_batched_tokens=2048)),
                                   Pool(SchedulerRole.DECODE, D, 1)],
                                  kv_blocks=320))  # 5,120 tokens of decode KV: four of these cannot all fit
    assert all(type(i.scheduler) is Scheduler for i in cluster.instances)
    requests = [SimRequest(list(range(100 + i, 1100 + i)), 300) for i in range(4)]
    requests.append(SimRequest(list(range(1000, 6000)), 2))  # 5,000 tokens: three chunks on the prefill instance
    result = cluster.run(requests, [0.0] * 4 + [10.0])
    assert all(len(s.output_ids) == r.output_len for s, r in zip(result.sequences, requests))
    assert cluster.decodes[0].scheduler.num_preemptions > 0
    p0 = instance_rows(result)[0]
    assert p0["prefill_tokens"] == 4 * 1000 + 5000
    assert cluster.prefills[0].stats.steps >= 1 + 3


def test_decode_budget_refuses_what_never_fits():
    result = Cluster(pd_spec(kv_blocks=8)).run([SimRequest(list(range(100, 300)), 10)], [0.0])
    s = summary(result)
    assert s["failed"] == 1 and "KV budget" in s["errors_by_status"][0]["message"]


def test_prefix_cache_reuses_shared_prompt_blocks():
    shared = list(range(100, 1100))
    requests = [SimRequest(shared + [2000 + i] * 50, 4) for i in range(10)]
    offsets = [i * 1.0 for i in range(10)]
    cached = summary(Cluster(pd_spec(frontend=False)).run(requests, offsets))
    cold = summary(Cluster(pd_spec(prefix_cache_tokens=0, frontend=False)).run(requests, offsets))
    assert cached["cached_prompt_tokens"] == 9 * 992  # the 62 full 16-token blocks inside the shared 1,000 tokens
    assert cold["cached_prompt_tokens"] == 0
    assert cached["mean_ttft_ms"] < 0.6 * cold["mean_ttft_ms"]


def test_colocated_and_concurrency_cap():
    spec = ClusterSpec([Pool(SchedulerRole.BOTH, D, 2)])
    requests = [SimRequest(list(range(100, 356)), 8) for _ in range(12)]
    result = Cluster(spec).run(requests, [0.0] * 12, max_concurrency=3)
    s = summary(result, max_concurrency=3)
    assert s["completed"] == 12
    starts = sorted(seq.start_s for seq in result.sequences)
    assert starts[:3] == [0.0] * 3 and starts[3] > 0  # the fourth waits for a slot
    assert {seq.decode_instance for seq in result.sequences} == {"c0", "c1"}


def test_parse_deployment_names_the_field():
    d = parse_deployment("hardware=H200,gpus=16,dp_attention=1")
    assert (d.hardware, d.gpus, d.dp_attention) == ("H200", 16, True)
    with pytest.raises(ValueError, match="deployment: 'bogus=1'"):
        parse_deployment("bogus=1")
    with pytest.raises(ValueError, match="gpus='many'"):
        parse_deployment("gpus=many")


def test_simulate_cli_json_keys_and_plot(tmp_path, capsys):
    out, png = tmp_path / "sim.json", tmp_path / "sim.png"
    rc = cli_main(["simulate", "--num-prompts", "30", "--input-len", "500:1500", "--output-len", "20:40",
                   "--request-rate", "5", "--goodput", "ttft:2000", "tpot:50", "--save-result", str(out),
                   "--plot", str(png)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "Simulation Result" in text and "Mean TTFT (ms):" in text and "d0" in text
    data = json.loads(out.read_text())
    for key in ("duration", "completed", "request_throughput", "request_goodput", "mean_ttft_ms", "p99_tpot_ms",
                "median_itl_ms", "modeled_mean_ttft_ms", "modeled_request_goodput", "input_lens", "instances"):
        assert key in data, key
    assert data["completed"] == 30
    assert {r["name"] for r in data["instances"]} == {"p0", "d0"}
    assert len(data["instances"][1]["series"]["kv_usage"]) == 60
    assert png.stat().st_size > 10_000


def test_simulate_cli_refuses_bad_input(capsys):
    assert cli_main(["simulate", "--deployment", "gpus=3", "--num-prompts", "2"]) == 2
    assert "gpus" in capsys.readouterr().err
    assert cli_main(["simulate", "--prefill", "0", "--num-prompts", "2"]) == 2
    assert "prefill" in capsys.readouterr().err


def test_bench_simulate_reports_speed(capsys):
    assert cli_main(["bench", "sim", "--num-prompts", "300", "--nodes", "3", "--prefill", "1",
                     "--request-rate", "5"]) == 0
    text = capsys.readouterr().out
    assert "simulated 300 requests on 24 GPUs" in text and "requests/s" in text and "300 completed" in text
    assert cli_main(["bench", "sim", "--nodes", "2", "--prefill", "2"]) == 2


def test_idle_instances_report_zeros():
    spec = ClusterSpec([Pool(SchedulerRole.PREFILL, D, 2), Pool(SchedulerRole.DECODE, D, 3)])
    result = Cluster(spec).run([SimRequest(list(range(100, 400)), 3)], [0.0])
    rows = instance_rows(result)
    assert [r["steps"] for r in rows].count(0) == 3  # one prefill and one decode instance worked
    assert all(r["mean_kv_usage"] == 0.0 for r in rows if r["steps"] == 0)
