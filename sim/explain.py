"""What ``pdserve simulate`` says about how it scheduled: the scheduling profile each role ran with, and
(``--explain``) where the time of a typical request went.

A request's end-to-end latency splits exactly into: the front end (the software's per-request latency before the
scheduler sees it), the queue (until its prompt's steps ran), the steps that computed its prompt, the KV transfer
(disaggregated), the waits between its tokens (steps that ran other prompts while it was decoding, preemption and
recomputation) and the decode steps that made its tokens.
"""

from __future__ import annotations

import statistics

from pdserve.sim.cluster import SimResult

PARTS = (("frontend", "front end (HTTP, tokenization, hops)"), ("queue", "queue before its prompt's steps"),
         ("prefill", "prefill steps of its prompt"), ("transfer", "KV hand-off to decode (handshake, transfer)"),
         ("waiting", "waiting between tokens (other prompts, preemption; <0: held)"),
         ("decode", "decode steps that made its tokens"))


def scheduling_lines(result: SimResult) -> list[str]:
    """One line per role: the software profile and the defaults it resolved to."""
    seen: dict[str, str] = {}
    for inst in result.instances:
        seen.setdefault(inst.role.value, inst.scheduling.describe())
    return [f"scheduling ({role}): {text}" for role, text in seen.items()]


def request_parts(seq) -> dict[str, float]:
    ttft = seq.first_token_s - seq.start_s
    # the hand-off comes before the first token; float rounding leaves -1e-15 for a request never queued
    queue = max(0.0, ttft - seq.frontend_s - seq.prefill_s - seq.transfer_s)
    return {"frontend": seq.frontend_s, "queue": queue, "prefill": seq.prefill_s,
            "transfer": seq.transfer_s, "waiting": seq.stall_s, "decode": seq.decode_s,
            "e2el": seq.finish_s - seq.start_s}


def explain_requests(result: SimResult) -> dict:
    """The mean split over completed requests, and the split of the request with the median end-to-end latency."""
    done = [s for s in result.sequences if s.finish_s is not None and s.first_token_s is not None
            and s.index not in result.failed]
    if not done:
        return {"requests": 0}
    parts = [request_parts(s) for s in done]
    mean = {k: statistics.fmean(p[k] for p in parts) for k in parts[0]}
    median_e2el = statistics.median_low(p["e2el"] for p in parts)
    typical = next(i for i, p in enumerate(parts) if p["e2el"] == median_e2el)
    return {"requests": len(done), "mean": mean, "typical": parts[typical], "typical_index": done[typical].index}


def format_explain(x: dict) -> str:
    if not x.get("requests"):
        return "no request completed: nothing to explain"
    mean, typical = x["mean"], x["typical"]
    lines = [f"{'where the time went (ms)':<58} {'mean':>10} {'share':>6} {'typical':>10}",
             f"{'(typical: the request with the median E2EL, #' + str(x['typical_index']) + ')':<58}"]
    for key, label in PARTS:
        if key == "transfer" and not mean[key]:
            continue
        share = 100 * mean[key] / mean["e2el"] if mean["e2el"] else 0.0
        lines.append(f"{label:<58} {1000 * mean[key]:>10.1f} {share:>5.1f}% {1000 * typical[key]:>10.1f}")
    lines.append(f"{'end-to-end latency':<58} {1000 * mean['e2el']:>10.1f} {100.0:>5.1f}% "
                 f"{1000 * typical['e2el']:>10.1f}")
    return "\n".join(lines)
