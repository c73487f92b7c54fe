"""The simulator agrees with the paced emulator (synthetic backend, --pace realtime) on one seeded workload: 1
prefill + 1 decode of DeepSeek-R1 on 8 x H20-141G each, 16 requests of 200-800 prompt tokens and 16-32 output
tokens, two in flight. The emulator's modeled clock is exact per step; its small excess over the simulator comes from
how it counts a wait that began mid-step (a whole step), so the tolerance is the issue's 5%."""

from __future__ import annotations

import math

from pdserve.bench.agreement import compare, emulated, simulated, workload


def test_simulator_agrees_with_the_paced_emulator():
    requests = workload(16, (200, 800), (16, 32), seed=7)
    sim = simulated(requests, math.inf, 2, seed=7)
    emu = emulated(requests, math.inf, 2, seed=7, time_scale=2.0)
    assert emu["failed"] == 0 and emu["completed"] == 16 and sim["completed"] == 16
    for label, s, e, diff in compare(sim, emu):
        assert abs(diff) < 0.05, f"{label}: simulated {s:.3f}, emulated {e:.3f} ({100 * diff:+.1f}%)"
