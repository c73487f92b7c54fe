"""The P/D hand-off (perfmodel/handoff.py): which NICs carry a request's KV under each layout, the NIC facts and their
overrides, chunk-wise streaming, the engines, and when the simulator lets the first token out."""

from __future__ import annotations

import pytest

from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.perfmodel.deployment import check_deployment, parse_deployment
from pdserve.perfmodel.handoff import ENGINES
from pdserve.perfmodel.nics import NODE_NICS
from pdserve.sim.cluster import Cluster, ClusterSpec, Pool, SimRequest

TP16 = "hardware=H200,gpus=16,tp=16,ep=16"
DP16 = TP16 + ",dp_attention=1"


def test_mla_kv_crosses_one_nic_per_decode_shard_whatever_the_tp_width():
    """MLA's latent KV is whole on every attention-TP rank: each decode shard pulls a full copy over its own NIC, so a
    transfer lasts as long at TP8 as at TP16 and occupies that many NICs; a DP-attention decode takes one, and a
    prefill instance of 16 NICs runs 16 such transfers at once."""
    tp8, tp16, dp16 = (parse_deployment(t).handoff() for t in ("hardware=H200", TP16, DP16))
    assert (tp8.flows, tp16.flows, dp16.flows) == (8, 16, 1)
    assert tp8.wire_seconds(4096) == pytest.approx(tp16.wire_seconds(4096)) == pytest.approx(dp16.wire_seconds(4096))
    assert (tp16.lanes, dp16.lanes) == (1, 16)
    d = parse_deployment(TP16)
    assert dp16.kv_bytes(1000) == pytest.approx(d.timing().kv_bytes(1000))
    assert tp16.kv_bytes(1000) == pytest.approx(16 * d.timing().kv_bytes(1000))


def test_gqa_kv_splits_its_heads_over_the_nics():
    one = parse_deployment("model=llama-3-70b,hardware=H200,gpus=2,tp=2,ep=1").handoff()
    four = parse_deployment("model=llama-3-70b,hardware=H200,gpus=8,tp=8,ep=1").handoff()
    assert four.flows == 8 and one.flows == 2
    # the bulk part shrinks with the flows (latency and per-operation costs stay)
    assert four.wire_seconds(8192) < one.wire_seconds(8192) / 2


def test_nics_per_node_come_from_the_published_table_and_can_be_overridden():
    assert NODE_NICS["H20-96G"].nics == 4 and NODE_NICS["H800"].nics == 8
    assert all(n.source for n in NODE_NICS.values())
    h20 = parse_deployment("hardware=H20-96G")
    assert h20.gpu().nics == 4 and h20.gpu().nic_bandwidth == pytest.approx(45e9)
    slow = parse_deployment(DP16 + ",nic_gbps=200").handoff()
    fast = parse_deployment(DP16).handoff()
    assert slow.flow_bandwidth == pytest.approx(fast.flow_bandwidth / 2)
    assert slow.wire_seconds(100_000) > 1.9 * fast.wire_seconds(100_000) - 1e-3
    efa = parse_deployment(DP16 + ",nics=16,nic_gbps=200")
    assert efa.handoff().lanes == 32  # 16 NICs per node over two nodes
    for bad, field in (("nics=-1", "nics"), ("nic_gbps=-5", "nic_gbps"), ("transfer_engine=rdma", "transfer_engine")):
        with pytest.raises(ValueError, match=field):
            check_deployment(parse_deployment(f"hardware=H200,{bad}"))


def test_each_software_has_its_engine_and_sglang_streams_chunks():
    sgl, vllm = parse_deployment("hardware=H200").handoff(), parse_deployment("hardware=H200,software=vllm").handoff()
    assert (sgl.engine.name, vllm.engine.name) == ("mooncake", "nixl")
    assert parse_deployment("hardware=H200,transfer_engine=nixl").handoff().engine is ENGINES["nixl"]
    # a 20,000-token prompt in 8,192-token chunks: two chunks' KV left while the third was computed
    assert sgl.exposed_tokens(20_000, 8192) == 20_000 - 2 * 8192
    assert vllm.exposed_tokens(20_000, 8192) == 20_000
    assert sgl.seconds(20_000, "rdma", 8192) < sgl.seconds(20_000, "rdma", 0)
    # NIXL reads one descriptor per page per layer; Mooncake merges a request's contiguous pages per layer
    assert vllm.operations(4096) == 61 * 64 and sgl.operations(4096) == 61
    assert sgl.seconds(1024) > sgl.wire_seconds(1024) > 0  # the handshake comes on top


