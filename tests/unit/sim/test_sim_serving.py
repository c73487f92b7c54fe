"""The simulator as a serving engine: where a request's time went (``--explain``), data-parallel attention's ranks
stepping together, the profile ``pdserve simulate`` reports, and the serving-run table it is validated against."""

from __future__ import annotations

import pytest

from pdserve.cli.main import main as cli_main
from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.perfmodel.deployment import Deployment
from pdserve.sim.cluster import Cluster, ClusterSpec, Pool, SimRequest
from pdserve.sim.explain import explain_requests, request_parts
from pdserve.sim.validate import FIGURES, KNOWN_MISSES, Figure, Replay, measured, replay, rows, workload
from pdserve.sim.validation_report import format_markdown, format_table

H200 = Deployment(hardware="H200", ep=1)


def test_explain_splits_each_request_exactly_and_sees_decodes_wait_behind_prompts():
    # SGLang runs prompts first, in steps of their own: a request decoding when new prompts arrive waits for them
    requests = [SimRequest(list(range(100, 1100)), 40) for _ in range(4)] + \
               [SimRequest(list(range(2000, 10000)), 5) for _ in range(3)]
    result = Cluster(ClusterSpec([Pool(SchedulerRole.BOTH, H200, 1)])).run(requests, [0.0] * 4 + [0.5] * 3)
    for seq in result.sequences:
        parts = request_parts(seq)
        assert sum(v for k, v in parts.items() if k != "e2el") == pytest.approx(parts["e2el"], abs=1e-9)
        assert min(parts.values()) >= -1e-9
    early = request_parts(result.sequences[0])
    assert early["waiting"] > 0.2  # three 8,000-token prompts ran while it had tokens to make
    x = explain_requests(result)
    assert x["requests"] == 7 and x["mean"]["frontend"] == pytest.approx(H200.timing().overheads.request_overhead_s)
    pools = [Pool(SchedulerRole.PREFILL, H200, 1), Pool(SchedulerRole.DECODE, H200, 1)]
    pd = Cluster(ClusterSpec(pools)).run(requests[:1], [0.0])
    assert request_parts(pd.sequences[0])["transfer"] > 0


def test_data_parallel_ranks_step_together_and_the_slowest_sets_the_step():
    dp = Deployment(hardware="H200", ep=8, dp_attention=True)
    # eight 4,000-token prompts: round robin puts one on each rank, all prefill in the same steps
    many = Cluster(ClusterSpec([Pool(SchedulerRole.BOTH, dp, 1)], frontend=False)).run(
        [SimRequest(list(range(100 + i, 4100 + i)), 2) for i in range(8)], [0.0] * 8)
    one = Cluster(ClusterSpec([Pool(SchedulerRole.BOTH, dp, 1)], frontend=False)).run(
        [SimRequest(list(range(100, 4100)), 2)], [0.0])
    first = [s.first_token_s for s in many.sequences]
    assert max(first) == pytest.approx(min(first))  # the ranks ran in lockstep
    assert max(first) < 2 * one.sequences[0].first_token_s  # in parallel, not one after another
    inst = many.instances[0]
    assert inst.scheduling.ranks == 8 and inst.scheduler.budget.total_blocks == 8 * inst.scheduler.ranks[0].budget.total_blocks


def test_simulate_prints_the_scheduling_profile_and_explains(capsys):
    assert cli_main(["simulate", "--colocated", "1", "--deployment", "hardware=H200,ep=1,software=vllm",
                     "--num-prompts", "20", "--input-len", "1000", "--output-len", "20", "--explain"]) == 0
    text = capsys.readouterr().out
    assert "scheduling (both): vLLM v0.11.0 (V1 engine) (vllm): mixed steps, decodes first" in text
    assert "8192 tokens per step" in text and "max running 1024" in text
    assert "waiting between tokens" in text and "end-to-end latency" in text


def test_every_serving_run_names_its_source_split_and_replay():
    table = rows()
    assert len(table) >= 60 and len({r["id"] for r in table}) == len(table)
    for r in table:
        assert r["split"] in ("calibration", "held-out") and r["source_url"].startswith("https://"), r["id"]
        assert r["source_date"] and r["software_version"], r["id"]
        assert bool(r["not_modeled"]) != bool(r["workload"] and r["deployment"]), r["id"]  # replayed, or says why not
    replayed = [r for r in table if not r["not_modeled"]]
    assert len(replayed) >= 40 and {r["split"] for r in replayed} == {"calibration", "held-out"}
    assert set(KNOWN_MISSES) <= {r["id"] for r in replayed if r["split"] == "held-out"}
    ix = next(r for r in table if r["id"] == "ix-pub-sgl0512-tp8-1k1k-c4")
    assert measured(ix, "output_tok_s") == pytest.approx(49.17 * 8)  # InferenceX publishes per GPU


def test_a_serving_run_replays_figure_by_figure():
    row = next(r for r in rows() if r["id"] == "ix-pub-sgl0512-tp8-1k1k-c4")
    r = replay(row)
    assert {f.name for f in r.figures} == {"out tok/s", "total tok/s", "mean TTFT", "mean TPOT"}
    assert all(f.predicted > 0 for f in r.figures)
    assert "SGLang v0.5.3" in r.setup and "max running 512" in r.setup  # the launch's flags over the profile
    assert {g for _, _, _, _, g in FIGURES} == {0.15, 0.25, None}
    assert "ix-pub-sgl0512-tp8-1k1k-c4" in format_table([r]) and "SGLang v0.5.3 (sglang): 1 rows" in format_markdown([r])
    missed = Replay("ix-pub-sgl0512-tp8-8k1k-c64", "held-out", [Figure("mean TTFT", 2245.58, 1600.0, 0.25)])
    text = format_markdown([missed])
    assert "2,246 (-29%!) | - | - | [1] |" in text and KNOWN_MISSES[missed.row_id] in text  # the miss and its mechanism


def test_a_run_with_published_request_lengths_replays_those_lengths():
    """dstack's result files keep every request's prompt and generated lengths: the replay takes them in order
    (an output of 0 tokens still runs its prompt), and a name without a file is refused, naming the field."""
    requests, offsets, concurrency, rate = workload("lengths=dstack-l405-h100-vllm-sharegpt-qps16,prompts=1000,rate=16")
    assert len(requests) == 1000 and rate == 16 and concurrency is None and offsets[-1] > 30
    assert sum(len(r.prompt_ids) for r in requests) == 215196  # the run's total_input_tokens
    assert [len(r.prompt_ids) for r in requests[:3]] == [13, 25, 27] and min(r.output_len for r in requests) == 1
    for spec in ("lengths=../serving_runs,prompts=5", "lengths=nothing-here", "lengths=dstack-l405-h100-vllm-sharegpt"
                 "-qps16,prompts=10"):
        with pytest.raises(ValueError, match="^workload:"):
            workload(spec)


def test_the_busiest_attention_rank_sets_the_steps_attention():
    tm = Deployment(hardware="H200", ep=8, dp_attention=True).timing()
    big, tiny = ([(4096, 0)], []), ([(16, 0)], [])
    lopsided, even = tm.step_time([big, tiny]), tm.step_time([big, big])
    for group in ("attention_proj", "attention_core"):  # each rank's own work: the step waits for the big chunk's
        assert lopsided.groups[group].seconds == pytest.approx(even.groups[group].seconds), group
    assert lopsided.seconds < even.seconds  # the experts still see fewer tokens
