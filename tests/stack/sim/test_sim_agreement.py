"""The simulator agrees with the paced emulator (synthetic backend, --pace realtime) on one seeded workload: 1
prefill + 1 decode of DeepSeek-R1 on 8 x H20-141G each (SGLang's scheduling profile), 10 requests of 200-800 prompt
tokens and 16-32 output tokens, one in flight.

Compared in the modeled clock with one request in flight, nothing the emulator computes depends on wall time, so the
figures agree to rounding however loaded the machine is (the old version, two in flight, measured 6.6% on a busy
two-core machine against a 5% limit: which requests shared a step followed wall-clock arrival). Batching is checked
without wall time in tests/unit/sim/test_sim_worker_agreement.py. The emulator's own wall lag is measured, not asserted:
its pacing lag counters are read back."""

from __future__ import annotations

from pdserve.bench.runtime.agreement import compare, modeled_clock_run


def test_simulator_agrees_with_the_paced_emulator_in_the_modeled_clock():
    sim, emu = modeled_clock_run()
    assert emu["failed"] == 0 and emu["completed"] == 10 and sim["completed"] == 10
    for label, s, e, diff in compare(sim, emu):
        assert abs(diff) < 0.002, f"{label}: simulated {s:.4f}, emulated {e:.4f} ({100 * diff:+.2f}%)"
    lag = emu["lag"]
    assert lag["prefill0_steps"] >= 10 and lag["decode0_steps"] >= 10 * 15  # every step was paced and counted
    assert {"prefill0_lag_s", "decode0_lag_s", "decode0_lagged_steps"} <= set(lag)
