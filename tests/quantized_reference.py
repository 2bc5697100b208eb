"""numpy references of the quantized ONNX operators, written to reproduce onnxruntime 1.32's CPU kernels.

Each function takes the operator's inputs as numpy arrays (in ONNX's order, None for an absent optional
one) and its attributes as keywords, and returns what onnxruntime returns. Checked against the outputs
onnxruntime recorded in tests/fixtures/models/quantized/ (tests/test_quantized_reference.py); the semantics
and the measured differences are in docs/reference/quantized-onnx.md. numpy only: 4-bit tensors read by
onnx.numpy_helper arrive as ml_dtypes int4/uint4 arrays, which these functions convert with astype.

- dequantize_linear, quantize_linear, dynamic_quantize_linear, matmul_integer, qlinear_matmul: the
  standard operators (opset 21);
- matmul_nbits, matmul_nbits_weight, gather_block_quantized: com.microsoft's MatMulNBits and
  GatherBlockQuantized;
- evaluate_node: any of these by its ONNX op_type (and Cast and Mul, which quantize_dynamic's graphs use).
"""

from __future__ import annotations

import numpy as np

# the range of each integer type the operators produce, by numpy dtype name (int4/uint4: ml_dtypes')
INTEGER_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
                  "uint4": (0, 15), "int4": (-8, 7)}


def integers(x) -> np.ndarray:
    """The values of an integer array (int4 and uint4 included) as int32."""
    return np.asarray(x).astype(np.int32)


def expand(param, shape: tuple, axis: int = 1, block_size: int = 0) -> np.ndarray:
    """A scale or zero point broadcast to the data's `shape`: per tensor (a scalar or one element), per axis
    (1-D, along `axis`) or blocked (the data's rank, `block_size` elements of `axis` a block; the last block
    may be partial)."""
    param = np.asarray(param)
    if block_size == 0 and param.size == 1:
        return param.reshape(())
    axis %= len(shape)
    if block_size:
        return np.take(np.repeat(param, block_size, axis=axis), np.arange(shape[axis]), axis=axis)
    return param.reshape([-1 if i == axis else 1 for i in range(len(shape))])


def dequantize_linear(x, x_scale, x_zero_point=None, *, axis: int = 1, block_size: int = 0) -> np.ndarray:
    """DequantizeLinear: y = (x - zero_point) * scale, in float32. The difference is an exact integer, so the
    one rounding is the product's: onnxruntime's result is the same to the bit. The zero point defaults to 0
    (whatever x's type: int8, uint8, int4, uint4)."""
    x = integers(x)
    zero = 0 if x_zero_point is None else integers(expand(x_zero_point, x.shape, axis, block_size))
    scale = expand(np.asarray(x_scale, np.float32), x.shape, axis, block_size)
    return ((x - zero).astype(np.float32) * scale).astype(np.float32)


def quantize_linear(x, y_scale, y_zero_point=None, *, axis: int = 1, block_size: int = 0) -> np.ndarray:
    """QuantizeLinear: y = saturate(round_half_even(x / scale) + zero_point), the division in float32 (not a
    product by 1/scale), rounded before the zero point is added, saturated to the zero point's type (uint8
    when it is absent, the zero point then 0). NaN is left out: onnxruntime gives the type's minimum."""
    x = np.asarray(x, np.float32)
    dtype = np.uint8 if y_zero_point is None else np.asarray(y_zero_point).dtype
    low, high = INTEGER_RANGES[np.dtype(dtype).name]
    zero = 0 if y_zero_point is None else integers(expand(y_zero_point, x.shape, axis, block_size))
    scale = expand(np.asarray(y_scale, np.float32), x.shape, axis, block_size)
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.rint(x / scale).astype(np.float64) + zero
        return np.clip(q, low, high).astype(dtype)


def dynamic_quantize_linear(x) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DynamicQuantizeLinear, in float32: the range [min(0, min x), max(0, max x)] (it always holds 0),
    scale = (hi - lo) / 255, zero_point = saturate(round_half_even(0 - lo / scale)) as uint8, and
    y = saturate(round_half_even(x / scale) + zero_point). An all-zero x gives scale 1 and zero point 0.
    Returns (y, scale, zero_point), the last two scalars."""
    x = np.asarray(x, np.float32)
    lo = np.minimum(np.float32(0), x.min())
    hi = np.maximum(np.float32(0), x.max())
    scale = np.float32((hi - lo) / np.float32(255))
    if scale == 0:
        scale = np.float32(1)
    zero = np.clip(np.rint(np.float32(0) - lo / scale), 0, 255).astype(np.float32)
    y = np.clip(np.rint(x / scale) + zero, 0, 255).astype(np.uint8)
    return y, np.array(scale, np.float32), np.array(zero, np.uint8)


def matmul_integer(a, b, a_zero_point=None, b_zero_point=None) -> np.ndarray:
    """MatMulInteger: (a - a_zero_point) @ (b - b_zero_point), exact, as int32. a's zero point is a scalar or
    one per row of a, b's a scalar or one per column of b; both default to 0."""
    a, b = integers(a).astype(np.int64), integers(b).astype(np.int64)
    if a_zero_point is not None:
        za = integers(a_zero_point)
        a = a - (za.reshape(-1, 1) if za.size > 1 else za.reshape(()))
    if b_zero_point is not None:
        zb = integers(b_zero_point)
        b = b - (zb.reshape(1, -1) if zb.size > 1 else zb.reshape(()))
    return np.matmul(a, b).astype(np.int32)


