"""Engine benchmark: batched decode and prefill throughput against this machine's physical floor, in one run.

The floor comes from two figures measured at the start of the same run: the read bandwidth numpy achieves (a BLAS
matrix-vector product over a large float32 matrix) and the GEMM throughput it achieves (a large float32 matmul). A
step cannot be faster than the larger of its bytes (every weight matrix once, plus the KV of every sequence at its
context) over that bandwidth and its FLOPs (the linear layers plus attention, causal attention counted once) over that
throughput. ``engine / floor`` says how much of the machine the engine uses: at batch 1 the bytes bind, at large
batches the weight GEMMs come close to binding, and at long contexts the KV reads take over.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from pdserve.engine.kv_cache import block_nbytes
from pdserve.engine.params import SamplingParams
from pdserve.engine.runtime import Runtime

DEFAULT_BATCHES = (1, 8, 32)
DEFAULT_CONTEXTS = (64, 512, 1024, 2048)  # attention's share of a decode step grows with the context
DEFAULT_PROMPT_LENS = (128, 512, 2048)


@dataclass
class Machine:
    read_bytes_per_s: float  # BLAS matrix-vector product over a large float32 matrix
    gemm_flops_per_s: float  # large float32 matmul

    def floor_s(self, nbytes: float, flops: float) -> tuple[float, str]:
        by_bytes, by_flops = nbytes / self.read_bytes_per_s, flops / self.gemm_flops_per_s
        return (by_bytes, "bytes") if by_bytes >= by_flops else (by_flops, "flops")


def measure_machine(repeats: int = 3) -> Machine:
    matrix = np.full((8192, 8192), 0.5, dtype=np.float32)  # 256 MiB: far past every cache
    vector = np.ones(8192, dtype=np.float32)
    a = np.full((2048, 2048), 0.5, dtype=np.float32)
    matrix @ vector, a @ a  # warm-up
    read_s = _best_of(lambda: _timed(lambda: matrix @ vector), repeats)
    gemm_s = _best_of(lambda: _timed(lambda: a @ a), repeats)
    return Machine(matrix.nbytes / read_s, 2 * 2048**3 / gemm_s)


@dataclass
class ModelCost:
    """What one token costs the model, from its weights and shape."""

    weight_bytes: int  # every matrix a forward reads, the output head included
    linear_flops: int  # per token, the head excluded
    head_flops: int  # per row that gets logits
    kv_bytes: int  # per cached token, all layers, K and V
    attention_flops: int  # per (query, key) pair, all layers and heads: scores plus weighted values

    @classmethod
    def of(cls, runtime: Runtime) -> "ModelCost":
        w, c = runtime.model.weights, runtime.config
        matrices = [m for lw in w.layers for m in (lw.wqkv, lw.wo, lw.w_gate_up, lw.w_down)]
        return cls(weight_bytes=sum(m.nbytes for m in matrices) + w.output.nbytes,
                   linear_flops=2 * sum(m.size for m in matrices), head_flops=2 * w.output.size,
                   kv_bytes=block_nbytes(c, 1), attention_flops=4 * c.n_layers * c.n_heads * c.head_dim)

    def decode(self, batch: int, context: int) -> tuple[float, float]:
        """(bytes, FLOPs) of one decode step: ``batch`` sequences with ``context`` cached tokens each."""
        keys = context + 1
        return (self.weight_bytes + batch * keys * self.kv_bytes,
                batch * (self.linear_flops + self.head_flops + keys * self.attention_flops))

    def prefill(self, tokens: int) -> tuple[float, float]:
        """(bytes, FLOPs) of prefilling ``tokens`` prompt tokens; causal attention sees n(n+1)/2 pairs."""
        return (self.weight_bytes + tokens * self.kv_bytes,
                tokens * self.linear_flops + self.head_flops + tokens * (tokens + 1) // 2 * self.attention_flops)


@dataclass
class BenchRow:
    phase: str
    shape: int  # batch size (decode) or prompt tokens (prefill)
    context: int  # decode: tokens already in each sequence's KV cache
    engine_tokens_per_s: float
    floor_tokens_per_s: float
    bound: str  # what sets the floor: "bytes" or "flops"

    @property
    def ratio(self) -> float:
        return self.engine_tokens_per_s / self.floor_tokens_per_s


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _best_of(fn, repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def _decoding_sequences(runtime: Runtime, batch: int, context: int, steps: int):
    """``batch`` sequences that look ``context`` tokens into a generation: KV filled with small random values
    (no prefill needed: decode speed does not depend on what the numbers are) and one sampled token each."""
    rng = np.random.default_rng(0)
    c = runtime.config
    params = SamplingParams(max_tokens=steps + 2, temperature=0.0, ignore_eos=True)
    seqs = []
    for _ in range(batch):
        seq = runtime.new_sequence(rng.integers(3, c.vocab_size, context).tolist(), params)
        seq.kv.reserve(context)
        shape = (c.n_layers, c.n_kv_heads, context, c.head_dim)
        seq.kv.k[:, :, :context] = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.1)
        seq.kv.v[:, :, :context] = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.1)
        seq.kv.length = context
        seq.append_token(int(rng.integers(3, c.vocab_size)))
        seqs.append(seq)
    return seqs


def bench_decode(runtime: Runtime, machine: Machine, batch: int, context: int, steps: int) -> BenchRow:
    seqs = _decoding_sequences(runtime, batch, context, steps)
    runtime.decode_step(seqs)  # warm-up; the batch joins the runtime's slab as a decode worker's does
    step_times = [_timed(lambda: runtime.decode_step(seqs)) for _ in range(steps)]
    for s in seqs:
        runtime.free(s)
    floor_s, bound = machine.floor_s(*ModelCost.of(runtime).decode(batch, context + steps // 2))
    return BenchRow("decode", batch, context, batch / float(np.median(step_times)), batch / floor_s, bound)


def bench_prefill(runtime: Runtime, machine: Machine, prompt_tokens: int, repeats: int) -> BenchRow:
    rng = np.random.default_rng(1)
    params = SamplingParams(max_tokens=1, temperature=0.0)

    def once() -> float:
        seq = runtime.new_sequence(rng.integers(3, runtime.config.vocab_size, prompt_tokens).tolist(), params)
        return _timed(lambda: runtime.prefill([(seq, prompt_tokens)]))

    once()  # warm-up
    floor_s, bound = machine.floor_s(*ModelCost.of(runtime).prefill(prompt_tokens))
    return BenchRow("prefill", prompt_tokens, 0, prompt_tokens / _best_of(once, repeats), prompt_tokens / floor_s,
                    bound)


def run_engine_bench(runtime: Runtime, batches=DEFAULT_BATCHES, prompt_lens=DEFAULT_PROMPT_LENS,
                     contexts=DEFAULT_CONTEXTS, steps: int = 8, repeats: int = 3) -> tuple[Machine, list[BenchRow]]:
    machine = measure_machine()
    rows = [bench_decode(runtime, machine, b, c, steps) for c in contexts for b in batches]
    rows += [bench_prefill(runtime, machine, n, repeats) for n in prompt_lens]
    return machine, rows


def format_rows(machine: Machine, rows: list[BenchRow], model_name: str) -> str:
    lines = [
        f"engine benchmark: {model_name}; decode median step, prefill best of runs",
        f"machine (measured now): read {machine.read_bytes_per_s / 1e9:.1f} GB/s, "
        f"GEMM {machine.gemm_flops_per_s / 1e9:.1f} GFLOP/s float32",
        f"{'phase':<8} {'context':>7} {'batch/len':>9} {'engine tok/s':>13} {'floor tok/s':>12} {'bound':>6} "
        f"{'engine/floor':>12}",
    ]
    for r in rows:
        context = str(r.context) if r.phase == "decode" else "-"
        lines.append(f"{r.phase:<8} {context:>7} {r.shape:>9} {r.engine_tokens_per_s:>13.1f} "
                     f"{r.floor_tokens_per_s:>12.1f} {r.bound:>6} {r.ratio:>12.2f}")
    return "\n".join(lines)


def rows_as_dicts(rows: list[BenchRow]) -> list[dict]:
    return [dict(asdict(r), ratio=r.ratio) for r in rows]


def add_args(p) -> None:
    p.add_argument("--model", default=None)
    p.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)))
    p.add_argument("--prompt-lens", default=",".join(map(str, DEFAULT_PROMPT_LENS)))
    p.add_argument("--contexts", default=",".join(map(str, DEFAULT_CONTEXTS)),
                   help="context lengths of the decode batches (short and long)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--json", default=None, help="also write the rows to this file")


def main(a) -> int:
    import json

    batches = tuple(int(x) for x in a.batches.split(","))
    lens = tuple(int(x) for x in a.prompt_lens.split(",") if x)
    contexts = tuple(int(x) for x in a.contexts.split(",") if x)
    # a slab that holds the largest batch at the longest context, as a decode worker sized for it would
    runtime = Runtime.load(a.model, slab_seqs=max(batches), slab_tokens=max(contexts, default=0) + a.steps + 16)
    machine, rows = run_engine_bench(runtime, batches, lens, contexts=contexts, steps=a.steps)
    print(format_rows(machine, rows, runtime.model_name))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"model": runtime.model_name, "machine": asdict(machine), "rows": rows_as_dicts(rows)}, fh,
                      indent=2)
    return 0
