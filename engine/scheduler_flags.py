"""The scheduler's limits as command-line flags, declared once: the workers (worker/flags.py) and the simulator
(``pdserve simulate`` and ``plan``) take the same names with the same defaults (:class:`SchedulerConfig`'s)."""

from __future__ import annotations

from pdserve.engine.scheduler import SchedulerConfig

DEFAULTS = SchedulerConfig()


def add_scheduler_args(group) -> None:
    group.add_argument("--max-num-seqs", type=int, default=DEFAULTS.max_num_seqs,
                       help="sequences in one step (the decode batch)")
    group.add_argument("--max-num-batched-tokens", type=int, default=DEFAULTS.max_num_batched_tokens,
                       help="prompt (or recomputed) tokens in one step; longer prompts run in chunks")
