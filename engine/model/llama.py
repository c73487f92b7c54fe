"""The llama forward pass in numpy, float32 throughout.

One ``forward`` serves both phases: prefill passes many new tokens per sequence (with whatever prefix is already in
that sequence's cache), decode passes one. Every linear layer runs once over all tokens of all sequences of the step
(``[N, hidden] @ W``). Attention follows an :class:`AttentionPlan` made once per forward: decode rows whose KV sits in
the shared slab attend together in compiled loops (engine/model/decode_attention.py), every other sequence on its own.
"""

from __future__ import annotations

import threading
from contextlib import nullcontext

import numpy as np

from pdserve.engine.gguf_file import ModelConfig
from pdserve.engine.kv.cache import KVSlab, SequenceKV
from pdserve.engine.kv.dtype import DEFAULT_KV_DTYPE, kernel_view, kv_numpy_dtype
from pdserve.engine.kv.fork import ForkKV, attend_fork
from pdserve.engine.model.attention_plan import AttentionPlan
from pdserve.engine.model.crossover import model_crossover, parallel_threads, step_crossover
from pdserve.engine.model.crossover_steps import decode_step_runs
from pdserve.engine.model.decode_attention import DecodeAttention
from pdserve.engine.model.gguf_model import LoadedModel, ModelWeights
from pdserve.engine.model.kernels.fast_exp import exp_nonpositive
from pdserve.engine.model.kernels.layer import RotaryEmbedding, rms_norm, rope_in_place, silu_mul, write_positions
from pdserve.engine.model.kernels.parallel import Parallel
from pdserve.engine.model.quantized import QuantizedMatrix

F32 = np.float32
# rows of a forward from which every product runs on our two threads instead of BLAS's (engine/model/kernels/parallel.py): below
# it the column halves measured slower (1 row: 41 ms against 22 ms for 30 layers of products)
MIN_SPLIT_ROWS = 16
QUERY_BLOCK = 64  # queries per block of causal attention: small enough for its scores to stay in cache
CAUSAL_MASK = np.triu(np.full((QUERY_BLOCK, QUERY_BLOCK), -np.inf, dtype=F32), k=1)  # -inf above the diagonal
WEIGHT_PATHS = ("auto", "float32", "quantized")  # auto: quantized up to the measured crossover batch, float32 above


