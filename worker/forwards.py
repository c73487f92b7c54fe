"""How a worker computes a step's prompt tokens on this machine: in forwards of a bounded size, apart from the step
budget that composes the step and prices it in the modeled clock."""

from __future__ import annotations

from pdserve.engine.sched.scheduler import SchedulerRole
from pdserve.engine.sequence import Sequence

# Tokens one prompt forward of a prefill worker computes on this machine. The step budget (--max-num-batched-tokens)
# composes and prices steps as the modeled engine would; a prefill worker computes a step's prompt tokens in forwards
# of at most this many, so that the KV a forward completes is stored while the next computes. 512 rows keep the
# products at full BLAS speed on 2 cores and let four forwards of a 2,048-token step overlap their Puts
# (docs/benchmarks.md measures it).
DEFAULT_COMPUTE_CHUNK_TOKENS = 512


def forward_tokens(flag: int | None, role: SchedulerRole, step_budget: int) -> int:
    """Prompt tokens per forward: ``flag`` (--compute-chunk-tokens) where given, else DEFAULT_COMPUTE_CHUNK_TOKENS on
    a prefill worker, whose KV leaves forward by forward, else the step's budget: a decode (or colocated) worker
    keeps its prompts' KV, so it has no reason to cut a step finer."""
    if flag is not None:
        return flag
    return DEFAULT_COMPUTE_CHUNK_TOKENS if role is SchedulerRole.PREFILL else step_budget


def compute_pieces(chunks: list[tuple[Sequence, int]], budget: int) -> list[list[tuple[Sequence, int]]]:
    """A step's prompt chunks as forwards of at most ``budget`` tokens, in order; a chunk longer than what is left
    of a forward continues in the next (its tokens stay in order: chunked prefill within the step)."""
    pieces: list[list[tuple[Sequence, int]]] = [[]]
    room = budget
    for seq, n in chunks:
        while n:
            if not room:
                pieces.append([])
                room = budget
            take = min(n, room)
            pieces[-1].append((seq, take))
            n, room = n - take, room - take
    return [p for p in pieces if p]
