"""`bench serve --compare --rounds N`: the figures quoted are medians over rounds, each ratio taken within its round
(a mode that ran fast in a quiet round is not set against in-process from a busy one)."""

from pdserve.bench.serve.compare import format_rounds


def point(tok_s: float, store_ms: float | None = None, prefill_ms: float | None = None) -> dict:
    p = {"summary": {"output_throughput": tok_s}}
    if store_ms is not None:
        p["handoff"] = {"mean_kv_store_ms": store_ms, "prefill_compute_per_request_ms": prefill_ms}
    return p


def test_ratios_are_taken_within_each_round_then_their_median():
    rounds = [{"in_process": point(100), "disaggregated": point(90, 5, 100), "llama_server": point(80)},
              {"in_process": point(50), "disaggregated": point(50, 10, 100), "llama_server": point(45)},  # a busy round
              {"in_process": point(100), "disaggregated": point(95, 20, 100)}]  # llama_server skipped here
    lines = {line.split()[0]: line.split() for line in format_rounds(rounds).splitlines()[2:5]}
    # disaggregated: ratios 0.90, 1.00, 0.95 -> 0.95; a median of throughputs (90) over in-process's (100) would say 0.90
    assert lines["disaggregated"][1:] == ["90.0", "50.0-95.0", "0.95", "0.90-1.00"]
    assert lines["llama_server"][1:] == ["62.5", "45.0-80.0", "0.85", "0.80-0.90"]
    assert lines["in_process"][3] == "1.00"
    assert "median 10.0% of prefill compute (5.0-20.0%)" in format_rounds(rounds)
