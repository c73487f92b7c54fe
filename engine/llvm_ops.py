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


def _unary(argument, result, build, doc: str):
    """An intrinsic of one ``argument``-typed value giving ``result``, its body ``build(builder, value)``."""
    def typer(typingctx, value):
        if value != argument:
            return None

        def codegen(context, builder, signature, args):
            return build(builder, args[0])
        return result(argument), codegen
    typer.__doc__ = doc
    return intrinsic(typer)


half_to_float = _unary(types.uint16, types.float32, lambda b, v: b.fpext(b.bitcast(v, ir.HalfType()), _F32),
                       "float32 of the IEEE half whose bits are ``bits`` (uint16), exactly (subnormals, inf, NaN).")
bfloat_to_float = _unary(
    types.uint16, types.float32, lambda b, v: b.bitcast(b.shl(b.zext(v, _I32), ir.Constant(_I32, 16)), _F32),
    "float32 of the bfloat16 whose bits are ``bits`` (uint16): its bits shifted into a float32's high half.")
low_nibble = _unary(types.uint8, types.float32, lambda b, v: b.uitofp(b.and_(v, ir.Constant(_I8, 15)), _F32),
                    "float32 of the low 4 bits of a uint8.")
high_nibble = _unary(types.uint8, types.float32, lambda b, v: b.uitofp(b.lshr(v, ir.Constant(_I8, 4)), _F32),
                     "float32 of the high 4 bits of a uint8.")
signed_byte = _unary(types.int8, types.float32, lambda b, v: b.sitofp(v, _F32),
                     "float32 of an int8, without numba's detour through int64.")


def widen(value, bfloat16):  # pragma: no cover - replaced by the overload below inside compiled code
    """float32 of a KV element: a float32 as it is; a uint16 as the bfloat16 (``bfloat16`` true) or the IEEE half
    whose bits it is. For compiled code only."""
    raise NotImplementedError("widen is for compiled code")


@overload(widen)
def _widen(value, bfloat16):
    if value == types.float32:
        return lambda value, bfloat16: value
    if value == types.uint16:
        def from_bits(value, bfloat16):
            if bfloat16:
                return bfloat_to_float(value)
            return half_to_float(value)
        return from_bits
    return None


@intrinsic
def bits_to_float(typingctx, bits):
    """The float32 whose bits are the low 32 bits of ``bits`` (an integer: numba widens int32 arithmetic)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        value = args[0]
        if bits.bitwidth > 32:
            value = builder.trunc(value, _I32)
        elif bits.bitwidth < 32:
            value = builder.zext(value, _I32)
        return builder.bitcast(value, _F32)
    return types.float32(bits), codegen


@intrinsic
def float_to_half(typingctx, value):
    """The bits (uint16) of the IEEE half nearest to ``value`` (float32), ties to even, as numpy's cast."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
    return types.uint16(types.float32), codegen


@intrinsic
def float_to_bfloat(typingctx, value):
    """The bits (uint16) of the bfloat16 nearest to ``value`` (float32), ties to even; NaN stays a (quiet) NaN."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        bits = builder.bitcast(args[0], _I32)
        odd = builder.and_(builder.lshr(bits, ir.Constant(_I32, 16)), ir.Constant(_I32, 1))
        rounded = builder.add(builder.add(bits, ir.Constant(_I32, 0x7FFF)), odd)
        is_nan = builder.fcmp_unordered("uno", args[0], args[0])
        chosen = builder.select(is_nan, builder.or_(bits, ir.Constant(_I32, 0x00400000)), rounded)
        return builder.trunc(builder.lshr(chosen, ir.Constant(_I32, 16)), ir.IntType(16))
    return types.uint16(types.float32), codegen


def narrow(value, bfloat16, like):  # pragma: no cover - replaced by the overload below inside compiled code
    """``value`` (float32) as an element of an array whose elements are like ``like``: float32 as it is, uint16 as
    the bits of the nearest bfloat16 (``bfloat16``) or IEEE half. For compiled code only."""
    raise NotImplementedError("narrow is for compiled code")


@overload(narrow)
def _narrow(value, bfloat16, like):
    if like == types.float32:
        return lambda value, bfloat16, like: value
    if like == types.uint16:
        def to_bits(value, bfloat16, like):
            if bfloat16:
                return float_to_bfloat(value)
            return float_to_half(value)
        return to_bits
    return None
