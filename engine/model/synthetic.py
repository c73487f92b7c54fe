"""The ``synthetic`` model backend: the real tokenizer and stop rules, no numpy compute.

It lets a stack emulate a large cluster's timing at high request rates on a small machine: paired with the modeled
clock and ``--pace realtime``, the services spend their time waiting out modeled step durations instead of
multiplying matrices. Tokens come from a deterministic source: the answer walks through a fixed English text from a
starting point hashed from the prompt, and ends with EOS when a hash of (previous token, position) says so (about
one token in 200), so outputs have a realistic spread of lengths and identical inputs give identical outputs in every
process. The KV cache is tiny (one layer, one head, two values) but real and meaningful: K holds the token id and V
the position in the text, so a decode worker that imports the blocks continues exactly where prefill stopped, and the
answer depends on the token ids alone (``SyntheticModel._pointers``), as a real model's does.
"""

from __future__ import annotations

import hashlib

import numpy as np

from pdserve.engine.gguf_file import ModelConfig, read_metadata
from pdserve.engine.kv.cache import KVSlab, SequenceKV
from pdserve.engine.model.default_model import default_model_path
from pdserve.engine.text.tokenizer import GGUFTokenizer

SYNTHETIC_NAME = "synthetic"
SOURCE_TEXT = (
    "Prefill runs every prompt token through every layer at once and writes the KV cache. Decode then takes one "
    "token at a time through every layer, reads the whole cache, and appends to it. The first phase is bound by "
    "compute, the second by memory bandwidth, which is why large deployments run them on separate machines and hand "
    "the cache over in between. Paris is the capital of France, and the relay race is a fair picture of the idea: "
    "prefill runs the first leg, passes the baton, and decode runs the rest of the way until it reaches the end."
)
MEAN_ANSWER_TOKENS = 200


class SyntheticModel:
    """Implements the LlamaModel interface the runtime uses (config, new_kv, prefill, decode_step)."""

    def __init__(self, tokenizer: GGUFTokenizer, context_length: int = 8192) -> None:
        self.tokenizer = tokenizer
        self.config = ModelConfig(name=SYNTHETIC_NAME, n_layers=1, hidden=2, ffn_hidden=2, n_heads=1, n_kv_heads=1,
                                  head_dim=2, vocab_size=tokenizer.vocab_size, context_length=context_length,
                                  rope_freq_base=10000.0, rms_eps=1e-5, fingerprint="synthetic-v1")
        self.text_list = tokenizer.encode(SOURCE_TEXT)
        self.eos_id = tokenizer.eos_id
        self.kv_dtype = "float32"  # its KV holds token ids and text positions, which 16 bits cannot

    def new_kv(self, capacity: int = 0, block_tokens: int = 16) -> SequenceKV:
        return SequenceKV(self.config, block_tokens=block_tokens, capacity=capacity)

    def _is_eos(self, last: int, position: int) -> bool:
        digest = hashlib.blake2b(f"{last}:{position}".encode(), digest_size=8).digest()
        return self.eos_id is not None and int.from_bytes(digest, "little") % MEAN_ANSWER_TOKENS == 0

    def _pointers(self, kv: SequenceKV, start: int, count: int) -> list[int]:
        """V of positions ``start`` .. ``start + count - 1`` (their ids already in K): the position in the text of the
        token that follows each. A token that is the one the text predicted after the previous position continues the
        text (a generated token fed back); any other restarts it at a point hashed from the last 16 ids and the
        length. So V, and every answer, is a function of the token ids alone: the same however the prompt is chunked,
        whichever prefix came from the kvstore, and when a sequence is recomputed (preemption, resumption). (Telling
        a decode step from a prefill by its shape took a one-token prefill after a cached prefix for a decode step.)"""
        low = max(0, start - 15)
        ids = kv.k[0, 0, low:start + count, 0].astype("<i8")
        raw, tokens = ids.tobytes(), ids.tolist()
        previous = int(kv.v[0, 0, start - 1, 1]) if start > 0 else -1
        out = []
        for p in range(start, start + count):
            if previous >= 0 and tokens[p - low] == self.text_list[previous]:
                pointer = (previous + 1) % len(self.text_list)
            else:
                window = raw[8 * (max(0, p - 15) - low):8 * (p + 1 - low)]
                digest = hashlib.blake2b(window + (p + 1).to_bytes(8, "little"), digest_size=8).digest()
                pointer = int.from_bytes(digest, "little") % len(self.text_list)
            out.append(pointer)
            previous = pointer
        return out

    def forward(self, caches: list[SequenceKV], new_tokens: list[list[int]]) -> np.ndarray:
        logits = np.zeros((len(caches), self.config.vocab_size), dtype=np.float32)
        for row, (kv, tokens) in enumerate(zip(caches, new_tokens)):
            start = kv.length
            if start + len(tokens) > self.config.context_length:
                raise ValueError(f"sequence of {start + len(tokens)} tokens exceeds the context length "
                                 f"{self.config.context_length}")
            kv.reserve(start + len(tokens))
            k = np.repeat(np.asarray(tokens, dtype=np.float32)[:, None, None], 2, axis=2)  # [n, 1, 2]
            kv.write(0, start, k, k)
            kv.length += len(tokens)
            pointers = self._pointers(kv, start, len(tokens))
            kv.v[0, 0, start:start + len(tokens), 1] = pointers  # V = (token id, position in the text)
            choice = self.eos_id if self._is_eos(tokens[-1], kv.length) else self.text_list[pointers[-1]]
            logits[row, choice] = 30.0
        return logits

    def prefill(self, caches: list[SequenceKV], new_tokens: list[list[int]]) -> np.ndarray:
        return self.forward(caches, new_tokens)

    def decode_step(self, caches: list[SequenceKV], tokens: list[int], slab: KVSlab | None = None) -> np.ndarray:
        """``slab`` is accepted for the runtime's interface; the synthetic KV needs no batched attention."""
        return self.forward(caches, [[t] for t in tokens])

    def fork_forward(self, caches: list[SequenceKV], new_tokens: list[list[int]]) -> np.ndarray:
        """The completeness check's forward: flat logits, so the synthetic judge always answers P(yes) = 0.5 (it has
        no opinion); the caches are not touched."""
        return np.zeros((len(caches), self.config.vocab_size), dtype=np.float32)


def load_synthetic(tokenizer_model: str | None = None) -> tuple[SyntheticModel, GGUFTokenizer]:
    """The synthetic backend with the tokenizer of the default model (or of ``tokenizer_model``)."""
    reader, _ = read_metadata(tokenizer_model or default_model_path())
    tokenizer = GGUFTokenizer(reader)
    return SyntheticModel(tokenizer), tokenizer