def _two_requests(extra: str = "") -> tuple:
    """A 1,000-token request, then one of 16,000 tokens right behind it: when the first one's KV has landed the
    prefill instance is computing the second one's first chunk."""
    d = parse_deployment(TP16 + extra)
    cluster = Cluster(ClusterSpec([Pool(SchedulerRole.PREFILL, d, 1), Pool(SchedulerRole.DECODE, d, 1)], frontend=False))
    result = cluster.run([SimRequest(list(range(10, 1010)), 4), SimRequest(list(range(20_000, 36_000)), 4)],
                         [0.0, 1e-4])
    return d, cluster, result


def test_sglang_first_token_waits_for_the_prefill_loop_that_sends_the_reply():
    d, cluster, result = _two_requests()
    first = result.sequences[0]
    prefill_done = d.timing().prefill_time([1000]).seconds
    landed = prefill_done + first.transfer_s
    busy = [(start, start + dur) for start, dur, *_ in cluster.prefills[0].stats.trace if start < landed < start + dur]
    assert busy, "the prefill instance should be computing the second prompt when the KV lands"
    assert first.first_token_s == pytest.approx(busy[0][1])
    assert first.first_token_s > landed + 0.01


def test_vllm_first_token_is_the_decode_steps():
    d, cluster, result = _two_requests(",software=vllm")
    first = result.sequences[0]
    landed = d.timing().prefill_time([1000]).seconds + first.transfer_s
    steps = [start + dur for start, dur, *_ in cluster.decodes[0].stats.trace if start >= landed - 1e-12]
    assert first.first_token_s == pytest.approx(steps[0])


def test_validation_replays_a_pd_row_with_per_role_deployments_and_tables_it_apart():
    from pdserve.sim.validate import pools, replay
    from pdserve.sim.validation_report import format_markdown, format_table

    row = {"id": "pd-example", "split": "held-out", "not_modeled": "", "scheduler": "",
           "deployment": f"prefill 1 x {TP16}; decode 2 x {DP16}", "pd_disaggregated": "yes (1P2D)",
           "workload": "input=1000:1000,output=8:8,prompts=6,concurrency=2", "mean_ttft_ms": "300",
           "mean_tpot_ms": "30", "gpus": "48", "notes": ""}
    roles = [(p.role, p.count, p.deployment.dp_attention) for p in pools(row["deployment"], None)]
    assert roles == [(SchedulerRole.PREFILL, 1, False), (SchedulerRole.DECODE, 2, True)]
    r = replay(row)
    assert r.pd and {f.name for f in r.figures} == {"mean TTFT", "mean TPOT"}
    colocated = replay(dict(row, id="colo", deployment=DP16, pd_disaggregated="no"))
    table, md = format_table([colocated, r]), format_markdown([colocated, r])
    assert "P/D held-out rows" in table and "colocated held-out rows" in table
    assert md.index("**colocated, held-out**") < md.index("**P/D, held-out**")
    with pytest.raises(ValueError, match="deployment"):
        pools("prefill one x hardware=H200", None)


def test_a_full_decode_pool_holds_the_transfer_in_the_prealloc_queue():
    """The decode pre-allocates before the KV is sent (SGLang's prealloc queue): with room for two 1,000-token
    requests, the third's KV leaves only once one of the first two finished and gave its blocks back."""
    d = parse_deployment("hardware=H200")
    cluster = Cluster(ClusterSpec([Pool(SchedulerRole.PREFILL, d, 1), Pool(SchedulerRole.DECODE, d, 1)], frontend=False,
                                  kv_blocks=140))  # 2,240 tokens: two prompts of 1,000 (+ their outputs)
    requests = [SimRequest(list(range(100 * i, 100 * i + 1000)), 50) for i in range(1, 4)]
    result = cluster.run(requests, [0.0, 0.0, 0.0])
    assert all(len(s.output_ids) == 50 for s in result.sequences)
    sent = sorted(start for start, _ in cluster.prefills[0].stats.transfers)
    first_done = min(s.finish_s for s in result.sequences)
    assert sent[2] >= first_done - 1e-9 > sent[1]
    assert cluster.transfers.reserved[id(cluster.decodes[0])] == 0 and not cluster.transfers.prealloc[
        id(cluster.decodes[0])]
