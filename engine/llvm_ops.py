"""Scalar conversions numba has no spelling for, written as LLVM instructions so that loops using them vectorize.

numba has no float16 type on the CPU and widens every integer operation to 64 bits, so a loop that unpacks 4-bit
weights or 16-bit floats in plain numba code runs on 64-bit lanes or not vectorized at all. Each helper here is one
or two LLVM instructions on the narrow types (``fpext half``, ``and i8``, ``uitofp i8``), which the compiler turns
into the vector forms (``vcvtph2ps``, byte masks and shifts, ``vcvtdq2ps``) when the loop around it vectorizes.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

_F32 = ir.FloatType()
_I8 = ir.IntType(8)
_I32 = ir.IntType(32)


@intrinsic
def half_to_float(typingctx, bits):
    """float32 of the IEEE half whose bits are ``bits`` (uint16), exactly (subnormals, inf and NaN included)."""
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), _F32)
    return types.float32(types.uint16), codegen


@intrinsic
def bfloat_to_float(typingctx, bits):
    """float32 of the bfloat16 whose bits are ``bits`` (uint16): its bits shifted into a float32's high half."""
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        wide = builder.shl(builder.zext(args[0], _I32), ir.Constant(_I32, 16))
        return builder.bitcast(wide, _F32)
    return types.float32(types.uint16), codegen


@intrinsic
def low_nibble(typingctx, byte):
    """float32 of the low 4 bits of ``byte`` (uint8)."""
    if byte != types.uint8:
        return None

    def codegen(context, builder, signature, args):
        return builder.uitofp(builder.and_(args[0], ir.Constant(_I8, 15)), _F32)
    return types.float32(types.uint8), codegen


@intrinsic
def high_nibble(typingctx, byte):
    """float32 of the high 4 bits of ``byte`` (uint8)."""
    if byte != types.uint8:
        return None

    def codegen(context, builder, signature, args):
        return builder.uitofp(builder.lshr(args[0], ir.Constant(_I8, 4)), _F32)
    return types.float32(types.uint8), codegen


@intrinsic
def signed_byte(typingctx, byte):
    """float32 of ``byte`` (int8), without numba's detour through int64."""
    if byte != types.int8:
        return None

    def codegen(context, builder, signature, args):
        return builder.sitofp(args[0], _F32)
    return types.float32(types.int8), codegen


def widen(value, bfloat16):  # pragma: no cover - replaced by the overload below inside compiled code
    """float32 of a KV element: a float32 as it is; a uint16 as the bfloat16 (``bfloat16`` true) or the IEEE half
    whose bits it is. For compiled code only."""
    raise NotImplementedError("widen is for compiled code")


@overload(widen, inline="always")
def _widen(value, bfloat16):
    if value == types.float32:
        return lambda value, bfloat16: value
    if value == types.uint16:
        return lambda value, bfloat16: bfloat_to_float(value) if bfloat16 else half_to_float(value)
    return None
