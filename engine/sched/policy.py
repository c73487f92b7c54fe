"""What a scheduling profile decides, as plain data the scheduler reads: how prefill and decode share steps, what
admission reserves, what gives way under memory pressure, and how data-parallel attention ranks get requests."""

from __future__ import annotations

from dataclasses import dataclass

PREEMPTIONS = ("newest", "retract")
DISPATCHES = ("round_robin", "least_loaded")


@dataclass(frozen=True)
class StepPolicy:
    """The behaviour half of a scheduling profile (its limits are SchedulerConfig's other fields).

    - ``mixed``: decodes and prompt chunks share one step and one token budget, running requests first (vLLM V1);
      otherwise a step that can take prompt work is a prefill step and decodes wait for a step without it (SGLang,
      vLLM V0);
    - ``chunked``: a prompt longer than the step's budget runs in chunks (else whole, in a step of its own);
    - ``reserve_decode``: admission keeps room for the running requests' expected growth, ``new_token_ratio`` times
      their remaining tokens (at most ``clip_new_tokens`` each), the ratio decaying per decode step from
      ``new_token_ratio`` to ``new_token_ratio x min_ratio_factor`` over ``ratio_decay_steps`` (SGLang); else
      admission only needs room for what runs now;
    - ``preemption``: ``newest``: when the next tokens do not fit, the most recently admitted running request gives
      way, back to the head of the queue, and nothing new is admitted in that step (vLLM); ``retract``: the requests
      with the fewest generated tokens (then the longest prompts) give way until the rest fit, back to the tail of
      the queue, and the ratio restarts from what the survivors still need (SGLang);
    - ``watermark``: share of the KV blocks admission leaves free (vLLM V0);
    - ``dispatch``: how data-parallel attention's ranks get requests.
    """

    name: str = "pdserve"
    mixed: bool = True
    chunked: bool = True
    reserve_decode: bool = False
    new_token_ratio: float = 0.7
    min_ratio_factor: float = 0.14
    ratio_decay_steps: int = 600
    clip_new_tokens: int = 4096
    retract_steps: int = 20
    preemption: str = "newest"
    watermark: float = 0.0
    dispatch: str = "round_robin"

    def __post_init__(self) -> None:
        if self.preemption not in PREEMPTIONS:
            raise ValueError(f"preemption: {self.preemption!r} is not one of {', '.join(PREEMPTIONS)}")
        if self.dispatch not in DISPATCHES:
            raise ValueError(f"dp_dispatch: {self.dispatch!r} is not one of {', '.join(DISPATCHES)}")
        if not 0.0 < self.new_token_ratio <= 1.0:
            raise ValueError(f"schedule_conservativeness: the initial new-token ratio must be in (0, 1], got "
                             f"{self.new_token_ratio}")
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"watermark: must be in [0, 1), got {self.watermark}")
