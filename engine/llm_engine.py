"""In-process engine: continuous batching of prefill and decode in one process, no services.

``pdserve generate --in-process``, the engine benchmark and the tests' reference outputs use it. The scheduling mirrors
a vLLM-style loop: each :meth:`LLMEngine.step` either prefills waiting prompts (up to a token budget, long prompts in
chunks) or runs one decode step over every running sequence.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from engine.kv_cache import KVSlab
from engine.params import SamplingParams
from engine.runtime import Runtime
from engine.sequence import Sequence
from engine.stop import StepResult


class LLMEngine:
    def __init__(self, runtime: Runtime, max_num_seqs: int = 64, max_num_batched_tokens: int = 2048) -> None:
        self.runtime = runtime
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.slab = KVSlab(runtime.config, max_slots=max_num_seqs, max_tokens=min(2048, runtime.config.context_length),
                           block_tokens=runtime.block_tokens)

    def add_request(self, prompt_ids: list[int], params: SamplingParams, request_id: str | None = None) -> Sequence:
        seq = self.runtime.new_sequence(prompt_ids, params, request_id)
        self.waiting.append(seq)
        return seq

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def _schedule_prefill(self) -> list[tuple[Sequence, int]]:
        budget = self.max_num_batched_tokens
        chunks: list[tuple[Sequence, int]] = []
        for seq in self.waiting:
            if budget <= 0 or len(self.running) + len(chunks) >= self.max_num_seqs:
                break
            n = min(len(seq.prompt_ids) - seq.kv.length, budget)
            chunks.append((seq, n))
            budget -= n
        return chunks

    def step(self) -> list[tuple[Sequence, StepResult]]:
        """One batched forward: prefill if prompts wait, else decode. Returns the tokens it produced."""
        chunks = self._schedule_prefill()
        if chunks:
            events = []
            for (seq, _), result in zip(chunks, self.runtime.prefill(chunks)):
                if result is None:
                    continue  # prompt not finished yet: stays first in line
                self.waiting.remove(seq)
                events.append((seq, result))
                if not result.finished:
                    self.running.append(seq)
                    if self.slab.can_add(seq.kv.length + 1):
                        self.slab.add(seq.kv)
            return events
        results = self.runtime.decode_step(self.running)
        events = list(zip(self.running, results))
        for seq in self.running:
            if seq.finished and seq.kv.slab is not None:
                self.slab.remove(seq.kv)
        self.running = [seq for seq in self.running if not seq.finished]
        return events

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
