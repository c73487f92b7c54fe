"""`bench serve --compare --rounds N`: the figures quoted are medians over rounds, each ratio taken within its round
(a mode that ran fast in a quiet round is not set against in-process from a busy one)."""

from pdserve.bench.serve.compare import cpu_lines, format_rounds


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


def test_cpu_is_set_against_the_in_process_engine_within_each_round():
    def cpu(tok_s: float, **by_process: float) -> dict:
        p = point(tok_s)
        p["summary"].update(cpu_s=sum(by_process.values()), cpu_s_by_process=by_process)
        return p
    rounds = [{"in_process": cpu(100, engine=10.0), "disaggregated": cpu(90, prefill=9.0, kvstore=2.0, decode=1.0)},
              {"in_process": cpu(50, engine=20.0), "disaggregated": cpu(50, prefill=19.0, kvstore=2.0, decode=1.0)},
              {"in_process": cpu(100, engine=10.0), "disaggregated": cpu(95, prefill=9.0, kvstore=1.0, decode=1.0)}]
    # ratios 1.20, 1.10, 1.10 -> 1.10, where the median seconds (12) over in-process's (10) would say 1.20
    line = next(ln for ln in format_rounds(rounds).splitlines() if ln.startswith("disaggregated CPU"))
    assert line == "disaggregated CPU in the run: median 12.00 s = 1.10 x in-process's (1.10-1.20)"
    # one round's lines: by process, the largest first; a stack's decode steps against the tokens they decoded
    rounds[0]["disaggregated"]["summary"].update(decode_steps=20, total_output_tokens=64, completed=32)
    assert cpu_lines(rounds[0]) == [
        "in_process CPU in the run: 10.00 s (engine 10.00)",
        "disaggregated CPU in the run: 12.00 s = 1.20 x in-process's (prefill 9.00 + kvstore 2.00 + decode 1.00); "
        "decode steps 20, 1.6 tokens a step"]
