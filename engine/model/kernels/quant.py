"""Compiled products of float32 activations with GGUF's block-quantized weights, read in their 4- and 8-bit form.

A weight matrix ``[out, in]`` of GGUF blocks (32 weights of one row along ``in``, one float16 scale, for Q4_1 a
float16 minimum) is repacked once at load into *tiles* of ``T`` rows: ``qs[tile, block, byte, row]`` holds byte
``byte`` of block ``block`` of the tile's rows side by side, ``scales[tile, block, row]`` (and ``mins``) their
float16 bits. The bytes are GGUF's own (Q4: byte j holds weight j in its low nibble and weight j + 16 in its high
one; Q8_0: one signed byte a weight); only their order changes, so a product reads each weight byte once.

The kernels walk a tile block by block; for each byte position they unpack the ``T`` rows' bytes side by side and
multiply-add them with the one activation that position meets (a loop over rows, which the compiler vectorizes:
16 rows a vector instruction), into per-block partial sums; each block's sums are then scaled (``scale * sum +
min * sum(x of the block)`` for Q4_1, and for Q4_0 the same with ``-8 * scale`` as the minimum). Activations and sums
stay float32.
Summation order differs from a dense product of the dequantized matrix, which is why tests compare against float64.

``t0..t1``: the tiles one call computes (two threads take half each); ``accumulate``: add into ``y`` instead of
writing it (a residual connection).
"""

from __future__ import annotations

import numba
import numpy as np

from pdserve.engine.model.kernels.compiled import compiled
from pdserve.engine.model.kernels.llvm_ops import half_to_float, high_nibble, low_nibble, signed_byte

F32 = np.float32
_FASTMATH = {"reassoc", "contract", "nsz"}  # vectorizable sums; no flag that assumes away inf or NaN


@compiled(fastmath=_FASTMATH)
def _q4_partials(qs, x, t, b, part, lo, hi):  # pragma: no cover - compiled
    """part[i, r] = sum over the block's 16 bytes of (low nibble * x[i, 32b + j] + high nibble * x[i, 32b + 16 + j])
    for the tile's rows r, every activation row i."""
    rows, tile = x.shape[0], part.shape[1]
    part[:] = 0.0
    base = b * 32
    for j in range(16):
        qv = qs[t, b, j]
        if rows == 1:
            xl, xh, p = x[0, base + j], x[0, base + 16 + j], part[0]
            for r in range(tile):
                p[r] += low_nibble(qv[r]) * xl + high_nibble(qv[r]) * xh
        else:  # unpack once, use for every activation row
            for r in range(tile):
                lo[r] = low_nibble(qv[r])
                hi[r] = high_nibble(qv[r])
            _add_unpacked(part, lo, hi, x, base + j, base + 16 + j)


@compiled(fastmath=_FASTMATH)
def _add_unpacked(part, lo, hi, x, col_a, col_b):  # pragma: no cover - compiled
    """part[i] += lo * x[i, col_a] + hi * x[i, col_b] for every activation row i: four rows a pass over the unpacked
    weights, so that each load of them feeds four rows' multiply-adds (one row a pass measured 4.5 ms a row for a
    SmolLM2 step, memory operations rather than arithmetic)."""
    rows, tile = part.shape
    i = 0
    while i + 4 <= rows:
        a0, a1, a2, a3 = x[i, col_a], x[i + 1, col_a], x[i + 2, col_a], x[i + 3, col_a]
        b0, b1, b2, b3 = x[i, col_b], x[i + 1, col_b], x[i + 2, col_b], x[i + 3, col_b]
        p0, p1, p2, p3 = part[i], part[i + 1], part[i + 2], part[i + 3]
        for r in range(tile):
            low, high = lo[r], hi[r]
            p0[r] += low * a0 + high * b0
            p1[r] += low * a1 + high * b1
            p2[r] += low * a2 + high * b2
            p3[r] += low * a3 + high * b3
        i += 4
    while i < rows:
        a0, b0, p0 = x[i, col_a], x[i, col_b], part[i]
        for r in range(tile):
            p0[r] += lo[r] * a0 + hi[r] * b0
        i += 1


