"""The fault matrix at small scale (what ``pdserve bench chaos`` runs larger): each fault under steady load on the tiny model,
every answer checked token for token against the fault-free run, and nothing lost, duplicated or leaked. The ``up_kill_*``
rows kill -9 one process of each role while pdserve up's supervisor runs, and it brings the process back."""

import asyncio

import pytest

from pdserve.bench.faults.chaos import FAULTS, SUPERVISED, format_table, matrix_spec, run_matrix
from pdserve.bench.faults.chaos_load import make_workload
from pdserve.launcher.stack import Stack


@pytest.fixture(scope="module")
def matrix(tiny_model_path, tiny_runtime):
    from pdserve.bench.faults.chaos_load import fault_free

    workload = make_workload(tiny_runtime.config.vocab_size, n=8, max_tokens=16)
    with Stack(matrix_spec(str(tiny_model_path))) as stack:
        asyncio.run(fault_free(stack.router_target, workload))
        rows = run_matrix(stack, workload, list(FAULTS), concurrency=4, before_s=1.0, after_s=2.5)
    print("\n" + format_table(rows))
    return {r.fault: r for r in rows}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_loses_duplicates_and_leaks_nothing(matrix, fault):
    row = matrix[fault]
    assert row.sent > 0 and row.answers["correct"] > 0
    assert (row.answers["lost"], row.answers["duplicated"], row.answers["wrong"]) == (0, 0, 0), row
    assert row.leaked == (0, 0, 0), row  # kvstore leases, decode blocks, router requests in flight
    if fault not in ("router_kill", "up_kill_router", "cancel_storm"):
        assert row.answers["failed_clean"] == 0, row  # a survivor took over: every request completed correctly
    if fault == "cancel_storm":
        assert row.answers["cancelled"] > 0
    if fault in SUPERVISED:  # kill -9 under pdserve up's supervisor: the process was started again, once
        assert row.restarted == 1, row
