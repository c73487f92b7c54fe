"""The KV cache's element types: float32 (the default), float16 and bfloat16, kept as such in memory, in the
kvstore and on the wire; attention widens them to float32 as it reads them.

numpy has float16 but no bfloat16, and numba neither: bfloat16 arrays are ml_dtypes' ``bfloat16`` (numpy's casts,
rounding to nearest even), and the compiled attention loops read the 16-bit types as integer views, float16 as
``uint16`` and bfloat16 as ``int16``, which engine/model/kernels/llvm_ops.py widens by type (a compiled loop per cache type, no
branch inside). ml_dtypes is imported only when a bfloat16 cache is asked for: its import costs about 0.7 s of CPU,
which every service process paid at start before (most run float32).
"""

from __future__ import annotations

import functools

import numpy as np

DEFAULT_KV_DTYPE = "float32"
KV_DTYPES = ("float32", "float16", "bfloat16")  # the names a --kv-dtype takes


@functools.cache
def kv_numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a KV dtype name; ValueError naming the choices for any other name."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if name not in KV_DTYPES:
        raise ValueError(f"KV dtype {name!r}: one of {', '.join(KV_DTYPES)}")
    return np.dtype("<f4" if name == "float32" else "<f2")


def kernel_view(array: np.ndarray) -> np.ndarray:
    """What the compiled kernels read: a float32 array as it is, float16 as its ``uint16`` bits, bfloat16 as its
    ``int16`` bits."""
    if array.dtype == np.float32:
        return array
    return array.view(np.uint16 if array.dtype == np.float16 else np.int16)


_EXPONENT_BITS = {"float16": 0x7C00, "bfloat16": 0x7F80}  # all ones: inf or NaN, by dtype name


def all_finite(array: np.ndarray) -> bool:
    """No inf or NaN in ``array``; for a 16-bit one a test of its exponent bits (numpy's float16 isfinite converts
    each element in software: 255 us against 28 for a float32 block twice the size, measured)."""
    mask = _EXPONENT_BITS.get(array.dtype.name)
    if mask is None:
        return bool(np.isfinite(array).all())
    return not bool((np.bitwise_and(array.view(np.uint16), mask) == mask).any())