class LlamaModel:
    """A llama decoder over dequantized float32 weights and, where the file has them, its block-quantized matrices.

    ``weight_path`` picks the products' form per forward: ``auto`` runs the quantized matrices for forwards of up to
    ``crossover`` rows (measured at load, engine/model/crossover.py) and float32 BLAS above; ``float32`` and ``quantized``
    force one form (benchmarks). ``kv_dtype`` is the element type of the caches it makes (engine/kv/dtype.py);
    attention computes in float32 whatever it is.
    """

    def __init__(self, loaded: LoadedModel, weight_path: str = "auto", kv_dtype: str = DEFAULT_KV_DTYPE) -> None:
        if weight_path not in WEIGHT_PATHS:
            raise ValueError(f"weight path {weight_path!r}: one of {', '.join(WEIGHT_PATHS)}")
        kv_numpy_dtype(kv_dtype)  # a bad name fails here, naming the choices
        self.kv_dtype = kv_dtype
        self.config: ModelConfig = loaded.config
        self.path = loaded.path
        self.weights: ModelWeights = loaded.weights
        c = self.config
        self.rope = RotaryEmbedding(c.head_dim, c.rope_freq_base, c.context_length)
        self.eps = F32(c.rms_eps)
        self.scale = F32(1.0 / np.sqrt(c.head_dim))
        self.parallel = Parallel()  # attention's work, and for large batches every product, on two threads
        self.decode_attention = DecodeAttention(self.parallel)
        self.weight_path = weight_path
        quantized = self.weights.quantized
        self.quant_threads = parallel_threads(self.parallel.threads) if quantized else 1
        # a worker sharing the host's cores measures its products on its own core: they get the second one only while
        # the other workers rest, and a two-thread timing taken while they load lost even at batch 1 (crossover 0:
        # every decode step on float32, 3x slower); a worker with two threads of its own times whole decode steps
        if quantized is None or weight_path == "float32":
            self.crossover = 0
        elif self.parallel.shares_cores or self.quant_threads < 2:
            self.crossover = model_crossover((c.fingerprint, 1), quantized, self.dense_matrices(), 1)
        else:
            self.crossover = step_crossover((c.fingerprint, "steps", self.quant_threads, kv_dtype),
                                            *decode_step_runs(self))

    def dense_matrices(self) -> list[np.ndarray]:
        """Every float32 matrix of a step in the order of engine.crossover.step_matrices, ``[in, out]``."""
        w = self.weights
        return [m for lw in w.layers for m in (lw.wqkv, lw.wo, lw.w_gate_up, lw.w_down)] + [w.output]

    def quantized_rows(self, rows: int, split: bool = False) -> bool:
        """Whether a forward of ``rows`` rows runs the quantized matrices. ``split``: the forward runs its attention
        and products on our two threads (:meth:`_split_pays`), where ``auto`` takes float32 whatever the crossover:
        numba's threads, spinning after each quantized product, take the core that the attention's second half needs
        (whole decode steps at context 512 measured 3.3-3.8x float32's time at batch 24 and 32, against 0.44x at
        batch 8, which does not split), and the crossover times steps whose attention does not split."""
        if self.weights.quantized is None or self.weight_path == "float32":
            return False
        return self.weight_path == "quantized" or (rows <= self.crossover and not split)

    def decode_splits(self, batch: int, context: int) -> bool:
        """Whether a decode step of ``batch`` sequences of ``context`` cached tokens each, all in the slab, splits."""
        return self._splits_decode(batch, np.full(batch, context + 1, dtype=np.int64))

    def prefill_splits(self, tokens: int) -> bool:
        """Whether a prefill of one prompt of ``tokens`` new tokens splits."""
        return self.parallel.threads >= 2 and tokens >= MIN_SPLIT_ROWS

    def new_kv(self, capacity: int = 0, block_tokens: int = 16) -> SequenceKV:
        return SequenceKV(self.config, block_tokens=block_tokens, capacity=capacity, kv_dtype=self.kv_dtype)

    # --- entry points the runtime calls ------------------------------------------------------------------------
    def prefill(self, caches: list[SequenceKV], new_tokens: list[list[int]]) -> np.ndarray:
        """Run each sequence's new tokens after whatever prefix its cache already holds.

        Returns the logits of each sequence's last new token, [n_sequences, vocab]. The caches are extended.
        """
        if len(caches) != len(new_tokens) or any(len(t) == 0 for t in new_tokens):
            raise ValueError("prefill needs one non-empty token list per cache")
        return self.forward(caches, new_tokens)

    def decode_step(self, caches: list[SequenceKV], tokens: list[int], slab: KVSlab | None = None) -> np.ndarray:
        """One new token per running sequence; returns logits [batch, vocab]. Members of ``slab`` attend batched."""
        return self.forward(caches, [[t] for t in tokens], slab)

    def fork_forward(self, caches: list[SequenceKV], new_tokens: list[list[int]]) -> np.ndarray:
        """Each token list run after a fork of its cache (engine/kv/fork.py), in one forward; returns the logits of
        each list's last token. The caches are read, never written; the forks' own KV is dropped on return."""
        if len(caches) != len(new_tokens) or any(len(t) == 0 for t in new_tokens):
            raise ValueError("fork_forward needs one non-empty token list per cache")
        return self.forward([ForkKV(kv) for kv in caches], new_tokens)

    # --- the forward pass --------------------------------------------------------------------------------------
    def forward(self, caches: list[SequenceKV], new_tokens: list[list[int]], slab: KVSlab | None = None) -> np.ndarray:
        c = self.config
        flat = np.fromiter((t for seq in new_tokens for t in seq), dtype=np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= c.vocab_size):
            raise ValueError(f"token id outside 0..{c.vocab_size - 1}")
        plan = AttentionPlan.build(caches, [len(t) for t in new_tokens], slab, c.context_length)
        split = self._split_pays(plan, flat.size)
        with self.parallel.working(), self.parallel.single_threaded_blas() if split else nullcontext():
            return self._layers(plan, flat, split, self.quantized_rows(flat.size, split))

    def _split_pays(self, plan: AttentionPlan, rows: int) -> bool:
        """Whether this forward runs its products on our own two threads (the decode attention too, where it is large
        enough to split): for 16 rows or more when some sequence brings several new tokens (prefill), and for a pure
        decode step only when its slab attention is large enough to split as well. At batch 32 and context 64 the
        split products measured 6-8% slower than BLAS's threads; from context 512 the attention's second core makes up
        for it and more."""
        if self.parallel.threads < 2 or rows < MIN_SPLIT_ROWS:
            return False
        prefill = any(hi - lo > 1 for _, lo, hi in plan.singles)
        return prefill or (plan.slab_rows.size > 0 and self._splits_decode(rows, plan.lengths))

    def _splits_decode(self, rows: int, lengths: np.ndarray) -> bool:
        return (self.parallel.threads >= 2 and rows >= MIN_SPLIT_ROWS
                and self.decode_attention.splits(lengths, self.config.n_kv_heads))

    def _layers(self, plan: AttentionPlan, flat: np.ndarray, split: bool, quantized: bool) -> np.ndarray:
        """The decoder over ``flat`` tokens; ``split``: every float32 product and the decode attention on both of
        ``self.parallel``'s threads (model/kernels/parallel.py says why); ``quantized``: the quantized matrices where there
        are some."""
        c, w = self.config, self.weights
        q_width = c.n_heads * c.head_dim
        kv_width = c.n_kv_heads * c.head_dim
        heads_qk = c.n_heads + c.n_kv_heads
        mm = self.parallel.matmul if split else np.matmul
        x = w.token_embedding[flat]  # [N, hidden] (a fresh copy: updated in place below)
        for layer, lw in enumerate(w.layers):
            ql = w.quantized.layers[layer] if quantized else None
            # attention block
            qkv = self._normed_product(x, ql and ql.qkv, ql and ql.attn_norm, lw.wqkv, mm)  # [N, q + 2 kv width]
            rope_in_place(qkv, self.rope.cos, self.rope.sin, plan.positions, heads_qk, c.head_dim)
            q = qkv[:, :q_width].reshape(-1, c.n_heads, c.head_dim)  # [N, H, D]
            k = qkv[:, q_width:q_width + kv_width].reshape(-1, c.n_kv_heads, c.head_dim)  # [N, KVH, D]
            v = qkv[:, q_width + kv_width:].reshape(-1, c.n_kv_heads, c.head_dim)  # [N, KVH, D]
            attn = self._attention(plan, layer, q, k, v, split, quantized)  # [N, H * D]
            self._add_product(x, attn, ql and ql.wo, lw.wo, mm)
            # feed-forward block (SwiGLU)
            gate_up = self._normed_product(x, ql and ql.gate_up, ql and ql.ffn_norm, lw.w_gate_up, mm)  # [N, 2 ffn]
            self._add_product(x, silu_mul(gate_up, c.ffn_hidden), ql and ql.down, lw.w_down, mm)
        for kv, n in zip(plan.caches, plan.counts):
            kv.length += n
        last = rms_norm(x[plan.offsets[1:] - 1], w.output_norm, self.eps)  # [n_sequences, hidden]
        head = w.quantized.output if quantized else None
        return head(last, threads=self._quant_threads_now(head)) if head is not None else mm(last, w.output)  # [n_seqs, vocab]

    def _quant_threads_now(self, matrix: QuantizedMatrix) -> int:
        """The threads of the next quantized product: its two halves on two threads only where it has two and the
        second core is free now (kernels/core_share.py)."""
        if self.quant_threads < 2 or not matrix.splits:
            return 1
        return self.quant_threads if self.parallel.split_now() else 1

    def _normed_product(self, x: np.ndarray, matrix: QuantizedMatrix | None, gain: np.ndarray | None,
                        dense: np.ndarray, mm) -> np.ndarray:
        """rms_norm(x) times a layer's matrix: the quantized one, with the norm's gain applied to its input, or the
        float32 one, which has the gain folded in."""
        if matrix is not None:
            return matrix(rms_norm(x, gain, self.eps), threads=self._quant_threads_now(matrix))
        return mm(rms_norm(x, None, self.eps), dense)

    def _add_product(self, x: np.ndarray, h: np.ndarray, matrix: QuantizedMatrix | None, dense: np.ndarray,
                     mm) -> None:
        """x += h times a layer's matrix (quantized: added in place by the kernel)."""
        if matrix is not None:
            matrix(h, into=x, threads=self._quant_threads_now(matrix))
        else:
            x += mm(h, dense)

    def _attention(self, plan: AttentionPlan, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                   split: bool, quantized: bool) -> np.ndarray:
        """Write this layer's new K, V into the caches and attend, as the plan says. q: [N, H, D]; k, v: [N, KVH, D]."""
        c = self.config
        if plan.all_slab:  # a pure decode step over the slab takes the rows as they are: no gather, no scatter
            return self._attend_slab(q, k, v, plan, layer, split, quantized)
        attn = np.empty((q.shape[0], c.n_heads * c.head_dim), dtype=F32)
        if plan.slab_rows.size:
            rows = plan.slab_rows
            attn[rows] = self._attend_slab(q[rows], k[rows], v[rows], plan, layer, split, quantized)
        for i, lo, hi in plan.singles:
            kv, start = plan.caches[i], plan.starts[i]
            kv.write(layer, start, k[lo:hi], v[lo:hi])
            attn[lo:hi] = self._attend(q[lo:hi], kv, layer, start)
        return attn

    def _attend(self, q: np.ndarray, kv: SequenceKV, layer: int, start: int) -> np.ndarray:
        """Causal grouped-query attention of n new queries over start + n cached positions. q: [n, H, D].

        Queries go in blocks of QUERY_BLOCK: a block attends only to the keys up to its last query, so the causal
        half of the score matrix is never computed, and only the block's diagonal square needs a mask. Two threads
        take the blocks in turn, the dearest (last) first, so both finish together.
        """
        c = self.config
        n, g, kvh, d = q.shape[0], c.group_size, c.n_kv_heads, c.head_dim
        qg = q.reshape(n, kvh, g, d).transpose(1, 0, 2, 3) * self.scale  # [KVH, n, g, D]: a query's heads adjacent
        qg = qg.reshape(kvh, n * g, d)
        if isinstance(kv, ForkKV):  # the parent's prefix and the fork's own keys, read apart
            return attend_fork(qg, kv, layer, start, g).reshape(kvh, n, g, d).transpose(1, 0, 2, 3).reshape(n, -1)
        out = np.empty((kvh, n * g, d), dtype=F32)
        args = (qg, _float32(kv.k[layer], start + n), _float32(kv.v[layer], start + n), start, out)  # [KVH, T, D]
        blocks = list(range(0, n, QUERY_BLOCK))
        if len(blocks) < 2 or self.parallel.threads < 2:
            self._attend_blocks(*args, blocks)
        else:
            with self.parallel.single_threaded_blas():
                scratch: dict[int, np.ndarray] = {}  # one per thread, as one call over several blocks has

                def block(b0: int) -> None:
                    mine = scratch.get(threading.get_ident())
                    if mine is None:
                        mine = scratch[threading.get_ident()] = self._scratch(n, start)
                    self._attend_blocks(*args, [b0], mine)
                self.parallel.share_out(block, blocks[::-1])
        return out.reshape(kvh, n, g, d).transpose(1, 0, 2, 3).reshape(n, -1)

    def _scratch(self, n: int, start: int) -> np.ndarray:
        """Room for one query block's scores of n new queries after ``start`` cached positions."""
        c = self.config
        return np.empty(c.n_kv_heads * min(n, QUERY_BLOCK) * c.group_size * (start + n), dtype=F32)

    def _attend_blocks(self, qg: np.ndarray, keys: np.ndarray, values: np.ndarray, start: int, out: np.ndarray,
                       blocks: list[int], scratch: np.ndarray | None = None) -> None:
        """The query blocks starting at ``blocks`` (row b0 of n new queries), into ``out`` [KVH, n * g, D].

        A block's scores take one scratch buffer, small enough to stay in cache between the passes over it; the
        softmax's division is applied to the block's output ([rows, D]) instead of to its scores ([rows, T]).
        """
        g, kvh = self.config.group_size, self.config.n_kv_heads
        n = qg.shape[1] // g
        scratch = self._scratch(n, start) if scratch is None else scratch
        for b0 in blocks:
            b1 = min(n, b0 + QUERY_BLOCK)
            total = start + b1
            scores = scratch[:kvh * (b1 - b0) * g * total].reshape(kvh, (b1 - b0) * g, total)
            np.matmul(qg[:, b0 * g:b1 * g], keys[:, :total].transpose(0, 2, 1), out=scores)  # [KVH, bq*g, T]
            if b1 - b0 > 1:  # query i of the block may not see keys after start + b0 + i
                square = scores.reshape(kvh, b1 - b0, g, total)[..., start + b0:]
                square += CAUSAL_MASK[:b1 - b0, :b1 - b0][None, :, None, :]
            np.subtract(scores, scores.max(axis=-1, keepdims=True), out=scores)
            exp_nonpositive(scores)
            block_out = out[:, b0 * g:b1 * g]
            np.matmul(scores, values[:, :total], out=block_out)
            block_out /= scores.sum(axis=-1, keepdims=True)

    def _attend_slab(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, plan: AttentionPlan,
                     layer: int, split: bool, quantized: bool) -> np.ndarray:
        """One query per sequence over its slab slot, the whole batch in two compiled passes. q: [B, H, D]. A step
        whose products run quantized on numba's threads (and that does not split on ours) gives its attention those
        two threads while the second core is free (engine/model/decode_attention.py). Not beside BLAS's products:
        numba's idle threads spin for a while after a region, on the core BLAS's second thread needs next (the
        engine benchmark's float32 rows at batch 1-32 lost up to 40% of their speed that way)."""
        c = self.config
        slab, slots, lengths = plan.slab, plan.slots, plan.lengths
        write_positions(kernel_view(slab.k[layer]), kernel_view(slab.v[layer]), slots, lengths - 1, k, v)
        qg = q.reshape(q.shape[0], c.n_kv_heads, c.group_size, c.head_dim) * self.scale  # [B, KVH, g, D]
        numba_threads = self.quant_threads if quantized and not split else 1
        # asked of the core share only where the attention would split: the share counts every split it allows
        if numba_threads > 1 and not (self.decode_attention.numba_splits(lengths, c.n_kv_heads)
                                      and self.parallel.split_now()):
            numba_threads = 1
        return self.decode_attention(qg, slab.k[layer], slab.v[layer], slots, lengths, split,
                                     numba_threads).reshape(q.shape[0], -1)


def _float32(cache: np.ndarray, tokens: int) -> np.ndarray:
    """A layer's keys or values [KVH, capacity, D] up to ``tokens`` as float32: the cache itself, or a 16-bit cache
    widened once for the whole forward's blocks."""
    return cache if cache.dtype == F32 else cache[:, :tokens].astype(F32)
