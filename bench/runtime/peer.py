"""llama.cpp beside the engine: decode steps on the same GGUF file, in the same process run, round after round.

``pdserve bench engine --peer llama-cpp`` loads llama.cpp through its Python binding (llama-cpp-python, which builds
llama.cpp from source when installed: the ``peer`` extra) with as many threads as the engine uses. For every batch
and context it fills both caches with the same random tokens and times decode steps of each (the median of
``steps``), alternating engine and peer in every round so that both see the same machine. Every batch, one stream
included, goes through llama.cpp's batch API as its ``llama-batched-bench`` and its server run it, with the
context defaults they use (flash attention where llama.cpp chooses it): one context holding ``B`` sequences
(``n_seq_max``), each with its own KV cells (filled once and copied, as the engine's rows fill theirs without a
prefill), and one ``llama_decode`` per step carrying a token of each. Where the binding is not installed, or cannot
load the file, the comparison is skipped with the reason.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from pdserve.bench.runtime.engine import decode_step_s
from pdserve.engine.runtime import Runtime

PEER_STEPS = 32  # decode steps timed per batch, context and round (the median is kept)
FILL_CHUNK = 512  # prompt tokens per llama_decode while the caches fill
KV_PAD = 256  # llama.cpp's KV cells come in multiples of this per sequence


class BatchedDecoder:
    """``batch`` sequences decoding together in one llama.cpp context through its batch API."""

    def __init__(self, model, threads: int, batch: int, n_ctx_per_seq: int) -> None:
        import llama_cpp as lc

        self.lc = lc
        params = lc.llama_context_default_params()
        params.n_ctx = batch * -(-n_ctx_per_seq // KV_PAD) * KV_PAD  # llama.cpp rounds each sequence's share
        params.n_batch = params.n_ubatch = max(FILL_CHUNK, batch)
        params.n_seq_max = batch
        params.n_threads = params.n_threads_batch = threads
        self.ctx = lc.llama_init_from_model(model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not make a context for {batch} sequences of {n_ctx_per_seq} tokens")
        self.tokens = lc.llama_batch_init(max(FILL_CHUNK, batch), 0, 1)

    def close(self) -> None:
        self.lc.llama_batch_free(self.tokens)
        self.lc.llama_free(self.ctx)

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        """One ``llama_decode`` of (token, position, sequence, wants logits) entries."""
        b = self.tokens
        b.n_tokens = len(entries)
        for i, (token, pos, seq, logits) in enumerate(entries):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, logits
            b.seq_id[i][0] = seq
        status = self.lc.llama_decode(self.ctx, b)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")

    def fill(self, prompt: list[int], sequences: int) -> None:
        """Sequence 0 computes ``prompt``; the others get copies of its KV cells (llama.cpp copies them between the
        sequences' streams at the next decode), as the engine's rows fill their caches without a prefill."""
        for start in range(0, len(prompt), FILL_CHUNK):
            piece = prompt[start:start + FILL_CHUNK]
            self._decode([(t, start + i, 0, start + i == len(prompt) - 1) for i, t in enumerate(piece)])
        memory = self.lc.llama_get_memory(self.ctx)
        for seq in range(1, sequences):
            self.lc.llama_memory_seq_cp(memory, 0, seq, -1, -1)

    def step_s(self, tokens: list[int], pos: int) -> float:
        """Wall seconds of one step: a token of every sequence in, the logits of each out."""
        start = time.perf_counter()
        self._decode([(t, pos, seq, True) for seq, t in enumerate(tokens)])
        self.lc.llama_synchronize(self.ctx)
        return time.perf_counter() - start


class LlamaCppPeer:
    """llama.cpp on one GGUF file."""

    def __init__(self, path: Path, threads: int) -> None:
        from llama_cpp import Llama  # the peer extra

        self.threads = threads
        # loads the weights; every measurement makes a context of its own on them
        self.llm = Llama(model_path=str(path), n_ctx=KV_PAD, n_threads=threads, verbose=False)
        self.version = _version()

    def decode_step_s(self, batch: int, context: int, steps: int, vocab: int) -> float:
        """Median seconds of one decode step of ``batch`` sequences after prompts of ``context`` tokens."""
        rng = np.random.default_rng(0)
        decoder = BatchedDecoder(self.llm.model, self.threads, batch, context + steps + 16)
        try:
            decoder.fill(rng.integers(3, vocab, context).tolist(), batch)
            streams = rng.integers(3, vocab, (steps + 1, batch)).tolist()  # each sequence its own next tokens
            decoder.step_s(streams[0], context)  # warm-up, as the engine's (and the copies land)
            return float(np.median([decoder.step_s(streams[i], context + i) for i in range(1, steps + 1)]))
        finally:
            decoder.close()


def load_peer(name: str, path: Path, threads: int) -> LlamaCppPeer | str:
    """The peer, or the reason it cannot run here."""
    if name != "llama-cpp":
        return f"unknown peer {name!r}"
    try:
        return LlamaCppPeer(path, threads)
    except ImportError:
        return ("llama-cpp-python is not installed (pip install -e '.[peer]' builds llama.cpp from source; it needs "
                "a C/C++ compiler and cmake)")
    except (ValueError, RuntimeError) as exc:  # the binding's errors for a file it cannot load
        return f"llama.cpp could not load {path.name}: {exc}"


def compare_with_peer(runtime: Runtime, name: str, contexts: tuple[int, ...], steps: int, repeats: int,
                      batches: tuple[int, ...] = (1,)) -> dict:
    """Rounds of (engine, peer) decode step times per batch and context, the engine on its ``auto`` path."""
    path = runtime.model.path
    threads = runtime.model.parallel.threads
    peer = load_peer(name, path, threads)
    if isinstance(peer, str):
        return {"peer": name, "skipped": peer}
    steps = max(steps, PEER_STEPS)
    rounds = []
    for _ in range(repeats):
        for batch in batches:
            for context in contexts:
                engine_s = decode_step_s(runtime, batch, context, steps)
                peer_s = peer.decode_step_s(batch, context, steps, runtime.config.vocab_size)
                rounds.append({"batch": batch, "context": context, "engine_s": engine_s, "peer_s": peer_s})
    return {"peer": name, "version": peer.version, "threads": threads, "file": path.name,
            "kv_dtype": runtime.kv_dtype, "rounds": rounds}


def format_comparison(comparison: dict) -> str:
    if "skipped" in comparison:
        return f"peer {comparison['peer']}: skipped: {comparison['skipped']}"
    rounds = comparison["rounds"]
    cells = sorted({(r.get("batch", 1), r["context"]) for r in rounds})
    lines = [f"side by side: pdserve (weights auto, kv {comparison['kv_dtype']}) and llama.cpp "
             f"{comparison['version']} on {comparison['file']}, {comparison['threads']} threads each; "
             f"median decode step of {PEER_STEPS} per round",
             f"{'round':>5} {'batch':>5} {'context':>7} {'pdserve tok/s':>14} {'llama.cpp tok/s':>16} "
             f"{'pdserve/llama.cpp':>18}"]
    for i, r in enumerate(rounds):
        batch = r.get("batch", 1)
        lines.append(f"{i // len(cells) + 1:>5} {batch:>5} {r['context']:>7} {batch / r['engine_s']:>14.1f} "
                     f"{batch / r['peer_s']:>16.1f} {r['peer_s'] / r['engine_s']:>18.2f}")
    for batch, context in cells:
        ratios = [r["peer_s"] / r["engine_s"] for r in rounds
                  if r.get("batch", 1) == batch and r["context"] == context]
        lines.append(f"batch {batch}, context {context}: pdserve/llama.cpp median {np.median(ratios):.2f} over "
                     f"{len(ratios)} rounds (min {min(ratios):.2f}, max {max(ratios):.2f})")
    return "\n".join(lines)


def _version() -> str:
    import llama_cpp

    return getattr(llama_cpp, "__version__", "?")