@compiled(fastmath=_FASTMATH)
def _block_sums(x):  # pragma: no cover - compiled
    """[M, in / 32]: the sum of each activation row's 32 values of every block (what a block's minimum, or Q4_0's
    offset of 8, multiplies)."""
    sums = np.empty((x.shape[0], x.shape[1] // 32), F32)
    for i in range(x.shape[0]):
        for b in range(sums.shape[1]):
            total = F32(0.0)
            for j in range(32):
                total += x[i, b * 32 + j]
            sums[i, b] = total
    return sums


@compiled()
def _scratch(rows, tile):  # pragma: no cover - compiled
    """A tile's partial sums and accumulators ([rows, tile] each) and two rows of unpacked weights."""
    return np.empty((rows, tile), F32), np.empty((rows, tile), F32), np.empty(tile, F32), np.empty(tile, F32)


@compiled(fastmath=_FASTMATH)
def _store(acc, y, t, accumulate):  # pragma: no cover - compiled
    """The tile's finished rows into y[:, t * T ...], rows past y's end (padding) dropped."""
    tile = acc.shape[1]
    end = min(tile, y.shape[1] - t * tile)
    for i in range(acc.shape[0]):
        yi = y[i, t * tile:t * tile + end]
        ai = acc[i]
        if accumulate:
            for r in range(end):
                yi[r] += ai[r]
        else:
            for r in range(end):
                yi[r] = ai[r]


@compiled(fastmath=_FASTMATH)
def q4_tiles(scales, mins, min_factor, qs, x, y, t0, t1, accumulate):  # pragma: no cover - compiled
    """Q4_1 (weight = scale * q + min; ``min_factor`` 1) and Q4_0 (weight = scale * (q - 8): ``mins`` are the
    scales, ``min_factor`` -8): y[:, rows of tiles t0..t1] (+)= x @ W.T. x: [M, in]."""
    rows, nb, tile = x.shape[0], scales.shape[1], scales.shape[2]
    xsum = _block_sums(x)
    part, acc, lo, hi = _scratch(rows, tile)
    for t in range(t0, t1):
        acc[:] = 0.0
        for b in range(nb):
            _q4_partials(qs, x, t, b, part, lo, hi)
            sv, mv = scales[t, b], mins[t, b]
            for i in range(rows):
                xs, p, a = min_factor * xsum[i, b], part[i], acc[i]
                for r in range(tile):
                    a[r] += half_to_float(sv[r]) * p[r] + half_to_float(mv[r]) * xs
        _store(acc, y, t, accumulate)


@compiled(fastmath=_FASTMATH)
def q8_0_tiles(scales, mins, min_factor, qs, x, y, t0, t1, accumulate):  # pragma: no cover - compiled
    """Q8_0 (weight = scale * q, q a signed byte; ``mins``, ``min_factor`` unused); two byte positions per pass over
    the partial sums."""
    rows, nb, tile = x.shape[0], scales.shape[1], scales.shape[2]
    part, acc, lo, hi = _scratch(rows, tile)
    for t in range(t0, t1):
        acc[:] = 0.0
        for b in range(nb):
            part[:] = 0.0
            base = b * 32
            for j in range(0, 32, 2):
                qa, qb = qs[t, b, j], qs[t, b, j + 1]
                if rows == 1:
                    xa, xb, p = x[0, base + j], x[0, base + j + 1], part[0]
                    for r in range(tile):
                        p[r] += signed_byte(qa[r]) * xa + signed_byte(qb[r]) * xb
                else:
                    for r in range(tile):
                        lo[r] = signed_byte(qa[r])
                        hi[r] = signed_byte(qb[r])
                    _add_unpacked(part, lo, hi, x, base + j, base + j + 1)
            sv = scales[t, b]
            for i in range(rows):
                p, a = part[i], acc[i]
                for r in range(tile):
                    a[r] += half_to_float(sv[r]) * p[r]
        _store(acc, y, t, accumulate)


@compiled(parallel=True)
def q4_halves(scales, mins, min_factor, qs, x, y, accumulate):  # pragma: no cover - compiled
    """q4_tiles over every tile, in two halves on numba's two threads (one parallel region)."""
    mid = (qs.shape[0] + 1) // 2
    for half in numba.prange(2):
        q4_tiles(scales, mins, min_factor, qs, x, y, half * mid, min(qs.shape[0], (half + 1) * mid), accumulate)


@compiled(parallel=True)
def q8_0_halves(scales, mins, min_factor, qs, x, y, accumulate):  # pragma: no cover - compiled
    mid = (qs.shape[0] + 1) // 2
    for half in numba.prange(2):
        q8_0_tiles(scales, mins, min_factor, qs, x, y, half * mid, min(qs.shape[0], (half + 1) * mid), accumulate)
