"""onnxruntime's `com.microsoft` MatMulNBits: a product whose weight is stored in 4- or 8-bit blocks,
translated into the IR's own ops so that the dequantization is injective code that fuses into the
product reading it (docs/reference/ir.md; targets/c/nibble_dot.py runs the one-row case).

MatMulNBits(A, B, scales, zero_points?, g_idx?, bias?) with attributes K, N, bits, block_size: B is
u8 [N, k_blocks, block_size * bits / 8], column n's K values in order, two 4-bit values a byte with
the low nibble first; scales [N * k_blocks] (or [N, k_blocks]); zero points u8, packed two a byte at
4 bits ([N, ceil(k_blocks / 2)], each column starting a byte), one a byte at 8, or of the scales'
dtype; absent, 2**(bits - 1). Y = A @ W^T with W[n, k] = (q[n, k] - zero[n, k // block]) *
scale[n, k // block] (docs/reference/quantized-onnx.md, measured against onnxruntime 1.32).

The packed bytes stay packed: the program's weight is B itself, and each element is read as
`bitand(shr(b[n, k // 2], (k % 2) * 4), 15)`. `accuracy_level` lets onnxruntime quantize A to int8
per block; stitch computes in A's float dtype at every level (the results differ from onnxruntime's
level-4 ones by its activation rounding, about 1% of the output's scale).
"""

from __future__ import annotations

from ..engine.ir.program import FLOAT_DTYPES
from .onnx_builder import Builder, Unsupported, invalid
from .onnx_quant import const, spread, unpack


def convert_matmul_nbits(b: Builder, node, ins):
    a, packed, scales = ins[0], ins[1], ins[2]
    zero = ins[3] if len(ins) > 3 else None
    if len(ins) > 4 and ins[4] is not None:
        raise Unsupported("op", "MatMulNBits with g_idx (act-order groups)")
    bias = ins[5] if len(ins) > 5 else None
    k, n, bits, block = (node.attr(name) for name in ("K", "N", "bits", "block_size"))
    if None in (k, n, block):
        raise invalid("MatMulNBits needs K, N and block_size")
    bits = 4 if bits is None else bits
    if bits not in (4, 8):
        raise Unsupported("op", f"MatMulNBits of {bits} bits (stitch takes 4 and 8)")
    dt = b.type_of(a).dtype
    if dt not in FLOAT_DTYPES or b.type_of(a).shape[-1] != k:
        raise invalid(f"MatMulNBits' A must be a float tensor of K={k} columns, got {b.type_of(a)}")
    blocks = -(-k // block)
    padded = blocks * block
    if b.type_of(packed).dtype != "u8" or b.type_of(packed).size != n * padded * bits // 8:
        raise invalid(f"MatMulNBits' B must be u8 [{n}, {blocks}, {block * bits // 8}], got {b.type_of(packed)}")
    if b.type_of(scales).dtype != dt or b.type_of(scales).size != n * blocks:
        raise invalid(f"MatMulNBits' scales must be {dt} [{n * blocks}], got {b.type_of(scales)}")
    hint = node.out
    flat = b.op("reshape", [packed], hint, shape=(n, padded * bits // 8))
    q = unpack(b, flat, (n, padded), 4, hint) if bits == 4 else flat
    levels = b.op("cast", [q], hint, dtype=dt)
    if zero is None:
        offset = const(float(2 ** (bits - 1)))
    elif b.type_of(zero).dtype == dt:  # zero points of the scales' dtype: one a block, as they are
        offset = spread(b, b.op("reshape", [zero], hint, shape=(n, blocks)), (n, padded), 1, block, "zero point", hint)
    elif b.type_of(zero).dtype == "u8":
        per_column = (blocks + 1) // 2 * 2 if bits == 4 else blocks
        zq = b.op("reshape", [zero], hint, shape=(n, per_column * bits // 8))
        if bits == 4:
            zq = unpack(b, zq, (n, per_column), 4, hint)
            if per_column != blocks:
                zq = b.emit("slice", [zq], hint, axes=(1,), starts=(0,), ends=(blocks,))
        offset = spread(b, b.op("cast", [zq], hint, dtype=dt), (n, padded), 1, block, "zero point", hint)
    else:
        raise invalid(f"MatMulNBits' zero points must be u8 or {dt}, got {b.type_of(zero)}")
    scale = spread(b, b.op("reshape", [scales], hint, shape=(n, blocks)), (n, padded), 1, block, "scales", hint)
    w = b.op("mul", [b.op("sub", [levels, offset], hint), scale], hint)
    if padded != k:
        w = b.emit("slice", [w], hint, axes=(1,), starts=(0,), ends=(k,))
    y = b.op("matmul", [a, b.op("transpose", [w], hint, perm=(1, 0))], hint)
    if bias is not None:
        y = b.op("add", [y, bias], hint)
    return [y]


MICROSOFT_CONVERTERS = {"MatMulNBits": convert_matmul_nbits}
