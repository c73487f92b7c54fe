"""The KV cache's element types: float32 (the default), float16 and bfloat16, kept as such in memory, in the
kvstore and on the wire; attention widens them to float32 as it reads them.

numpy has float16 but no bfloat16, and numba neither: bfloat16 arrays are ml_dtypes' ``bfloat16`` (numpy's casts,
rounding to nearest even), and the compiled attention loops read the 16-bit types as integer views, float16 as
``uint16`` and bfloat16 as ``int16``, which engine/llvm_ops.py widens by type (a compiled loop per cache type, no
branch inside).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

DEFAULT_KV_DTYPE = "float32"
KV_DTYPES = {
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}


def kv_numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a KV dtype name; ValueError naming the choices for any other name."""
    try:
        return KV_DTYPES[name]
    except KeyError:
        raise ValueError(f"KV dtype {name!r}: one of {', '.join(KV_DTYPES)}") from None


def kernel_view(array: np.ndarray) -> np.ndarray:
    """What the compiled kernels read: a float32 array as it is, float16 as its ``uint16`` bits, bfloat16 as its
    ``int16`` bits."""
    if array.dtype == np.float32:
        return array
    return array.view(np.int16 if array.dtype == KV_DTYPES["bfloat16"] else np.uint16)
