"""A lightweight sequence the real scheduler (engine/sched/scheduler.py) can drive: the fields it reads, no model state.

The scheduler reads ``num_pending``, ``prompt_ids``, ``output_ids``, ``params.max_tokens``, ``stop.context_length``,
``kv.length``, ``request_id`` and ``finished``; :func:`run_prefill` and :func:`run_decode` do what the runtime does to
them when a step has run (KV grows, a token is appended, the workload's output length ends the request).
"""

from __future__ import annotations

from pdserve.engine.text.stop import FinishReason, StepResult

CONTINUES = StepResult("")  # the scheduler only asks ``result.finished``: two shared results serve every token
FINISHED = StepResult("", FinishReason.LENGTH)
SIM_TOKEN = 0  # the token id appended for every generated token (only the count matters)


class SimKV:
    __slots__ = ("length",)

    def __init__(self) -> None:
        self.length = 0


class SimParams:
    __slots__ = ("max_tokens",)

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens


class SimStop:
    __slots__ = ("context_length",)

    def __init__(self, context_length: int) -> None:
        self.context_length = context_length


class SimSequence:
    """One request: its prompt, how many tokens it will generate, and when things happened (virtual seconds)."""

    __slots__ = ("index", "request_id", "prompt_ids", "output_ids", "params", "stop", "kv", "finish_reason",
                 "block_keys", "scheduled_s", "start_s", "first_token_s", "last_token_s", "finish_s", "itl_s",
                 "cached_tokens", "transfer_s", "preemptions", "prefill_instance", "decode_instance", "frontend_s",
                 "first_step_s", "prefill_s", "decode_s", "stall_s", "first_from_decode")

    def __init__(self, index: int, prompt_ids: list[int], output_len: int, context_length: int,
                 block_keys: list[int], scheduled_s: float) -> None:
        self.index = index
        self.request_id = f"sim-{index}"
        self.prompt_ids = prompt_ids
        self.output_ids: list[int] = []
        self.params = SimParams(output_len)
        self.stop = SimStop(context_length)
        self.kv = SimKV()
        self.finish_reason: FinishReason | None = None
        self.block_keys = block_keys
        self.scheduled_s = scheduled_s
        self.start_s = scheduled_s
        self.first_token_s: float | None = None
        self.last_token_s = 0.0
        self.finish_s: float | None = None
        self.itl_s: list[float] = []
        self.cached_tokens = 0
        self.transfer_s = 0.0
        self.preemptions = 0
        self.prefill_instance = ""
        self.decode_instance = ""
        # where its time went (what ``pdserve simulate --explain`` sums): the front end's latency before the scheduler
        # saw it, the steps that computed its prompt, the steps that decoded its tokens, and the waits between its
        # tokens (steps that ran other prompts, preemption and recomputation, the KV transfer's queue)
        self.frontend_s = 0.0
        self.first_step_s: float | None = None  # start of the first step that included it
        self.prefill_s = 0.0
        self.decode_s = 0.0
        self.stall_s = 0.0
        self.first_from_decode = False  # the client's first token is the decode's first (vLLM's P/D proxy)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def num_pending(self) -> int:
        """As engine.sequence.Sequence: tokens whose KV must be computed before the next decode step."""
        return len(self.prompt_ids) + max(0, len(self.output_ids) - 1) - self.kv.length

    def abort(self, reason: FinishReason = FinishReason.ABORT) -> StepResult:
        self.finish_reason = reason
        return StepResult("", reason)

    def _token(self, now: float) -> StepResult:
        self.output_ids.append(SIM_TOKEN)
        if self.first_token_s is None or self.first_from_decode:
            self.first_token_s = now
            self.first_from_decode = False
        else:
            # a token made before the first one reached the client (SGLang's router holding the decode's stream until
            # the prefill's reply is back) leaves with it, in a burst
            now = max(now, self.last_token_s)
            self.itl_s.append(now - self.last_token_s)
            self.stall_s += self.itl_s[-1]  # the decode step's own share is taken back by the instance
        self.last_token_s = now
        if len(self.output_ids) >= self.params.max_tokens:
            self.finish_reason = FinishReason.LENGTH
            return FINISHED
        return CONTINUES


def run_prefill(chunks, now: float) -> list[StepResult | None]:
    """What Runtime.prefill does: the chunk's tokens enter the KV; a prompt now complete gets its first token
    (None for more prompt to go, and for a recomputed sequence, whose newest token decode feeds next)."""
    out: list[StepResult | None] = []
    for seq, n in chunks:
        seq.kv.length += n
        if seq.output_ids or seq.kv.length < len(seq.prompt_ids):
            out.append(None)
        else:
            out.append(seq._token(now))
    return out


def run_decode(seqs, now: float) -> list[StepResult]:
    """What Runtime.decode_step does: one token per running sequence."""
    out = []
    for seq in seqs:
        seq.kv.length += 1
        out.append(seq._token(now))
    return out


def free_kv(seq: SimSequence) -> None:
    """What Runtime.free does: the sequence's KV is gone (after preemption it is recomputed)."""
    seq.kv.length = 0
