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
    types.int16, types.float32, lambda b, v: b.bitcast(b.shl(b.zext(v, _I32), ir.Constant(_I32, 16)), _F32),
    "float32 of the bfloat16 whose bits are ``bits`` (int16, the kernels' mark of bfloat16): its bits shifted into "
    "a float32's high half.")
low_nibble = _unary(types.uint8, types.float32, lambda b, v: b.uitofp(b.and_(v, ir.Constant(_I8, 15)), _F32),
                    "float32 of the low 4 bits of a uint8.")
high_nibble = _unary(types.uint8, types.float32, lambda b, v: b.uitofp(b.lshr(v, ir.Constant(_I8, 4)), _F32),
                     "float32 of the high 4 bits of a uint8.")
signed_byte = _unary(types.int8, types.float32, lambda b, v: b.sitofp(v, _F32),
                     "float32 of an int8, without numba's detour through int64.")


def widen(value):  # pragma: no cover - replaced by the overload below inside compiled code
    """float32 of a KV element as the kernels see it (engine/kv/dtype.py's kernel_view): a float32 as it is, a
    uint16 as the IEEE half and an int16 as the bfloat16 whose bits it is. Chosen by type when compiled, so a loop
    over one cache has no branch in it. For compiled code only."""
    raise NotImplementedError("widen is for compiled code")


@overload(widen)
def _widen(value):
    if value == types.float32:
        return lambda value: value
    if value == types.uint16:
        return lambda value: half_to_float(value)
    if value == types.int16:
        return lambda value: bfloat_to_float(value)
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
    """The bits (int16, the kernels' mark of bfloat16) of the bfloat16 nearest to ``value`` (float32), ties to even;
    NaN stays a (quiet) NaN."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        bits = builder.bitcast(args[0], _I32)
        odd = builder.and_(builder.lshr(bits, ir.Constant(_I32, 16)), ir.Constant(_I32, 1))
        rounded = builder.add(builder.add(bits, ir.Constant(_I32, 0x7FFF)), odd)
        is_nan = builder.fcmp_unordered("uno", args[0], args[0])
        chosen = builder.select(is_nan, builder.or_(bits, ir.Constant(_I32, 0x00400000)), rounded)
        return builder.trunc(builder.lshr(chosen, ir.Constant(_I32, 16)), ir.IntType(16))
    return types.int16(types.float32), codegen


def narrow(value, like):  # pragma: no cover - replaced by the overload below inside compiled code
    """``value`` (float32) as an element of a cache whose elements are like ``like`` (kernel_view's types): float32
    as it is, the nearest IEEE half's bits (uint16) or bfloat16's (int16). For compiled code only."""
    raise NotImplementedError("narrow is for compiled code")


@overload(narrow)
def _narrow(value, like):
    if like == types.float32:
        return lambda value, like: value
    if like == types.uint16:
        return lambda value, like: float_to_half(value)
    if like == types.int16:
        return lambda value, like: float_to_bfloat(value)
    return None
