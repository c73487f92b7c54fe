"""The small per-layer passes of the forward as compiled loops: RMSNorm, RoPE, SwiGLU's gate, writing a decode
step's K and V.

Each is a handful of numpy calls otherwise (RMSNorm seven, RoPE ten, the gate five, a slab write two fancy-index
assignments),
whose fixed cost of a microsecond or so each adds up to milliseconds a step at small batches, where a step's
products take only a few (30 layers). One compiled call each does the same arithmetic in float32.
"""

from __future__ import annotations

import numpy as np

from pdserve.engine.model.kernels.compiled import compiled
from pdserve.engine.model.kernels.fast_exp import exp_clamped
from pdserve.engine.model.kernels.llvm_ops import narrow

F32 = np.float32
_FASTMATH = {"reassoc", "contract", "nsz"}


@compiled(fastmath=_FASTMATH)
def rms_norm_rows(x, gain, eps, out):  # pragma: no cover - compiled
    """out[n] = x[n] / sqrt(mean(x[n]^2) + eps) (* gain, unless ``gain`` is empty), row by row; x, out: [N, hidden]."""
    rows, width = x.shape
    scaled = gain.size > 0
    for n in range(rows):
        xn, on = x[n], out[n]
        total = F32(0.0)
        for i in range(width):
            total += xn[i] * xn[i]
        inv = F32(1.0) / np.sqrt(total * F32(1.0 / width) + eps)
        if scaled:
            for i in range(width):
                on[i] = xn[i] * inv * gain[i]
        else:
            for i in range(width):
                on[i] = xn[i] * inv


@compiled(fastmath=_FASTMATH)
def rope_in_place(qkv, cos, sin, positions, heads, head_dim):  # pragma: no cover - compiled
    """Rotate the first ``heads`` heads of every row of ``qkv`` [N, width] in place: RoPE on interleaved pairs
    (2i, 2i + 1) at the row's position, from ``cos``, ``sin`` [max positions, head_dim / 2]."""
    half = head_dim // 2
    for n in range(qkv.shape[0]):
        c, s, row = cos[positions[n]], sin[positions[n]], qkv[n]
        for h in range(heads):
            base = h * head_dim
            for i in range(half):
                even, odd = row[base + 2 * i], row[base + 2 * i + 1]
                row[base + 2 * i] = even * c[i] - odd * s[i]
                row[base + 2 * i + 1] = even * s[i] + odd * c[i]


@compiled()
def write_positions(keys, values, slots, positions, k, v):  # pragma: no cover - compiled
    """keys[slots[b], j, positions[b]] = k[b, j] (and values from v) for every sequence b and KV head j: one decode
    step's K and V into a layer of the slab ([slots, KVH, capacity, D]; float32, or 16-bit bits, rounded to nearest
    even)."""
    for b in range(k.shape[0]):
        for j in range(k.shape[1]):
            key_row, value_row = keys[slots[b], j, positions[b]], values[slots[b], j, positions[b]]
            for d in range(k.shape[2]):
                key_row[d] = narrow(k[b, j, d], key_row[d])
                value_row[d] = narrow(v[b, j, d], value_row[d])


@compiled(fastmath=_FASTMATH)
def silu_mul_rows(gate_up, width, out):  # pragma: no cover - compiled
    """out[n] = silu(gate) * up for gate_up[n] = [gate (width) | up (width)]; silu(g) = g / (1 + e^-g)."""
    for n in range(gate_up.shape[0]):
        row, on = gate_up[n], out[n]
        for i in range(width):
            g = row[i]
            on[i] = g / (F32(1.0) + exp_clamped(-g)) * row[width + i]


_NO_GAIN = np.zeros(0, dtype=F32)  # rms_norm_rows without a gain


def rms_norm(x: np.ndarray, weight: np.ndarray | None, eps: np.float32) -> np.ndarray:
    """x * weight / sqrt(mean(x^2) + eps), row-wise. x: [N, hidden]. weight None: gain folded into the next matmul."""
    out = np.empty_like(x)
    rms_norm_rows(x, _NO_GAIN if weight is None else weight, eps, out)
    return out


def silu_mul(gate_up: np.ndarray, width: int) -> np.ndarray:
    """silu(gate) * up for rows [gate | up] of ``width`` each."""
    out = np.empty((gate_up.shape[0], width), dtype=F32)
    silu_mul_rows(gate_up, width, out)
    return out


class RotaryEmbedding:
    """RoPE on interleaved pairs (2i, 2i+1): the convention of GGUF llama weights, whose Q/K rows are permuted for it.
    Applied in place to a forward's Q and K by engine/model/kernels/layer.py's rope_in_place, from these tables."""

    def __init__(self, head_dim: int, base: float, max_positions: int) -> None:
        inv_freq = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))  # [D/2]
        angles = np.outer(np.arange(max_positions, dtype=np.float64), inv_freq)  # [T, D/2]
        self.cos = np.cos(angles).astype(F32)
        self.sin = np.sin(angles).astype(F32)
