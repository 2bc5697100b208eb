"""ONNX's quantization operators as stitch ops: DequantizeLinear, QuantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul (default domain) and com.microsoft's GatherBlockQuantized. What onnxruntime
1.32 computes for each is in docs/reference/quantized-onnx.md; how they translate, in
docs/explanation/onnx-import.md#quantized-operators. (com.microsoft MatMulNBits is onnx_quantized.py's.)

- A quantized weight stays what the model stores. A u8/i8 initializer is a u8/i8 weight; an int4/uint4
  initializer (ONNX packs two a byte, the first in the low nibble) is a u8 weight of its packed bytes,
  each element read as `bitand(shr(byte, shift), 15)` with the shift from an iota's parity (int4 then
  `bitxor(n, 8)`, the level plus 8, whose 8 the zero point's cancels). The dequantized value is
  `mul(sub(cast(q, f32), zero), scale)` with the zero point and scale laid over the data by reshape,
  broadcast_to and slice: every step injective, so it fuses into its reader and no float copy of the
  weight is written (the form targets/c/nibble_dot.py recognizes in a one-row product).
- Rounding half to even, which the IR has no op for, is `sub(add(v, 1.5 * 2**23), 1.5 * 2**23)` in f32
  on v clamped to [-1024, 1024] first: there every sum lies in [2**23, 2**24), whose spacing is 1, so
  the addition rounds v to an integer ties-to-even and the subtraction is exact (no rewrite rule
  cancels the pair, and the C is compiled without contraction or -ffast-math). Beyond +-1024 every
  8-bit result saturates whatever the zero point. NaN takes the clamp's low end (a `where` on
  `greater`, false for NaN), so it saturates to the type's minimum, as onnxruntime's does.
- The ops are never evaluated at import time (onnx_ops.py lists them in NOT_FOLDED): a DequantizeLinear
  of initializers would otherwise become a float weight of the dequantized size.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from ..engine.ir.program import FLOAT_DTYPES
from .onnx_builder import ONNX_DTYPES, Builder, Known, Node, Unsupported, Value, invalid, normal_axis
from .onnx_math import cast

ROUNDER = 12582912.0  # 1.5 * 2**23
CLAMP = 1024.0
RANGES = {"u8": (0, 255), "i8": (-128, 127)}
# the ml_dtypes onnx reads INT4, UINT4, INT2, UINT2 tensors as: (bits, signed)
PACKED = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}
LEVEL_DTYPES = ("u8", "i8", "i32")

_packed_of: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # a 4- or 2-bit Known -> its bytes' Known


def const(value) -> Known:
    return Known(np.asarray(value))


def known_scalar(v: Value | None):
    """The one number a known one-element value holds (int4 included), else None."""
    if isinstance(v, Known) and v.array.size == 1:
        x = v.array.reshape(-1)[0]
        return int(x.astype(np.int32)) if v.array.dtype.name in PACKED or v.array.dtype.kind in "iu" else float(x)
    return None


def dtype_name(b: Builder, v: Value) -> str:
    """The stitch dtype of a value, or the ml_dtypes name of a known 4- or 2-bit one (int4, uint2, ...)."""
    if isinstance(v, Known) and v.array.dtype.name in PACKED:
        return v.array.dtype.name
    return b.type_of(v).dtype


def onnx_type_name(elem_type: int) -> str:
    from onnx import TensorProto

    return TensorProto.DataType.Name(elem_type).lower() if elem_type in TensorProto.DataType.values() else \
        f"type {elem_type}"


def shape_of(b: Builder, v: Value) -> tuple:
    if isinstance(v, Known):
        return tuple(v.array.shape)
    return tuple(b.type_of(v).shape)


# -- packed values -----------------------------------------------------------------------------------------


def packed_bytes(v: Known) -> Known:
    """A known int4/uint4 (int2/uint2) tensor as ONNX stores it: its elements in order, 8 // bits a byte,
    the first in the lowest bits (the last byte's unused bits 0); one Known per tensor, so a weight read
    by several nodes is one parameter."""
    if v not in _packed_of:
        bits = PACKED[v.array.dtype.name][0]
        per = 8 // bits
        flat = v.array.reshape(-1).astype(np.int32) & ((1 << bits) - 1)
        flat = np.append(flat, np.zeros(-flat.size % per, np.int32))
        data = sum(flat[k::per] << (k * bits) for k in range(per)).astype(np.uint8)
        _packed_of[v] = Known(data, param=v.param, name=v.name)
    return _packed_of[v]


def unpack(b: Builder, packed: Value, shape: tuple, bits: int, hint: str) -> Value:
    """u8 bytes holding 8 // bits values each, the lowest bits first, as a u8 tensor of `shape`, one value
    an element: `bitand(shr(byte, shift), mask)`, the byte repeated by broadcast_to and the shift the
    position's remainder times `bits` (an iota). Along the last axis when its length is a whole number of
    bytes (each row its own bytes), else over the flattened tensor."""
    per = 8 // bits
    total = math.prod(shape)
    if shape and shape[-1] % per == 0:
        lead, n = tuple(shape[:-1]), shape[-1] // per
        wide = b.op("reshape", [packed], hint, shape=lead + (n, 1))
        wide = b.op("broadcast_to", [wide], hint, shape=lead + (n, per))
        wide = b.op("reshape", [wide], hint, shape=tuple(shape))
        # one row of shifts, broadcast over the others (a shared copy of it is one row)
        positions = (1,) * (len(shape) - 1) + (shape[-1],)
    else:
        n = -(-total // per)
        wide = b.op("reshape", [packed], hint, shape=(n, 1))
        wide = b.op("broadcast_to", [wide], hint, shape=(n, per))
        wide = b.op("reshape", [wide], hint, shape=(n * per,))
        if n * per != total:
            wide = b.emit("slice", [wide], hint, axes=(0,), starts=(0,), ends=(total,))
        positions = (total,)
    position = b.op("iota", [], hint, shape=positions, axis=len(positions) - 1, dtype="i32")
    shift = b.op("cast", [b.op("mul", [b.op("bitand", [position, const(per - 1)], hint), const(bits)], hint)], hint,
                 dtype="u8")
    q = b.op("bitand", [b.op("shr", [wide, shift], hint), const((1 << bits) - 1)], hint)
    if b.type_of(q).shape != tuple(shape):
        q = b.op("reshape", [q], hint, shape=tuple(shape))
    return q


def levels(b: Builder, v: Value, hint: str) -> tuple[Value, int]:
    """An integer tensor as (a u8, i8 or i32 program value, an offset): each element's value is the first
    minus the second. 4- and 2-bit initializers are read from their packed bytes; the signed ones as
    `bitxor(n, 8)`, the value plus 8 (offset 8; int2: `bitxor(n, 2)`, offset 2), which keeps every term
    of a dequantization a small non-negative integer."""
    name = dtype_name(b, v)
    if name in PACKED:
        bits, signed = PACKED[name]
        q = unpack(b, packed_bytes(v), tuple(v.array.shape), bits, hint)
        half = 1 << (bits - 1)
        return (b.op("bitxor", [q, const(half)], hint), half) if signed else (q, 0)
    if name not in LEVEL_DTYPES:
        raise Unsupported("dtype", f"quantized data of dtype {name} (stitch reads uint8, int8, int32, and int4, uint4, "
                                   "int2, uint2 initializers)")
    return v, 0


# -- parameters laid over the data ---------------------------------------------------------------------------


def spread(b: Builder, p: Value, shape: tuple, axis: int, block: int, what: str, hint: str) -> Value:
    """A scale or zero point over data of `shape`: one element (per tensor: a scalar), 1-D along `axis`
    (reshaped to broadcast), or with `block` > 0 of the data's rank with ceil(d / block) along `axis`
    (each repeated `block` times by reshape and broadcast_to, cut to d by a slice when the last block is
    partial): an index map into the parameter, never a copy of the data's size."""
    pshape = shape_of(b, p)
    if block == 0 and math.prod(pshape) == 1:
        if isinstance(p, Known):
            return Known(p.array.reshape(()), param=p.param, name=p.name)
        return b.op("reshape", [p], hint, shape=()) if pshape else p
    if block == 0:
        if pshape != (shape[axis],):
            raise invalid(f"the {what} must be a scalar or 1-D of {shape[axis]} (axis {axis} of {list(shape)}), "
                          f"got shape {list(pshape)}")
        if len(shape) == 1:
            return p
        return b.op("reshape", [p], hint, shape=tuple(shape[axis] if k == axis else 1 for k in range(len(shape))))
    d = shape[axis]
    nb = -(-d // block)
    if pshape != tuple(shape[:axis]) + (nb,) + tuple(shape[axis + 1:]):
        raise invalid(f"with block_size {block} on axis {axis} of {list(shape)} the {what} must have shape "
                      f"{list(shape[:axis]) + [nb] + list(shape[axis + 1:])}, got {list(pshape)}")
    if nb == d:  # blocks of one element: the parameter as it is
        return p
    head, tail = tuple(shape[:axis]), tuple(shape[axis + 1:])
    t = b.op("reshape", [p], hint, shape=head + (nb, 1) + tail)
    t = b.op("broadcast_to", [t], hint, shape=head + (nb, block) + tail)
    t = b.op("reshape", [t], hint, shape=head + (nb * block,) + tail)
    if nb * block != d:
        t = b.emit("slice", [t], hint, axes=(axis,), starts=(0,), ends=(d,))
    return t


def zero_term(b: Builder, zero: Value | None, offset: int, dtype: str, shape: tuple, axis: int, block: int,
              hint: str) -> Value | None:
    """What a dequantization subtracts from cast(level): the zero point (0 when absent) plus the level's
    offset, in `dtype`: a literal when known and one number, else the zero point's levels laid over the
    data. None when it is 0."""
    if zero is None:
        return const(float(offset)) if offset else None
    scalar = known_scalar(zero)
    if scalar is not None and block == 0:
        return const(float(scalar + offset)) if scalar + offset else None
    if isinstance(zero, Known) and block == 0 and not np.any(zero.array.astype(np.int32)) and offset == 0:
        return None  # zero points of 0 (quantize_dynamic's symmetric weights)
    z, z_offset = levels(b, zero, hint)
    z = spread(b, b.op("cast", [z], hint, dtype=dtype), shape, axis, block, "zero point", hint)
    return b.op("add", [z, const(float(offset - z_offset))], hint) if offset != z_offset else z


def dequantize(b: Builder, x: Value, scale: Value, zero: Value | None, axis: int, block: int, hint: str) -> Value:
    """(x - zero) * scale in the scale's dtype, the difference exact: u8, i8 and 4-bit levels are cast
    and the zero point subtracted as floats (integers below 2**11, exact in f16 and f32); i32 levels
    are subtracted as i32 and the difference cast (onnxruntime's order)."""
    dtype = b.type_of(scale).dtype
    if dtype not in FLOAT_DTYPES:
        raise invalid(f"the scale must be a float tensor, got {dtype}")
    if zero is not None and dtype_name(b, zero) != dtype_name(b, x):
        raise invalid(f"the zero point ({dtype_name(b, zero)}) must have the data's type ({dtype_name(b, x)})")
    shape = shape_of(b, x)
    q, offset = levels(b, x, hint)
    if b.type_of(q).dtype == "i32":
        z = zero_term(b, zero, 0, "i32", shape, axis, block, hint)
        diff = b.op("cast", [b.op("sub", [q, z], hint) if z is not None else q], hint, dtype=dtype)
    else:
        z = zero_term(b, zero, offset, dtype, shape, axis, block, hint)
        diff = b.op("cast", [q], hint, dtype=dtype)
        diff = b.op("sub", [diff, z], hint) if z is not None else diff
    return b.op("mul", [diff, spread(b, scale, shape, axis, block, "scale", hint)], hint)


def round_half_even(b: Builder, v: Value, hint: str) -> Value:
    """v (f32) clamped to [-CLAMP, CLAMP] (NaN to -CLAMP) and rounded to an integer, ties to even."""
    v = b.op("where", [b.op("greater", [v, const(-CLAMP)], hint), v, const(-CLAMP)], hint)
    v = b.op("minimum", [v, const(CLAMP)], hint)
    return b.op("sub", [b.op("add", [v, const(ROUNDER)], hint), const(ROUNDER)], hint)


def saturate(b: Builder, v: Value, dtype: str, hint: str) -> Value:
    """An f32 tensor of integers clamped to the range of u8 or i8 and cast (exact)."""
    lo, hi = RANGES[dtype]
    v = b.op("minimum", [b.op("maximum", [v, const(float(lo))], hint), const(float(hi))], hint)
    return b.op("cast", [v], hint, dtype=dtype)


def quantize(b: Builder, x: Value, scale: Value, zero: Value | None, out: str, axis: int, block: int,
             hint: str) -> Value:
    """saturate(round_half_even(x / scale) + zero) as `out` (u8 or i8): a float32 division (onnxruntime
    divides; it does not multiply by 1 / scale), rounded before the zero point is added."""
    shape = shape_of(b, x)
    v = b.op("div", [x, spread(b, scale, shape, axis, block, "scale", hint)], hint)
    r = round_half_even(b, v, hint)
    z = zero_term(b, zero, 0, "f32", shape, axis, block, hint)
    return saturate(b, b.op("add", [r, z], hint) if z is not None else r, out, hint)


# -- the converters ---------------------------------------------------------------------------------------


def block_args(b: Builder, node: Node, x: Value, scale: Value) -> tuple[int, int]:
    """(axis, block_size) of a DequantizeLinear or QuantizeLinear, the axis normalized (ignored, 0, for
    a per-tensor scale: the default axis 1 of a 1-D tensor is no error then)."""
    block = node.attr("block_size", 0)
    if block < 0:
        raise invalid(f"block_size must be 0 or positive, got {block}")
    if block == 0 and math.prod(shape_of(b, scale)) == 1:
        return 0, 0
    return normal_axis(node.attr("axis", 1), len(shape_of(b, x))), block


def convert_dequantize_linear(b, node, ins):
    x, scale = ins[0], ins[1]
    zero = ins[2] if len(ins) > 2 else None
    axis, block = block_args(b, node, x, scale)
    out = node.attr("output_dtype", 0)
    if out and ONNX_DTYPES.get(out) != b.type_of(scale).dtype:
        raise Unsupported("dtype", f"DequantizeLinear with output_dtype {onnx_type_name(out)} other than the "
                                   f"scale's {b.type_of(scale).dtype}")
    return [dequantize(b, x, scale, zero, axis, block, node.out)]


def convert_quantize_linear(b, node, ins):
    x, scale = ins[0], ins[1]
    zero = ins[2] if len(ins) > 2 else None
    if b.type_of(x).dtype not in ("f32", "f16") or b.type_of(scale).dtype not in ("f32", "f16"):
        raise Unsupported("dtype", f"QuantizeLinear of {b.type_of(x).dtype} by a {b.type_of(scale).dtype} scale "
                                   "(stitch quantizes float32 and float16)")
    if node.attr("precision", 0) not in (0, 1):
        raise Unsupported("dtype", "QuantizeLinear with a precision other than the float32 it computes in")
    # onnxruntime divides float16 in float32 (the casts are exact): on 640 random values a float16
    # division gave 12 other levels, a float32 one none
    x, scale = cast(b, x, "f32", node.out), cast(b, scale, "f32", node.out)
    axis, block = block_args(b, node, x, scale)
    attr = node.attr("output_dtype", 0)
    out = dtype_name(b, zero) if zero is not None else (ONNX_DTYPES.get(attr) or onnx_type_name(attr) if attr else "u8")
    if zero is not None and attr and ONNX_DTYPES.get(attr) != out:
        raise invalid(f"output_dtype {attr} differs from the zero point's type {out}")
    if out not in RANGES:
        raise Unsupported("dtype", f"QuantizeLinear to {out} (stitch quantizes to uint8 and int8)")
    return [quantize(b, x, scale, zero, out, axis, block, node.out)]


def convert_dynamic_quantize_linear(b, node, ins):
    """scale = (max(0, max x) - min(0, min x)) / 255 (1 when that is 0), zero point = saturate(round(0 -
    lo / scale)), y = saturate(round(x / scale) + zero point), all in f32: y u8, scale f32[], zero u8[]."""
    x, hint = ins[0], node.out
    if b.type_of(x).dtype != "f32":
        raise invalid(f"DynamicQuantizeLinear takes float32, got {b.type_of(x).dtype}")
    lo = b.op("minimum", [b.op("min", [x], hint), const(0.0)], hint)
    hi = b.op("maximum", [b.op("max", [x], hint), const(0.0)], hint)
    scale = b.op("div", [b.op("sub", [hi, lo], hint), const(255.0)], hint)
    scale = b.op("where", [b.op("equal", [scale, const(0.0)], hint), const(1.0), scale], hint)
    zero = round_half_even(b, b.op("sub", [const(0.0), b.op("div", [lo, scale], hint)], hint), hint)
    zero = b.op("minimum", [b.op("maximum", [zero, const(0.0)], hint), const(255.0)], hint)
    y = saturate(b, b.op("add", [round_half_even(b, b.op("div", [x, scale], hint), hint), zero], hint), "u8", hint)
    return [y, scale, b.op("cast", [zero], hint, dtype="u8")]


def integer_operand(b: Builder, v: Value, zero: Value | None, side: str, hint: str) -> Value:
    """cast(v, i32) minus its zero point (cast first, then subtracted: exact): a's zero point one number or
    one per row, b's one number or one per column."""
    dt = b.type_of(v).dtype
    if dt not in ("u8", "i8"):
        raise Unsupported("dtype", f"an integer product of {dt} (stitch takes uint8 and int8)")
    q = b.op("cast", [v], hint, dtype="i32")
    if zero is None:
        return q
    if b.type_of(zero).dtype != dt:
        raise invalid(f"{side}'s zero point ({b.type_of(zero).dtype}) must have {side}'s type ({dt})")
    scalar = known_scalar(zero)
    if scalar is not None:
        return b.op("sub", [q, const(scalar)], hint) if scalar else q
    shape, zshape = b.type_of(v).shape, b.type_of(zero).shape
    z = b.op("cast", [zero], hint, dtype="i32")
    if math.prod(zshape) == 1:
        z = b.op("reshape", [z], hint, shape=())
    elif side == "a" and zshape == (shape[-2],):
        z = b.op("reshape", [z], hint, shape=(shape[-2], 1))
    elif not (side == "b" and zshape == (shape[-1],)):
        per = "row" if side == "a" else "column"
        raise Unsupported("shape", f"{side}'s zero point of shape {list(zshape)} (stitch takes one, or one per {per})")
    return b.op("sub", [q, z], hint)


def integer_product(b: Builder, ins, hint: str) -> Value:
    a, w = ins[0], ins[1]
    za = ins[2] if len(ins) > 2 else None
    zw = ins[3] if len(ins) > 3 else None
    return b.op("matmul", [integer_operand(b, a, za, "a", hint), integer_operand(b, w, zw, "b", hint)], hint)


def convert_matmul_integer(b, node, ins):
    """matmul(cast(a, i32) - a_zero_point, cast(b, i32) - b_zero_point): exact, wrapping like int32."""
    return [integer_product(b, ins, node.out)]


def convert_qlinear_matmul(b, node, ins):
    """saturate(round_half_even(float(acc) * M) + y_zero_point), acc the exact int32 product and
    M = (a_scale * b_scale) / y_scale in float32 (at import when the scales are known), y of y_zero_point's
    type. a's and y's parameters per tensor; b's per tensor or per column."""
    a, a_scale, a_zero, w, w_scale, w_zero, y_scale, y_zero = ins[:8]
    hint = node.out
    for name, s in (("a_scale", a_scale), ("b_scale", w_scale), ("y_scale", y_scale)):
        if b.type_of(s).dtype != "f32":
            raise Unsupported("dtype", f"QLinearMatMul's {name} of {b.type_of(s).dtype} (stitch takes float32)")
    for name, v in (("a_scale", a_scale), ("a_zero_point", a_zero), ("y_scale", y_scale), ("y_zero_point", y_zero)):
        if b.type_of(v).size != 1:
            raise Unsupported("shape", f"QLinearMatMul's {name} of shape {list(b.type_of(v).shape)} (stitch takes "
                                       "one per tensor)")
    n = b.type_of(w).shape[-1]
    if b.type_of(w_scale).size not in (1, n) or b.type_of(w_scale).rank > 1:
        raise Unsupported("shape", f"QLinearMatMul's b_scale of shape {list(b.type_of(w_scale).shape)} (stitch takes "
                                   "one, or one per column)")
    out = b.type_of(y_zero).dtype
    if out not in RANGES:
        raise invalid(f"QLinearMatMul's y_zero_point must be uint8 or int8, got {out}")
    acc = b.op("cast", [integer_product(b, [a, w, a_zero, w_zero], hint)], hint, dtype="f32")
    if all(isinstance(s, Known) for s in (a_scale, w_scale, y_scale)):
        ws = w_scale.array.astype(np.float32).reshape(-1)
        m = (np.float32(a_scale.array.reshape(-1)[0]) * ws / np.float32(y_scale.array.reshape(-1)[0]))
        multiplier: Value = Known(m.astype(np.float32).reshape(() if m.size == 1 else (n,)), name=f"{hint}_multiplier")
    else:
        ws = w_scale if b.type_of(w_scale).size == n and n > 1 else spread(b, w_scale, (n,), 0, 0, "b_scale", hint)
        product = b.op("mul", [spread(b, a_scale, (n,), 0, 0, "a_scale", hint), ws], hint)
        multiplier = b.op("div", [product, spread(b, y_scale, (n,), 0, 0, "y_scale", hint)], hint)
    r = round_half_even(b, b.op("mul", [acc, multiplier], hint), hint)
    zy = known_scalar(y_zero)
    if zy is None:
        z = b.op("cast", [b.op("reshape", [y_zero], hint, shape=())], hint, dtype="f32")
        r = b.op("add", [r, z], hint)
    elif zy:
        r = b.op("add", [r, const(float(zy))], hint)
    return [saturate(b, r, out, hint)]


def convert_gather_block_quantized(b, node, ins):
    """com.microsoft GatherBlockQuantized: the packed rows gathered (u8 bytes: int4/uint4 tables as
    ONNX packs them, uint8 ones with `bits` 2, 4 or 8 levels a byte along the last axis), then unpacked
    and dequantized in blocks along the last axis with the gathered rows of scales and zero points.
    The zero point defaults to 0 for int4/uint4 and 2**(bits - 1) for uint8. An index outside [-rows,
    rows) gives a row of zeros, as onnxruntime's does (it is read at row 0 and replaced)."""
    data, idx, scales = ins[0], ins[1], ins[2]
    zero = ins[3] if len(ins) > 3 else None
    hint = node.out
    name = dtype_name(b, data)
    shape = shape_of(b, data)
    rank = len(shape)
    gather_axis = normal_axis(node.attr("gather_axis", 0), rank, "gather_axis")
    quantize_axis = normal_axis(node.attr("quantize_axis", 1), rank, "quantize_axis")
    block, bits = node.attr("block_size", 128), node.attr("bits", 4)
    if gather_axis != 0 or quantize_axis != rank - 1 or rank < 2:
        raise Unsupported("op", f"GatherBlockQuantized with gather_axis {gather_axis} and quantize_axis {quantize_axis}"
                                f" of a rank-{rank} table (stitch takes 0 and the last axis)")
    if block < 16 or block & (block - 1):
        raise invalid(f"GatherBlockQuantized's block_size must be a power of 2, at least 16, got {block}")
    if name in ("int4", "uint4"):
        bits, signed = PACKED[name]
        if shape[-1] % 2:
            raise Unsupported("shape", f"a {name} table of odd rows {list(shape)} (its rows do not start a byte)")
        table = Known(packed_bytes(data).array.reshape(shape[:-1] + (shape[-1] // 2,)),
                      param=data.param, name=data.name)
        full = tuple(shape)
        default_zero = 0
    elif name == "u8":
        if bits not in (2, 4, 8):
            raise invalid(f"GatherBlockQuantized's bits must be 2, 4 or 8, got {bits}")
        signed, table = False, data
        full = tuple(shape[:-1]) + (shape[-1] * (8 // bits),)
        default_zero = 1 << (bits - 1)
    else:
        raise Unsupported("dtype", f"GatherBlockQuantized of {name} data (stitch takes int4, uint4 and uint8)")
    it = b.type_of(idx)
    if it.dtype not in ("i32", "i64"):
        raise invalid(f"GatherBlockQuantized's indices must be int32 or int64, got {it.dtype}")
    rows = shape[0]
    dt = b.type_of(scales).dtype
    if dt not in FLOAT_DTYPES:
        raise invalid(f"GatherBlockQuantized's scales must be float, got {dt}")
    nb = -(-full[-1] // block)
    if shape_of(b, scales) != full[:-1] + (nb,):
        raise invalid(f"GatherBlockQuantized's scales must have shape {list(full[:-1]) + [nb]}, got "
                      f"{list(shape_of(b, scales))}")
    valid = b.op("where", [b.op("less", [idx, const(rows)], hint), b.op("greater", [idx, const(-rows - 1)], hint),
                           const(False)], hint)
    safe = b.op("where", [valid, idx, const(0)], hint)
    out = tuple(it.shape) + full[1:]
    picked = b.emit("gather", [table, safe], hint, axis=0)
    q = picked if bits == 8 else unpack(b, picked, out, bits, hint)
    offset = 0
    if signed:
        q, offset = b.op("bitxor", [q, const(8)], hint), 8
    level = b.op("cast", [q], hint, dtype=dt)
    last = len(out) - 1
    if zero is None:
        z = const(float(default_zero + offset)) if default_zero + offset else None
    else:
        if dtype_name(b, zero) != name:
            raise invalid(f"GatherBlockQuantized's zero points ({dtype_name(b, zero)}) must have the data's type")
        zq, z_offset = levels(b, zero, hint)
        if name == "u8" and bits != 8:  # packed like the data, each row's own bytes
            zshape = shape_of(b, zero)
            if zshape != full[:-1] + (-(-nb // (8 // bits)),):
                raise invalid(f"GatherBlockQuantized's zero points must have shape "
                              f"{list(full[:-1]) + [-(-nb // (8 // bits))]}, got {list(zshape)}")
            zq = b.emit("gather", [zq, safe], hint, axis=0)
            zq = unpack(b, zq, tuple(it.shape) + full[1:-1] + (zshape[-1] * (8 // bits),), bits, hint)
            if zshape[-1] * (8 // bits) != nb:
                zq = b.emit("slice", [zq], hint, axes=(last,), starts=(0,), ends=(nb,))
        else:
            if shape_of(b, zero) != full[:-1] + (nb,):
                raise invalid(f"GatherBlockQuantized's zero points must have shape {list(full[:-1]) + [nb]}, got "
                              f"{list(shape_of(b, zero))}")
            zq = b.emit("gather", [zq, safe], hint, axis=0)
        z = spread(b, b.op("cast", [zq], hint, dtype=dt), out, last, block, "zero point", hint)
        if offset != z_offset:
            z = b.op("add", [z, const(float(offset - z_offset))], hint)
    diff = b.op("sub", [level, z], hint) if z is not None else level
    s = spread(b, b.emit("gather", [scales, safe], hint, axis=0), out, last, block, "scale", hint)
    y = b.op("mul", [diff, s], hint)
    keep = b.op("reshape", [valid], hint, shape=tuple(it.shape) + (1,) * (len(out) - it.rank))
    return [b.op("where", [keep, y, const(0.0)], hint)]


QUANT_CONVERTERS = {
    "DequantizeLinear": convert_dequantize_linear,
    "QuantizeLinear": convert_quantize_linear,
    "DynamicQuantizeLinear": convert_dynamic_quantize_linear,
    "MatMulInteger": convert_matmul_integer,
    "QLinearMatMul": convert_qlinear_matmul,
}

QUANT_MICROSOFT_CONVERTERS = {"GatherBlockQuantized": convert_gather_block_quantized}
