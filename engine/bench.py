"""Engine benchmark: batched decode and prefill throughput against the bare matmul chain of the same shapes.

The matmul chain runs exactly the weight matrices the forward pass multiplies (fused QKV, output projection, fused
gate/up, down projection per layer, then the output head) on activations of the same shape, and nothing else: it is
the ceiling numpy's BLAS reaches here, so engine / chain says how much attention, norms, RoPE, sampling and Python
cost on top.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from engine.params import SamplingParams
from engine.runtime import Runtime


@dataclass
class BenchRow:
    phase: str
    shape: int  # batch size (decode) or prompt tokens (prefill)
    engine_tokens_per_s: float
    chain_tokens_per_s: float
    context: int = 0  # decode: tokens already in each sequence's KV cache

    @property
    def ratio(self) -> float:
        return self.engine_tokens_per_s / self.chain_tokens_per_s


def matmul_chain(runtime: Runtime, rows: int, head_rows: int = 1) -> float:
    """Seconds for one pass of the model's matmuls over ``rows`` activation rows (the head over ``head_rows``)."""
    w = runtime.model.weights
    c = runtime.config
    x = np.full((rows, c.hidden), 0.01, dtype=np.float32)  # every matmul reads this input: no overflow, same shapes
    attn = np.full((rows, c.n_heads * c.head_dim), 0.01, dtype=np.float32)
    act = np.full((rows, c.ffn_hidden), 0.01, dtype=np.float32)
    start = time.perf_counter()
    for lw in w.layers:
        _ = x @ lw.wqkv
        _ = attn @ lw.wo
        _ = x @ lw.w_gate_up
        _ = act @ lw.w_down
    _ = x[-head_rows:] @ w.output
    return time.perf_counter() - start


def _best_of(fn, repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def bench_decode(runtime: Runtime, batch: int, context: int, steps: int) -> BenchRow:
    rng = np.random.default_rng(0)
    vocab = runtime.config.vocab_size
    params = SamplingParams(max_tokens=steps + 2, temperature=0.0, ignore_eos=True)
    seqs = [runtime.new_sequence(rng.integers(3, vocab, context).tolist(), params) for _ in range(batch)]
    runtime.prefill([(s, context) for s in seqs])
    runtime.decode_step(seqs)  # warm-up; the batch joins the runtime's slab as a decode worker's does
    step_times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        runtime.decode_step(seqs)
        step_times.append(time.perf_counter() - t0)
    for s in seqs:
        runtime.free(s)
    chain_times = [matmul_chain(runtime, batch, head_rows=batch) for _ in range(steps)]
    # the same statistic (median) for both, measured back to back
    engine_tps = batch / float(np.median(step_times))
    chain_tps = batch / float(np.median(chain_times))
    return BenchRow("decode", batch, engine_tps, chain_tps, context)


def bench_prefill(runtime: Runtime, prompt_tokens: int, repeats: int) -> BenchRow:
    rng = np.random.default_rng(1)
    vocab = runtime.config.vocab_size
    params = SamplingParams(max_tokens=1, temperature=0.0)

    def once() -> float:
        seq = runtime.new_sequence(rng.integers(3, vocab, prompt_tokens).tolist(), params)
        t0 = time.perf_counter()
        runtime.prefill([(seq, prompt_tokens)])
        return time.perf_counter() - t0

    once()  # warm-up
    engine_tps = prompt_tokens / _best_of(once, repeats)
    chain_tps = prompt_tokens / _best_of(lambda: matmul_chain(runtime, prompt_tokens), repeats)
    return BenchRow("prefill", prompt_tokens, engine_tps, chain_tps)


DEFAULT_CONTEXTS = (64, 1024)  # short and long: attention's share of a decode step grows with the context


def run_engine_bench(runtime: Runtime, batches=(1, 8, 32, 64), prompt_lens=(128, 512), contexts=DEFAULT_CONTEXTS,
                     steps: int = 8, repeats: int = 3) -> list[BenchRow]:
    rows = [bench_decode(runtime, b, c, steps) for c in contexts for b in batches]
    rows += [bench_prefill(runtime, n, repeats) for n in prompt_lens]
    return rows


def format_rows(rows: list[BenchRow], model_name: str) -> str:
    lines = [
        f"engine benchmark: {model_name}; decode median step at each context, prefill best of runs",
        f"{'phase':<8} {'context':>7} {'batch/len':>9} {'engine tok/s':>13} {'matmul chain tok/s':>19} {'ratio':>6}",
    ]
    for r in rows:
        context = str(r.context) if r.phase == "decode" else "-"
        lines.append(f"{r.phase:<8} {context:>7} {r.shape:>9} {r.engine_tokens_per_s:>13.1f} "
                     f"{r.chain_tokens_per_s:>19.1f} {r.ratio:>6.2f}")
    return "\n".join(lines)


def rows_as_dicts(rows: list[BenchRow]) -> list[dict]:
    return [dict(asdict(r), ratio=r.ratio) for r in rows]
