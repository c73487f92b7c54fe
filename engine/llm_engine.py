"""In-process engine: the scheduler in its ``both`` role and the runtime, in one process, no services.

``pdserve generate --in-process``, the engine benchmark and the tests' reference outputs use it.
"""

from __future__ import annotations

from collections.abc import Iterator

from pdserve.engine.params import InvalidParameter, SamplingParams, validate_request
from pdserve.engine.runtime import Runtime
from pdserve.engine.sched.scheduler import Scheduler, SchedulerConfig, SchedulerRole
from pdserve.engine.sequence import Sequence
from pdserve.engine.text.stop import StepResult


class LLMEngine:
    def __init__(self, runtime: Runtime, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                 kv_blocks: int | None = None) -> None:
        self.runtime = runtime
        defaults = SchedulerConfig()
        config = SchedulerConfig(SchedulerRole.BOTH, max_num_seqs or defaults.max_num_seqs,
                                 max_num_batched_tokens or defaults.max_num_batched_tokens, kv_blocks,
                                 runtime.block_tokens)
        self.scheduler = Scheduler(config, runtime.free)

    def add_request(self, prompt_ids: list[int], params: SamplingParams, request_id: str | None = None) -> Sequence:
        c = self.runtime.config
        prompt_ids, params = validate_request(prompt_ids, params, c.vocab_size, c.context_length)
        if params.n != 1:
            raise InvalidParameter("n", "the in-process engine runs one sample per request: add one request per "
                                        "sample with engine.params.sample_params(params, i)")
        seq = self.runtime.new_sequence(prompt_ids, params, request_id)
        self.scheduler.add(seq)
        return seq

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def step(self) -> list[tuple[Sequence, StepResult]]:
        """One scheduled step (prompt chunks, then a decode token for every running sequence); what it produced."""
        step = self.scheduler.schedule()
        output = self.runtime.execute(step)
        return self.scheduler.postprocess(step, output)

    def stream(self) -> Iterator[tuple[Sequence, StepResult]]:
        while self.has_work():
            yield from self.step()

    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]) -> list[Sequence]:
        """Run prompts to completion; returns their sequences in order."""
        per_prompt = params if isinstance(params, list) else [params] * len(prompts)
        seqs = [self.add_request(p, sp) for p, sp in zip(prompts, per_prompt)]
        for _ in self.stream():
            pass
        return seqs
