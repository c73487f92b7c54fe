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


TWO_NODE_DP = "hardware=H200,gpus=16,tp=16,ep=16,dp_attention=1"


def test_paced_stack_and_simulator_price_a_two_node_pd_handoff_alike():
    """A P/D deployment of two-node instances (16 x H200, DP attention, EP16): the KV crosses RDMA (the workers'
    --kv-link auto), and the modeled TTFT, which now ends when the decode side holds the KV, agrees to rounding;
    the hand-off is in it (each request's handshake + transfer, the same figure on both sides)."""
    from pdserve.perfmodel.deployment import parse_deployment

    sim, emu = modeled_clock_run(TWO_NODE_DP, n=6)
    assert emu["failed"] == 0 and emu["completed"] == 6 and sim["completed"] == 6
    for label, s, e, diff in compare(sim, emu):
        assert abs(diff) < 0.002, f"{label}: simulated {s:.4f}, emulated {e:.4f} ({100 * diff:+.2f}%)"
    handoff = parse_deployment(TWO_NODE_DP).handoff()
    assert sim["mean_kv_transfer_ms"] > 1000 * handoff.engine.handshake_s  # RDMA, handshake included
    assert sim["mean_ttft_ms"] > sim["mean_kv_transfer_ms"]


def test_paced_stack_and_simulator_agree_on_vllms_first_token_from_the_decode():
    """vLLM's P/D proxy streams the decode's first token: TTFT ends after the decode's first step, on both sides."""
    sim, emu = modeled_clock_run("hardware=H200,software=vllm", n=4)
    assert emu["failed"] == 0 and emu["completed"] == 4 and sim["completed"] == 4
    for label, s, e, diff in compare(sim, emu):
        assert abs(diff) < 0.002, f"{label}: simulated {s:.4f}, emulated {e:.4f} ({100 * diff:+.2f}%)"
