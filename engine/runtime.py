"""The model runtime every worker shares: a model, its tokenizer, the decode slab, and the batched phases over Sequences.

The scheduler (engine/sched/scheduler.py) decides what runs; the runtime runs it: ``prefill`` computes prompt chunks (and
recomputes preempted sequences), ``decode_step`` one token for every running sequence, ``free`` releases a sequence's
KV memory. It assumes valid parameters: requests are validated where they enter (router, workers, LLMEngine).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np

from pdserve.engine.gguf_file import ModelConfig, read_metadata
from pdserve.engine.kv.blocks import DEFAULT_BLOCK_TOKENS
from pdserve.engine.kv.cache import KVSlab
from pdserve.engine.kv.dtype import DEFAULT_KV_DTYPE, kv_numpy_dtype
from pdserve.engine.model.default_model import resolve_model_path
from pdserve.engine.model.gguf_model import load_gguf
from pdserve.engine.model.llama import LlamaModel
from pdserve.engine.model.synthetic import SYNTHETIC_NAME, load_synthetic
from pdserve.engine.params import SamplingParams, sample_params
from pdserve.engine.sched.scheduler import Step, StepOutput
from pdserve.engine.sequence import Sequence
from pdserve.engine.text.completion import CompletenessJudge, CompletionState
from pdserve.engine.text.logprobs import token_logprobs
from pdserve.engine.text.sampling import Sampler
from pdserve.engine.text.stop import StepResult, StopChecker
from pdserve.engine.text.structured import Grammars
from pdserve.engine.text.tokenizer import GGUFTokenizer, IncrementalDetokenizer

DEFAULT_SLAB_SEQS = 64
DEFAULT_SLAB_TOKENS = 2048


def model_metadata(model: str | Path | None = None) -> tuple[GGUFTokenizer, ModelConfig, str]:
    """Tokenizer, hyper-parameters and display name without loading weights (what a router needs)."""
    if str(model) == SYNTHETIC_NAME:
        synthetic, tokenizer = load_synthetic()
        return tokenizer, synthetic.config, SYNTHETIC_NAME
    path = resolve_model_path(model)
    reader, config = read_metadata(path)
    return GGUFTokenizer(reader), config, default_served_name(model)


def default_served_name(model: str | Path | None = None) -> str:
    """The model id clients send unless the router says otherwise: the GGUF file name without .gguf."""
    if str(model) == SYNTHETIC_NAME:
        return SYNTHETIC_NAME
    return resolve_model_path(model).name.removesuffix(".gguf")


class Runtime:
    def __init__(self, model: LlamaModel, tokenizer: GGUFTokenizer, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                 slab_seqs: int = DEFAULT_SLAB_SEQS, slab_tokens: int = DEFAULT_SLAB_TOKENS) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.block_tokens = block_tokens
        self.slab_seqs = slab_seqs
        self.slab_tokens = min(slab_tokens, model.config.context_length)
        self._slab: KVSlab | None = None
        self._judge: CompletenessJudge | None = None
        self.grammars = Grammars(tokenizer, model.config.vocab_size)

    @classmethod
    def load(cls, model: str | Path | None = None, block_tokens: int = DEFAULT_BLOCK_TOKENS,
             slab_seqs: int = DEFAULT_SLAB_SEQS, slab_tokens: int = DEFAULT_SLAB_TOKENS,
             kv_dtype: str = DEFAULT_KV_DTYPE, weight_path: str = "auto") -> "Runtime":
        """A GGUF path, None for the default SmolLM2, or "synthetic" for the compute-free backend (whose KV holds
        token ids: float32 only). ``kv_dtype``: the KV cache's element type; ``weight_path``: engine/model/llama.py."""
        if str(model) == SYNTHETIC_NAME:
            if kv_dtype != "float32":
                raise ValueError(f"kv dtype {kv_dtype}: the synthetic backend keeps token ids in its KV (float32 only)")
            synthetic, tokenizer = load_synthetic()
            return cls(synthetic, tokenizer, block_tokens, slab_seqs, slab_tokens)
        loaded = load_gguf(resolve_model_path(model), quantized=weight_path != "float32")
        return cls(LlamaModel(loaded, weight_path, kv_dtype), GGUFTokenizer(loaded.reader), block_tokens, slab_seqs,
                   slab_tokens)

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def kv_dtype(self) -> str:
        return self.model.kv_dtype

    @property
    def model_name(self) -> str:
        return self.config.name

    @property
    def slab(self) -> KVSlab:
        """The running decode batch's shared KV storage, made on first use (a prefill worker never needs it)."""
        if self._slab is None:
            self._slab = KVSlab(self.config, self.slab_seqs, self.slab_tokens, self.block_tokens, self.kv_dtype)
        return self._slab

    def use_kv_dtype(self, kv_dtype: str) -> None:
        """Make new caches of ``kv_dtype`` from now on (the decode slab is dropped and made again on first use); for
        benchmarks that compare dtypes in one process, between runs, with no sequence alive."""
        kv_numpy_dtype(kv_dtype)
        self.model.kv_dtype = kv_dtype
        self._slab = None

    @property
    def judge(self) -> CompletenessJudge:
        """The completeness check (stop_when_complete), made on first use."""
        if self._judge is None:
            self._judge = CompletenessJudge(self.model, self.tokenizer)
        return self._judge

    def new_sequence(self, prompt_ids: list[int], params: SamplingParams, request_id: str | None = None) -> Sequence:
        """A sequence; with ``params.n`` > 1 it carries n - 1 forks (samples 1..n-1, seeds seed + i) that share its
        prompt KV and take their first token from the same logits (prefill role: the prompt is computed once)."""
        seq = self._sequence(prompt_ids, params if params.n == 1 else sample_params(params, 0), request_id,
                             self.model.new_kv(capacity=len(prompt_ids) + 1, block_tokens=self.block_tokens))
        seq.forks = [self._sequence(prompt_ids, sample_params(params, i), seq.request_id, seq.kv)
                     for i in range(1, params.n)]
        return seq

    def _sequence(self, prompt_ids: list[int], params: SamplingParams, request_id: str | None, kv) -> Sequence:
        eos = self.tokenizer.eos_ids
        return Sequence(
            request_id=request_id or uuid.uuid4().hex,
            prompt_ids=list(prompt_ids),
            params=params,
            kv=kv,
            sampler=Sampler(params, self.config.vocab_size, prompt_ids, eos, grammar=self.grammars.constraint(params),
                            bad_words=self.grammars.bad_words(params.bad_words)),
            stop=StopChecker(params, eos, len(prompt_ids), self.config.context_length),
            detokenizer=IncrementalDetokenizer(self.tokenizer, prompt_ids),
            completion=CompletionState(params.stop_when_complete, params.stop_when_complete_interval,
                                       params.min_tokens) if params.stop_when_complete else None,
        )

    def prefill(self, chunks: list[tuple[Sequence, int]]) -> list[StepResult | None]:
        """Run the next ``n`` pending tokens of each sequence (Sequence.num_pending) in one batched forward.

        A sequence whose prompt is now fully in its cache gets its first token sampled, and its result is that
        token's StepResult. The result is None for a sequence with prompt left (chunked prefill) and for a
        recomputed one (its tokens were sampled before preemption; decode feeds the newest next).
        """
        for seq, n in chunks:
            if not 0 < n <= seq.num_pending:
                raise ValueError(f"chunk of {n} tokens does not fit the {seq.num_pending} pending tokens")
        logits = self.model.prefill([seq.kv for seq, _ in chunks], [seq.pending_ids(n) for seq, n in chunks])
        results: list[StepResult | None] = []
        for row, (seq, _) in zip(logits, chunks):
            if seq.output_ids or seq.kv.length < len(seq.prompt_ids):
                results.append(None)
                continue
            for fork in seq.forks:  # the other samples of the prompt: first tokens from the same logits
                fork.first_result = self._take(fork, row, fork.sampler.sample(row))
            results.append(self._take(seq, row, seq.sampler.sample(row)))
        return results

    def decode_step(self, seqs: list[Sequence]) -> list[StepResult]:
        """One token for every running sequence, in one batched forward (results in the order given); then, in one
        more forward, the completeness check of the sequences due one (a result's ``check`` says what it cost)."""
        slab = self.slab
        for seq in seqs:
            slab.place(seq.kv, seq.kv.length + 1)
        logits = self.model.decode_step([s.kv for s in seqs], [s.last_token for s in seqs], slab)
        results = [self._take(seq, row, token) for seq, row, token in zip(seqs, logits, self._sample(seqs, logits))]
        due = [(seq, result) for seq, result in zip(seqs, results) if seq.completion is not None and seq.completion.due]
        if due:
            self.judge.check(due)
        return results

    def execute(self, step: Step) -> StepOutput:
        """Both phases of a scheduled step, prompt chunks first (what the in-process engine runs)."""
        return StepOutput(self.prefill(step.prefills) if step.prefills else [],
                          self.decode_step(step.decodes) if step.decodes else [])

    def free(self, seq: Sequence) -> None:
        """Release the sequence's KV memory (finished, aborted or preempted)."""
        if self._slab is not None:
            self._slab.free(seq.kv)
        else:
            seq.kv.clear()

    @staticmethod
    def _take(seq: Sequence, logits: np.ndarray, token: int) -> StepResult:
        """Record a sampled token; with its log-probabilities when the request asks for them."""
        result = seq.append_token(token)
        if seq.params.logprobs is not None:
            result.logprobs = token_logprobs(logits, token, seq.params.logprobs)
        return result

    @staticmethod
    def _sample(seqs: list[Sequence], logits: np.ndarray) -> list[int]:
        """Next token per row; plain greedy rows come from one batched argmax instead of one call each."""
        greedy = np.argmax(logits, axis=1)
        return [int(greedy[i]) if seq.sampler.plain_greedy else seq.sampler.sample(logits[i])
                for i, seq in enumerate(seqs)]
