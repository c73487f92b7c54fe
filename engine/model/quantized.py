"""Weight matrices kept in GGUF's block-quantized form (Q4_0, Q4_1, Q8_0) and multiplied as they are.

A decode step at a small batch reads every weight once and does little arithmetic with it, so its time is the bytes
it reads: SmolLM2's Q4_1 layers and Q8_0 head are 96 MB quantized and 540 MB as float32. :class:`QuantizedMatrix`
keeps a matrix's blocks (repacked into row tiles, engine/model/kernels/quant.py) and multiplies float32 activations with
them directly. The model keeps the float32 matrices as well, for batches large enough that BLAS's arithmetic
throughput wins over bytes (engine/model/crossover.py measures where).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType

from pdserve.engine.model.kernels import quant as kernels

BLOCK = 32  # weights per block in each of the supported types
MAX_TILE_ROWS = 512  # rows per tile: long enough vector loops, partial sums that stay in the first-level cache


@dataclass(frozen=True)
class BlockFormat:
    nbytes: int  # bytes per block on disk
    data_bytes: int  # of which weight bytes (after the float16 scale, and the float16 minimum where there is one)
    has_min: bool
    min_factor: float  # a block's minimum is min_factor x its minimum field (Q4_1), or x its scale (Q4_0: -8)
    serial: Callable  # kernel over a range of tiles
    halves: Callable  # the same over every tile, on two threads


FORMATS = {
    GGMLQuantizationType.Q4_0: BlockFormat(18, 16, False, -8.0, kernels.q4_tiles, kernels.q4_halves),
    GGMLQuantizationType.Q4_1: BlockFormat(20, 16, True, 1.0, kernels.q4_tiles, kernels.q4_halves),
    GGMLQuantizationType.Q8_0: BlockFormat(34, 32, False, 0.0, kernels.q8_0_tiles, kernels.q8_0_halves),
}


def tile_rows(rows: int) -> int:
    """Rows per tile for a matrix of ``rows`` rows (padded to a multiple of 16): the largest multiple of 16 up to
    MAX_TILE_ROWS that divides them into an even number of tiles (two threads take half each), else the largest that
    divides them."""
    padded = -(-rows // 16) * 16
    dividing = [t for t in range(16, min(MAX_TILE_ROWS, padded) + 1, 16) if padded % t == 0]
    even = [t for t in dividing if (padded // t) % 2 == 0]
    return (even or dividing)[-1]


class QuantizedMatrix:
    """A ``[out, in]`` matrix of GGUF blocks; ``matrix(x)`` is ``x @ W.T`` for float32 activations ``x [M, in]``."""

    def __init__(self, blocks: np.ndarray, qtype: GGMLQuantizationType, inputs: int) -> None:
        """``blocks``: the tensor's raw bytes, ``[out, in / 32 * block bytes]`` uint8 (GGUF's layout)."""
        fmt = FORMATS[qtype]
        if inputs % BLOCK or blocks.shape[1] != inputs // BLOCK * fmt.nbytes:
            raise ValueError(f"{qtype.name} blocks of shape {blocks.shape} do not hold {inputs} inputs a row")
        self.qtype, self.format = qtype, fmt
        self.out, self.inputs = blocks.shape[0], inputs
        tile = tile_rows(self.out)
        padded = -(-self.out // tile) * tile
        nb = inputs // BLOCK
        raw = np.zeros((padded, nb, fmt.nbytes), dtype=np.uint8)  # padding rows: scale 0, so they compute 0
        raw[:self.out] = np.asarray(blocks).reshape(self.out, nb, fmt.nbytes)
        raw = raw.reshape(padded // tile, tile, nb, fmt.nbytes)

        def half_field(offset: int) -> np.ndarray:  # [tiles, nb, tile] float16 bits
            return np.ascontiguousarray(raw[..., offset:offset + 2].transpose(0, 2, 1, 3)).view(np.uint16)[..., 0]

        self.scales = np.ascontiguousarray(half_field(0))
        self.mins = np.ascontiguousarray(half_field(2)) if fmt.has_min else self.scales  # Q4_0: -8 x the scale
        data = raw[..., fmt.nbytes - fmt.data_bytes:].transpose(0, 2, 3, 1)  # [tiles, nb, bytes, tile]
        self.qs = np.ascontiguousarray(data.view(np.int8) if qtype == GGMLQuantizationType.Q8_0 else data)

    @property
    def nbytes(self) -> int:
        """Bytes one product reads: the weight bytes and their scales (and minimums)."""
        return self.qs.nbytes + self.scales.nbytes + (self.mins.nbytes if self.format.has_min else 0)

    @property
    def splits(self) -> bool:
        """Whether the product has two halves to run on two threads (more than one tile)."""
        return self.qs.shape[0] > 1

    def __call__(self, x: np.ndarray, into: np.ndarray | None = None, threads: int = 1) -> np.ndarray:
        """``x @ W.T`` as float32 ``[M, out]``; with ``into`` (float32 ``[M, out]``, C-contiguous) the product is
        added to it in place and it is returned. ``threads`` 2: the tiles in two halves on two threads."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        y = into if into is not None else np.empty((x.shape[0], self.out), dtype=np.float32)
        args = (self.scales, self.mins, np.float32(self.format.min_factor), self.qs, x, y)
        if threads > 1 and self.splits:
            self.format.halves(*args, into is not None)
        else:
            self.format.serial(*args, 0, self.qs.shape[0], into is not None)
        return y


def quantizable(qtype: GGMLQuantizationType) -> bool:
    return qtype in FORMATS


def stacked(parts: list[tuple[np.ndarray, GGMLQuantizationType, int]]) -> QuantizedMatrix | None:
    """One matrix of several tensors' rows (Q, K, V; gate, up) when they share a supported type, else None."""
    qtypes = {qtype for _, qtype, _ in parts}
    inputs = {n for _, _, n in parts}
    if len(qtypes) != 1 or len(inputs) != 1 or not quantizable(next(iter(qtypes))):
        return None
    return QuantizedMatrix(np.concatenate([np.asarray(b) for b, _, _ in parts]), qtypes.pop(), inputs.pop())


@dataclass
class QuantizedLayer:
    """One layer's matrices in quantized form (None: that matrix's type has no kernel; its float32 form is used) and
    the norm gains that the float32 matrices have folded in, which the quantized ones need applied to their input."""

    qkv: QuantizedMatrix | None
    wo: QuantizedMatrix | None
    gate_up: QuantizedMatrix | None
    down: QuantizedMatrix | None
    attn_norm: np.ndarray
    ffn_norm: np.ndarray

    def matrices(self) -> list[QuantizedMatrix]:
        return [m for m in (self.qkv, self.wo, self.gate_up, self.down) if m is not None]


@dataclass
class QuantizedWeights:
    layers: list[QuantizedLayer]
    output: QuantizedMatrix | None  # the head ([vocab, hidden]: the embedding's blocks when tied)

    @property
    def nbytes(self) -> int:
        return sum(m.nbytes for layer in self.layers for m in layer.matrices()) + (
            self.output.nbytes if self.output is not None else 0)

    @property
    def empty(self) -> bool:
        return self.output is None and not any(layer.matrices() for layer in self.layers)
