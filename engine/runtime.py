"""The model runtime the services share: a model, its tokenizer, and the two batched phases over Sequences."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np

from engine.default_model import resolve_model_path
from engine.gguf_model import ModelConfig, load_gguf, read_metadata
from engine.kv_cache import DEFAULT_BLOCK_TOKENS
from engine.model import LlamaModel
from engine.params import SamplingParams
from engine.sampling import Sampler
from engine.sequence import Sequence
from engine.stop import StepResult, StopChecker
from engine.synthetic import SYNTHETIC_NAME, load_synthetic
from engine.tokenizer import GGUFTokenizer, IncrementalDetokenizer


def model_metadata(model: str | Path | None = None) -> tuple[GGUFTokenizer, ModelConfig, str]:
    """Tokenizer, hyper-parameters and display name without loading weights (what a router needs)."""
    if str(model) == SYNTHETIC_NAME:
        synthetic, tokenizer = load_synthetic()
        return tokenizer, synthetic.config, SYNTHETIC_NAME
    path = resolve_model_path(model)
    reader, config = read_metadata(path)
    return GGUFTokenizer(reader), config, path.name.removesuffix(".gguf")


class Runtime:
    def __init__(self, model: LlamaModel, tokenizer: GGUFTokenizer, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.block_tokens = block_tokens

    @classmethod
    def load(cls, model: str | Path | None = None, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> "Runtime":
        """A GGUF path, None for the default SmolLM2, or "synthetic" for the compute-free backend."""
        if str(model) == SYNTHETIC_NAME:
            synthetic, tokenizer = load_synthetic()
            return cls(synthetic, tokenizer, block_tokens)
        loaded = load_gguf(resolve_model_path(model))
        return cls(LlamaModel(loaded), GGUFTokenizer(loaded.reader), block_tokens)

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def model_name(self) -> str:
        return self.config.name

    def new_sequence(self, prompt_ids: list[int], params: SamplingParams, request_id: str | None = None) -> Sequence:
        params.validate(self.tokenizer.vocab_size)
        if not prompt_ids:
            raise ValueError("prompt is empty")
        eos = self.tokenizer.eos_ids
        return Sequence(
            request_id=request_id or uuid.uuid4().hex,
            prompt_ids=list(prompt_ids),
            params=params,
            kv=self.model.new_kv(capacity=len(prompt_ids) + 1, block_tokens=self.block_tokens),
            sampler=Sampler(params, self.config.vocab_size, prompt_ids, eos),
            stop=StopChecker(params, eos, len(prompt_ids), self.config.context_length),
            detokenizer=IncrementalDetokenizer(self.tokenizer, prompt_ids),
        )

    def prefill(self, chunks: list[tuple[Sequence, int]]) -> list[StepResult | None]:
        """Run the next ``n`` prompt tokens of each sequence in one batched forward.

        A sequence whose prompt is now fully in its cache gets its first token sampled; the result for it is that
        token's StepResult, and None for sequences with prompt left to process (chunked prefill).
        """
        caches, new_tokens = [], []
        for seq, n in chunks:
            start = seq.kv.length
            if n <= 0 or start + n > len(seq.prompt_ids):
                raise ValueError(f"chunk of {n} tokens does not fit the {len(seq.prompt_ids) - start} prompt tokens left")
            caches.append(seq.kv)
            new_tokens.append(seq.prompt_ids[start:start + n])
        logits = self.model.prefill(caches, new_tokens)
        results: list[StepResult | None] = []
        for i, (seq, _) in enumerate(chunks):
            if seq.kv.length == len(seq.prompt_ids):
                results.append(seq.append_token(seq.sampler.sample(logits[i])))
            else:
                results.append(None)
        return results

    def recompute(self, seqs: list[Sequence]) -> None:
        """Rebuild the KV of preempted sequences: every token but the last sampled one, which decode feeds next."""
        for seq in seqs:
            seq.kv.truncate(0)
        self.model.prefill([s.kv for s in seqs], [s.all_ids[:-1] for s in seqs])

    def decode_step(self, seqs: list[Sequence]) -> list[StepResult]:
        """One token for every running sequence, in one batched forward (results in the order given)."""
        order = sorted(range(len(seqs)), key=lambda i: (seqs[i].kv.slab is None, seqs[i].kv.slot))
        if order != list(range(len(seqs))):  # slab members in slot order let attention read one strided view
            results = self.decode_step([seqs[i] for i in order])
            by_index = dict(zip(order, results))
            return [by_index[i] for i in range(len(seqs))]
        logits = self.model.decode_step([s.kv for s in seqs], [s.last_token for s in seqs])
        return [seq.append_token(token) for seq, token in zip(seqs, self._sample(seqs, logits))]

    @staticmethod
    def _sample(seqs: list[Sequence], logits: np.ndarray) -> list[int]:
        """Next token per row; plain greedy rows come from one batched argmax instead of one call each."""
        greedy = np.argmax(logits, axis=1)
        tokens = []
        for i, seq in enumerate(seqs):
            if seq.sampler.plain_greedy:
                token = int(greedy[i])
                seq.sampler.record(token)
            else:
                token = seq.sampler.sample(logits[i])
            tokens.append(token)
        return tokens
