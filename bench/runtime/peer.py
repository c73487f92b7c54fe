"""llama.cpp beside the engine: one stream decoded on the same GGUF file, in the same process run, round after round.

``pdserve bench engine --peer llama-cpp`` loads llama.cpp through its Python binding (llama-cpp-python, which builds
llama.cpp from source when installed: the ``peer`` extra) with as many threads as the engine uses, fills both caches
to the same context with the same random tokens, and times single-token decode steps of each (the median of
``steps``), alternating engine and peer in every round so that both see the same machine. Where the binding is not
installed, or cannot load the file, the comparison is skipped with the reason.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from pdserve.bench.runtime.engine import decode_step_s
from pdserve.engine.runtime import Runtime

PEER_STEPS = 32  # decode steps timed per context and round (the median is kept)


class LlamaCppPeer:
    """llama.cpp on one GGUF file, decoding one sequence."""

    def __init__(self, path: Path, threads: int, n_ctx: int) -> None:
        from llama_cpp import Llama  # the peer extra

        self.llm = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                         n_batch=512, verbose=False)
        self.version = _version()

    def decode_step_s(self, context: int, steps: int, vocab: int) -> float:
        """Median seconds of one decode step (one token in, its logits out) after a prompt of ``context`` tokens."""
        tokens = np.random.default_rng(0).integers(3, vocab, context + steps).tolist()
        self.llm.reset()
        self.llm.eval(tokens[:context])
        times = []
        for token in tokens[context:]:
            start = time.perf_counter()
            self.llm.eval([token])
            times.append(time.perf_counter() - start)
        return float(np.median(times))


def load_peer(name: str, path: Path, threads: int, n_ctx: int) -> LlamaCppPeer | str:
    """The peer, or the reason it cannot run here."""
    if name != "llama-cpp":
        return f"unknown peer {name!r}"
    try:
        return LlamaCppPeer(path, threads, n_ctx)
    except ImportError:
        return ("llama-cpp-python is not installed (pip install -e '.[peer]' builds llama.cpp from source; it needs "
                "a C/C++ compiler and cmake)")
    except (ValueError, RuntimeError) as exc:  # the binding's errors for a file it cannot load
        return f"llama.cpp could not load {path.name}: {exc}"


def compare_with_peer(runtime: Runtime, name: str, contexts: tuple[int, ...], steps: int, repeats: int) -> dict:
    """Rounds of (engine, peer) single-stream decode step times per context, the engine on its ``auto`` path."""
    path = runtime.model.path
    threads = runtime.model.parallel.threads
    peer = load_peer(name, path, threads, max(contexts) + PEER_STEPS + 16)
    if isinstance(peer, str):
        return {"peer": name, "skipped": peer}
    steps = max(steps, PEER_STEPS)
    rounds = []
    for _ in range(repeats):
        for context in contexts:
            engine_s = decode_step_s(runtime, 1, context, steps)
            peer_s = peer.decode_step_s(context, steps, runtime.config.vocab_size)
            rounds.append({"context": context, "engine_s": engine_s, "peer_s": peer_s})
    return {"peer": name, "version": peer.version, "threads": threads, "file": path.name,
            "kv_dtype": runtime.kv_dtype, "rounds": rounds}


def format_comparison(comparison: dict) -> str:
    if "skipped" in comparison:
        return f"peer {comparison['peer']}: skipped: {comparison['skipped']}"
    lines = [f"side by side, one stream: pdserve (weights auto, kv {comparison['kv_dtype']}) and llama.cpp "
             f"{comparison['version']} on {comparison['file']}, {comparison['threads']} threads each; "
             f"median decode step of {PEER_STEPS} per round",
             f"{'round':>5} {'context':>7} {'pdserve tok/s':>14} {'llama.cpp tok/s':>16} {'pdserve/llama.cpp':>18}"]
    for i, r in enumerate(comparison["rounds"]):
        lines.append(f"{i // len({x['context'] for x in comparison['rounds']}) + 1:>5} {r['context']:>7} "
                     f"{1 / r['engine_s']:>14.1f} {1 / r['peer_s']:>16.1f} {r['peer_s'] / r['engine_s']:>18.2f}")
    for context in sorted({r["context"] for r in comparison["rounds"]}):
        ratios = [r["peer_s"] / r["engine_s"] for r in comparison["rounds"] if r["context"] == context]
        lines.append(f"context {context}: pdserve/llama.cpp median {np.median(ratios):.2f} over {len(ratios)} rounds "
                     f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    return "\n".join(lines)


def _version() -> str:
    import llama_cpp

    return getattr(llama_cpp, "__version__", "?")

