"""Engine benchmark: batched decode and prefill throughput against this machine's physical floor, in one run.

The floor comes from two figures measured at the start of the same run: the read bandwidth numpy achieves (a BLAS
matrix-vector product over a large float32 matrix) and the GEMM throughput it achieves (a large float32 matmul). A
step cannot be faster than the larger of its bytes (every weight matrix once, plus the KV of every sequence at its
context) over that bandwidth and its FLOPs (the linear layers plus attention, causal attention counted once) over that
throughput. ``engine / floor`` says how much of the machine the engine uses: at batch 1 the bytes bind, at large
batches the weight GEMMs come close to binding, and at long contexts the KV reads take over.

Decode rows run with each weight path (``float32``: BLAS on the dequantized matrices; ``quantized``: the compiled
products on GGUF's blocks, whose floor counts the quantized bytes) and each KV dtype (its floor counts the KV bytes
at that width). ``--peer llama-cpp`` adds llama.cpp on the same file, in the same process, side by side
(bench/runtime/peer.py).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from pdserve.engine.kv.cache import block_nbytes
from pdserve.engine.kv.dtype import KV_DTYPES
from pdserve.engine.model.crossover import step_matrices
from pdserve.engine.params import SamplingParams
from pdserve.engine.runtime import Runtime

DEFAULT_BATCHES = (1, 8, 32)
DEFAULT_CONTEXTS = (64, 512, 2048)  # attention's share of a decode step grows with the context
DEFAULT_PROMPT_LENS = (128, 512, 2048)
DEFAULT_WEIGHTS = ("float32", "quantized")
DEFAULT_KV_DTYPES = ("float32", "float16")


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
    def of(cls, runtime: Runtime, weights: str = "float32", kv_dtype: str = "float32") -> "ModelCost":
        """The costs of ``runtime``'s model on a weight path (``quantized``: the bytes of the quantized matrices, and
        of the float32 ones of any matrix without a kernel) with a KV cache of ``kv_dtype``."""
        model, c = runtime.model, runtime.config
        dense = model.dense_matrices()
        quantized = step_matrices(model.weights.quantized) if weights == "quantized" else [None] * len(dense)
        return cls(weight_bytes=sum(q.nbytes if q is not None else d.nbytes for q, d in zip(quantized, dense)),
                   linear_flops=2 * sum(m.size for m in dense[:-1]), head_flops=2 * dense[-1].size,
                   kv_bytes=block_nbytes(c, 1, kv_dtype), attention_flops=4 * c.n_layers * c.n_heads * c.head_dim)

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
    weights: str = "float32"  # the products' weight path
    kv_dtype: str = "float32"

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


def decode_step_s(runtime: Runtime, batch: int, context: int, steps: int) -> float:
    """Median wall seconds of a decode step of ``batch`` sequences at ``context``, with the runtime as it is set."""
    seqs = _decoding_sequences(runtime, batch, context, steps)
    runtime.decode_step(seqs)  # warm-up; the batch joins the runtime's slab as a decode worker's does
    step_times = [_timed(lambda: runtime.decode_step(seqs)) for _ in range(steps)]
    for s in seqs:
        runtime.free(s)
    return float(np.median(step_times))


def path_label(runtime: Runtime, rows: int, split: bool = False) -> tuple[str, str]:
    """(the products' path a forward of ``rows`` rows runs, the row's label): ``auto`` resolves per forward to the
    quantized matrices up to the crossover (and where the forward does not split, ``split``) and float32 otherwise,
    and its floor must be the floor of what ran."""
    ran = "quantized" if runtime.model.quantized_rows(rows, split) else "float32"
    return ran, (f"auto:{ran[:5]}" if runtime.model.weight_path == "auto" else ran)


def bench_decode(runtime: Runtime, machine: Machine, batch: int, context: int, steps: int) -> BenchRow:
    """One decode row on the runtime's current weight path and KV dtype."""
    (ran, label), kv_dtype = path_label(runtime, batch, runtime.model.decode_splits(batch, context)), runtime.kv_dtype
    step_s = decode_step_s(runtime, batch, context, steps)
    floor_s, bound = machine.floor_s(*ModelCost.of(runtime, ran, kv_dtype).decode(batch, context + steps // 2))
    return BenchRow("decode", batch, context, batch / step_s, batch / floor_s, bound, label, kv_dtype)


def bench_prefill(runtime: Runtime, machine: Machine, prompt_tokens: int, repeats: int) -> BenchRow:
    rng = np.random.default_rng(1)
    params = SamplingParams(max_tokens=1, temperature=0.0)

    def once() -> float:
        seq = runtime.new_sequence(rng.integers(3, runtime.config.vocab_size, prompt_tokens).tolist(), params)
        return _timed(lambda: runtime.prefill([(seq, prompt_tokens)]))

    once()  # warm-up
    (ran, label), kv_dtype = path_label(runtime, prompt_tokens, runtime.model.prefill_splits(prompt_tokens)), runtime.kv_dtype
    floor_s, bound = machine.floor_s(*ModelCost.of(runtime, ran, kv_dtype).prefill(prompt_tokens))
    return BenchRow("prefill", prompt_tokens, 0, prompt_tokens / _best_of(once, repeats), prompt_tokens / floor_s,
                    bound, label, kv_dtype)


def run_engine_bench(runtime: Runtime, batches=DEFAULT_BATCHES, prompt_lens=DEFAULT_PROMPT_LENS,
                     contexts=DEFAULT_CONTEXTS, steps: int = 8, repeats: int = 3, weights=DEFAULT_WEIGHTS,
                     kv_dtypes=DEFAULT_KV_DTYPES) -> tuple[Machine, list[BenchRow]]:
    """Decode rows for every weight path and KV dtype, then prefill rows (prompts of more rows than the crossover
    run float32 products on the ``auto`` path) for every KV dtype."""
    machine = measure_machine()
    if runtime.model.weights.quantized is None:
        weights = [w for w in weights if w != "quantized"]
    rows = []
    for kv_dtype in kv_dtypes:
        runtime.use_kv_dtype(kv_dtype)
        for path in weights:
            runtime.model.weight_path = path
            rows += [bench_decode(runtime, machine, b, c, steps) for c in contexts for b in batches]
        runtime.model.weight_path = "auto"
        rows += [bench_prefill(runtime, machine, n, repeats) for n in prompt_lens]
    return machine, rows


def format_rows(machine: Machine, rows: list[BenchRow], model_name: str, crossover: int | None = None) -> str:
    lines = [
        f"engine benchmark: {model_name}; decode median step, prefill best of runs",
        f"machine (measured now): read {machine.read_bytes_per_s / 1e9:.1f} GB/s, "
        f"GEMM {machine.gemm_flops_per_s / 1e9:.1f} GFLOP/s float32"
        + (f"; quantized products up to {crossover} rows (measured at load)" if crossover is not None else ""),
        f"{'phase':<8} {'weights':<10} {'kv':<8} {'context':>7} {'batch/len':>9} {'engine tok/s':>13} "
        f"{'floor tok/s':>12} {'bound':>6} {'engine/floor':>12}",
    ]
    for r in rows:
        context = str(r.context) if r.phase == "decode" else "-"
        lines.append(f"{r.phase:<8} {r.weights:<10} {r.kv_dtype:<8} {context:>7} {r.shape:>9} "
                     f"{r.engine_tokens_per_s:>13.1f} {r.floor_tokens_per_s:>12.1f} {r.bound:>6} {r.ratio:>12.2f}")
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
    p.add_argument("--weights", default=",".join(DEFAULT_WEIGHTS),
                   help="weight paths of the decode rows: float32, quantized, auto (comma separated)")
    p.add_argument("--kv-dtypes", default=",".join(DEFAULT_KV_DTYPES),
                   help=f"KV dtypes, comma separated ({', '.join(KV_DTYPES)})")
    p.add_argument("--peer", default=None, choices=("llama-cpp",),
                   help="also run llama.cpp on the same file (the peer extra: pip install -e '.[peer]'), side by side "
                        "with the engine")
    p.add_argument("--peer-batches", default="1,8,32",
                   help="batches of the side-by-side comparison (above 1: llama.cpp's batch API)")
    p.add_argument("--peer-contexts", default="64,512,2048", help="contexts of the side-by-side comparison")
    p.add_argument("--peer-repeats", type=int, default=3, help="rounds of the side-by-side comparison")
    p.add_argument("--skip-table", action="store_true", help="only the side-by-side comparison with --peer")
    p.add_argument("--json", default=None, help="also write the rows to this file")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def main(a) -> int:
    import json

    from pdserve.bench.runtime.peer import PEER_STEPS, compare_with_peer, format_comparison

    batches, lens, contexts = _ints(a.batches), _ints(a.prompt_lens), _ints(a.contexts)
    peer_contexts, peer_batches = (_ints(a.peer_contexts), _ints(a.peer_batches)) if a.peer else ((), ())
    kv_dtypes = tuple(x for x in a.kv_dtypes.split(",") if x)
    # a slab that holds the largest batch at the longest context, as a decode worker sized for it would
    longest = max(contexts + peer_contexts, default=0)
    steps = max(a.steps, PEER_STEPS) if a.peer else a.steps
    runtime = Runtime.load(a.model, slab_seqs=max(batches + peer_batches), slab_tokens=longest + steps + 16)
    out: dict = {"model": runtime.model_name, "crossover": runtime.model.crossover}
    if not a.skip_table:
        machine, rows = run_engine_bench(runtime, batches, lens, contexts=contexts, steps=a.steps,
                                         weights=tuple(a.weights.split(",")), kv_dtypes=kv_dtypes)
        print(format_rows(machine, rows, runtime.model_name, runtime.model.crossover))
        out.update(machine=asdict(machine), rows=rows_as_dicts(rows))
    if a.peer:
        runtime.use_kv_dtype(kv_dtypes[0])
        runtime.model.weight_path = "auto"
        comparison = compare_with_peer(runtime, a.peer, peer_contexts, a.steps, a.peer_repeats, peer_batches)
        print(format_comparison(comparison))
        out["peer"] = comparison
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return 0
