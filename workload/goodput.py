"""The one goodput definition of ``pdserve bench serve``, ``pdserve simulate`` and ``pdserve plan``.

vLLM's (``vllm bench serve --goodput``): the requests per second that completed within every SLO given, over the
run's duration. Beside it, the SLO attainment: the share of the requests sent (failed ones count as misses) that did.
The planner's question is DistServe's (the highest rate a deployment holds with 90% of its requests within the SLOs);
it answers it with these two figures: a rate is held when its attainment is at least :data:`HOLD_ATTAINMENT`, and the
goodput it reports is this one, measured at that rate.
"""

from __future__ import annotations

from pdserve.workload.record import RequestRecord

NAME = "vLLM's goodput (requests completed within every SLO, per second)"
HOLD_ATTAINMENT = 0.9  # the planner's SLOs are 90th percentiles: a rate holds when 90% of requests meet them


def within(r: RequestRecord, slo: dict[str, float], clock: str) -> bool:
    """Whether a completed request met every SLO (``ttft``, ``tpot``, ``e2el`` in seconds) in ``clock``."""
    if not r.ok:
        return False
    if clock == "wall":
        got = {"ttft": r.ttft_s, "tpot": r.tpot_s, "e2el": r.e2e_s}
    else:
        got = {"ttft": r.modeled("ttft"), "tpot": r.modeled("tpot"), "e2el": r.modeled("e2e")}
    return all(got[k] is not None and got[k] <= limit for k, limit in slo.items())


def goodput(records: list[RequestRecord], slo: dict[str, float], duration_s: float, clock: str = "wall") -> float:
    return sum(within(r, slo, clock) for r in records) / duration_s if duration_s > 0 else 0.0


def attainment(records: list[RequestRecord], slo: dict[str, float], clock: str = "wall") -> float:
    """The share of all requests sent that completed within every SLO."""
    return sum(within(r, slo, clock) for r in records) / len(records) if records else 0.0


def describe(slo: dict[str, float]) -> str:
    limits = ", ".join(f"{k.upper()} <= {1000 * v:g} ms" for k, v in slo.items())
    return f"{NAME}; SLOs: {limits}"