def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point) -> np.ndarray:
    """QLinearMatMul: the exact int32 product of MatMulInteger times the float32 multiplier
    (a_scale * b_scale) / y_scale (b's scale per column or per tensor), rounded half to even, plus
    y_zero_point, saturated to y_zero_point's type (a's type: uint8 x uint8|int8 -> uint8, int8 x int8 -> int8)."""
    acc = matmul_integer(a, b, a_zero_point, b_zero_point).astype(np.float32)
    b_scale = np.asarray(b_scale, np.float32)
    multiplier = (np.float32(a_scale) * (b_scale.reshape(1, -1) if b_scale.size > 1 else b_scale.reshape(())))
    multiplier = (multiplier / np.float32(y_scale)).astype(np.float32)
    dtype = np.asarray(y_zero_point).dtype
    low, high = INTEGER_RANGES[dtype.name]
    y = np.rint(acc * multiplier) + np.float32(integers(y_zero_point))
    return np.clip(y, low, high).astype(dtype)


def unpack_nibbles(packed) -> np.ndarray:
    """Bytes to 4-bit values along the last axis, the low nibble first: [..., n] -> [..., 2n]."""
    packed = np.asarray(packed, np.uint8)
    return np.stack([packed & 15, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)


def matmul_nbits_weight(b, scales, zero_points=None, *, K: int, N: int, bits: int, block_size: int) -> np.ndarray:
    """MatMulNBits' weight as float32 [K, N]. b is uint8 [N, k_blocks, block_size * bits / 8]
    (k_blocks = ceil(K / block_size); each column's K values in blocks, two 4-bit values a byte with the
    low nibble first, or one 8-bit value a byte); scales float32, N * k_blocks of them ([N, k_blocks] or
    flat), column-major by block; zero_points uint8, for 4 bits [N, ceil(k_blocks / 2)] (each column's own
    bytes, low nibble first, the last nibble unused when k_blocks is odd) and for 8 bits [N, k_blocks],
    either flat too, absent meaning 2^(bits - 1) (8 or 128); a float zero point array (scales' type) is
    subtracted as it is. W[k, n] = (q[n, k] - zero[n, k // block_size]) * scale[n, k // block_size]; the
    padding of the last block beyond K is dropped."""
    if bits not in (4, 8):
        raise NotImplementedError(f"MatMulNBits bits={bits}: only 4 and 8 are verified")
    blocks = -(-K // block_size)
    blob = block_size * bits // 8
    b = np.asarray(b, np.uint8)
    if b.shape != (N, blocks, blob):
        raise ValueError(f"MatMulNBits B is {b.shape}, not [N, k_blocks, blob] = {[N, blocks, blob]}")
    q = (unpack_nibbles(b) if bits == 4 else b).reshape(N, blocks * block_size).astype(np.float32)
    scale = np.asarray(scales, np.float32).reshape(N, blocks)
    if zero_points is None:
        zero = np.full((N, blocks), 2.0 ** (bits - 1), np.float32)
    elif np.asarray(zero_points).dtype == np.uint8:
        packed = np.asarray(zero_points, np.uint8).reshape(N, -1)
        zero = (unpack_nibbles(packed) if bits == 4 else packed)[:, :blocks].astype(np.float32)
    else:
        zero = np.asarray(zero_points, np.float32).reshape(N, blocks)
    w = (q - np.repeat(zero, block_size, axis=1)) * np.repeat(scale, block_size, axis=1)
    return np.ascontiguousarray(w[:, :K].T.astype(np.float32))


def quantize_activation_blocks(a, block_size: int) -> np.ndarray:
    """What MatMulNBits computes with at accuracy_level 4: each row of a cut in blocks of block_size along K
    (the weight's blocks), each block symmetric int8 with scale = max|block| / 127 and
    q = round_half_even(a * (1 / scale)), returned dequantized (q * scale) as float32."""
    a = np.asarray(a, np.float32)
    k = a.shape[-1]
    blocks = -(-k // block_size)
    padded = np.zeros((*a.shape[:-1], blocks * block_size), np.float32)
    padded[..., :k] = a
    padded = padded.reshape(*a.shape[:-1], blocks, block_size)
    scale = (np.abs(padded).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float32)
    inverse = np.divide(np.float32(1), scale, out=np.zeros_like(scale), where=scale != 0)
    q = np.clip(np.rint(padded * inverse), -127, 127)
    return (q * scale).reshape(*a.shape[:-1], blocks * block_size)[..., :k].astype(np.float32)


def matmul_nbits(a, b, scales, zero_points=None, g_idx=None, bias=None, *, K: int, N: int, bits: int,
                 block_size: int, accuracy_level: int = 0) -> np.ndarray:
    """com.microsoft MatMulNBits: a [..., K] float32 times the weight of matmul_nbits_weight, plus bias.
    accuracy_level 0 to 3: float32 activations (the same results on this CPU); 4: the activations quantized
    first (quantize_activation_blocks). Summed in float64 here; onnxruntime sums in float32 (the difference
    is rounding, about 1e-6 of the output's scale). g_idx (act-order) is not supported."""
    if g_idx is not None:
        raise NotImplementedError("MatMulNBits g_idx")
    w = matmul_nbits_weight(b, scales, zero_points, K=K, N=N, bits=bits, block_size=block_size)
    a = np.asarray(a, np.float32)
    if accuracy_level == 4:
        a = quantize_activation_blocks(a, block_size)
    y = np.matmul(a.astype(np.float64), w.astype(np.float64)).astype(np.float32)
    return y if bias is None else (y + np.asarray(bias, np.float32)).astype(np.float32)


def gather_block_quantized(data, indices, scales, zero_points=None, *, gather_axis: int = 0,
                           quantize_axis: int = 1, block_size: int = 128, bits: int = 4) -> np.ndarray:
    """com.microsoft GatherBlockQuantized: the table dequantized in blocks of block_size along quantize_axis,
    (level - zero) * scale in float32 (scales and zero points of the data's rank, ceil(d / block_size) along
    quantize_axis), then gathered along gather_axis (negative indices count from the end). int4/uint4
    data: one level an element, the zero point defaulting to 0. uint8 data: `bits` 4 packs two levels a byte
    along the last axis, low nibble first (zero points likewise), the zero point defaulting to 8; `bits` 8 one
    level a byte, the zero point defaulting to 128."""
    data = np.asarray(data)
    packed = data.dtype == np.uint8 and bits == 4
    levels = unpack_nibbles(data) if packed else data
    shape = levels.shape
    if zero_points is None:
        zero = 2 ** (bits - 1) if data.dtype == np.uint8 else 0
    else:
        zero_points = np.asarray(zero_points)
        zero = unpack_nibbles(zero_points) if packed else zero_points
        zero = integers(zero)[tuple(slice(0, n) for n in np.shape(scales))]
        zero = integers(expand(zero, shape, quantize_axis, block_size))
    scale = expand(np.asarray(scales, np.float32), shape, quantize_axis, block_size)
    table = ((integers(levels) - zero).astype(np.float32) * scale).astype(np.float32)
    return np.take(table, np.asarray(indices, np.int64), axis=gather_axis)


CAST_TYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 11: np.float64}


def evaluate_node(op_type: str, inputs: list, attrs: dict) -> list[np.ndarray]:
    """The outputs of one node: `inputs` in the node's order (None for an absent optional one), `attrs` its
    attributes as Python values."""
    padded = list(inputs) + [None] * 8
    if op_type == "DequantizeLinear":
        return [dequantize_linear(*padded[:3], axis=attrs.get("axis", 1), block_size=attrs.get("block_size", 0))]
    if op_type == "QuantizeLinear":
        return [quantize_linear(*padded[:3], axis=attrs.get("axis", 1), block_size=attrs.get("block_size", 0))]
    if op_type == "DynamicQuantizeLinear":
        return list(dynamic_quantize_linear(inputs[0]))
    if op_type == "MatMulInteger":
        return [matmul_integer(*padded[:4])]
    if op_type == "QLinearMatMul":
        return [qlinear_matmul(*inputs[:8])]
    if op_type == "MatMulNBits":
        return [matmul_nbits(*padded[:6], K=attrs["K"], N=attrs["N"], bits=attrs.get("bits", 4),
                             block_size=attrs["block_size"], accuracy_level=attrs.get("accuracy_level", 0))]
    if op_type == "GatherBlockQuantized":
        return [gather_block_quantized(*padded[:4], gather_axis=attrs.get("gather_axis", 0),
                                       quantize_axis=attrs.get("quantize_axis", 1),
                                       block_size=attrs.get("block_size", 128), bits=attrs.get("bits", 4))]
    if op_type == "Cast":
        return [np.asarray(inputs[0]).astype(CAST_TYPES[attrs["to"]])]
    if op_type == "Mul":
        a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
        return [(a * b).astype(np.result_type(a, b))]
    raise NotImplementedError(op_type)
