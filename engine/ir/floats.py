"""The floating-point semantics every target follows, written in numpy (docs/explanation/floating-point.md).

numpy is the reference, except where its answer depends on the platform or on
the order it happens to visit elements; there stitch fixes one answer and the
reference interpreter, the numpy executor and the generated C all give it:

- float -> int casts: truncation toward zero; NaN, +-inf and values outside the
  integer type's range give its minimum (what numpy gives on x86-64; C leaves
  it undefined, and numpy elsewhere saturates). To i8 and u8: the cast to i32,
  then its low 8 bits (numpy on x86-64 again: 300.0 gives 44, -1.0 gives 255
  as u8). A quantizer that saturates says so with maximum and minimum first.
- shifts by a count outside 0..bits-1 (negative included) give 0, or -1 for a
  right shift of a negative value (numpy's; C leaves it undefined).
- maximum, minimum, relu and the max/min reductions: NaN propagates (as in
  numpy), and of two zeros +0.0 is the larger (IEEE 754-2019 maximum/minimum;
  numpy returns whichever operand comes second, so its sign would depend on
  the order a vectorized reduction combines its lanes).
- pow is C99's pow (numpy computes x ** 0.5 as sqrt when the exponent is a
  scalar, which differs at -inf and -0.0).
- f16 sums and means accumulate in f32 and round once (numpy does that on a
  contiguous axis and accumulates in f16 along any other: 4,096 ones summed
  along axis 0 give 2,048).
"""

from __future__ import annotations

import math

import numpy as np

_KEY_INTS = {2: np.int16, 4: np.int32, 8: np.int64}


def cast(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`x.astype(dtype)`, with float -> int out of range defined (see the module docstring)."""
    x = np.asarray(x)
    dtype = np.dtype(dtype)
    if x.dtype.kind != "f" or dtype.kind not in "iu":
        return x.astype(dtype)
    if dtype.itemsize < 4:
        return cast(x, np.dtype(np.int32)).astype(dtype)
    info = np.iinfo(dtype)
    wide = np.trunc(x.astype(np.float64))
    # -2**(bits-1) and 2**(bits-1) are exact in float64; NaN fails both tests
    fits = (wide >= float(info.min)) & (wide < -float(info.min))
    out = np.where(fits, wide, 0.0).astype(dtype)
    out[~fits] = info.min
    return out


def left_shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a << b; a count outside 0..bits-1 gives 0."""
    a, b = np.asarray(a), np.asarray(b)
    bits = 8 * a.dtype.itemsize
    inside = (b >= 0) & (b < bits)
    return np.where(inside, np.left_shift(a, np.where(inside, b, 0)), 0).astype(a.dtype)


def right_shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a >> b (arithmetic for a signed a, logical for an unsigned one); a count outside 0..bits-1
    gives 0, or -1 where a is negative."""
    a, b = np.asarray(a), np.asarray(b)
    bits = 8 * a.dtype.itemsize
    inside = (b >= 0) & (b < bits)
    out = np.where(a < 0, -1, 0) if a.dtype.kind == "i" else 0
    return np.where(inside, np.right_shift(a, np.where(inside, b, 0)), out).astype(a.dtype)


def power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a ** b as C99's pow defines it. numpy takes a sqrt or square shortcut when the exponent is one
    value repeated (a 0-d array, a broadcast), which differs at -inf and -0.0: pow(-inf, 0.5) is +inf,
    sqrt(-inf) NaN. So the exponent goes in as a full array."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(b))
    base = np.broadcast_to(a, shape).reshape(-1)
    exponent = np.array(np.broadcast_to(b, shape)).reshape(-1)
    return np.power(base, exponent).reshape(shape)


def maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise maximum: NaN propagates, +0.0 > -0.0."""
    out = np.maximum(a, b)
    if out.dtype.kind != "f":
        return out
    # of two zeros the sum is -0.0 exactly when both are
    return np.where((a == 0) & (b == 0), np.add(a, b, dtype=out.dtype), out)


def minimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise minimum: NaN propagates, -0.0 < +0.0."""
    out = np.minimum(a, b)
    if out.dtype.kind != "f":
        return out
    return np.where((a == 0) & (b == 0), -np.add(-a, -b, dtype=out.dtype), out)


def reduce_extremum(op: str, x: np.ndarray, axis, keepdims: bool) -> np.ndarray:
    """max or min over `axis` as the elementwise maximum/minimum above would fold them, in any order."""
    fn = np.max if op == "max" else np.min
    out = np.asarray(fn(x, axis=axis, keepdims=keepdims))
    if x.dtype.kind != "f" or x.size == 0:
        return out
    # +0.0 wins a max when present, -0.0 a min
    sign = np.signbit(x) if op == "min" else ~np.signbit(x)
    seen = np.any((x == 0) & sign, axis=axis, keepdims=keepdims)
    winner, loser = (-0.0, 0.0) if op == "min" else (0.0, -0.0)
    zero = np.where(seen, winner, loser).astype(x.dtype)
    return np.where(out == 0, zero, out)


def reduce_sum(op: str, x: np.ndarray, axis, keepdims: bool, dtype: np.dtype) -> np.ndarray:
    """sum or mean over `axis` in `dtype`; f16 accumulates in f32 and rounds once."""
    fn = np.sum if op == "sum" else np.mean
    wide = np.dtype(np.float32) if dtype == np.float16 else dtype
    return np.asarray(fn(x, axis=axis, keepdims=keepdims, dtype=wide)).astype(dtype)


def order_keys(x: np.ndarray, nan_wins: str) -> np.ndarray:
    """Integers ordered as the floats `x` are under maximum/minimum above (-0.0 just below +0.0),
    NaN made the largest (`nan_wins="max"`) or the smallest ("min"): integer max/min of keys, which
    ufunc.at and ufunc.reduce can fold in any grouping, is then the float max/min."""
    x = np.asarray(x)
    info = np.iinfo(_KEY_INTS[x.dtype.itemsize])
    bits = x.view(info.dtype)
    keys = np.where(bits < 0, bits ^ info.max, bits)
    return np.where(np.isnan(x), info.max if nan_wins == "max" else info.min, keys).astype(info.dtype)


def from_order_keys(keys: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The floats `order_keys` maps to `keys` (the map is its own inverse on the bits; both extreme
    keys are NaNs)."""
    info = np.iinfo(_KEY_INTS[np.dtype(dtype).itemsize])
    keys = np.asarray(keys, info.dtype)
    return np.where(keys < 0, keys ^ info.max, keys).astype(info.dtype).view(dtype)


def edge_values(dtype: str) -> list:
    """Values at the edges of `dtype`'s range, simplest first (hypothesis shrinks towards the front):
    what `stitch rules check` and the fuzz tests mix into ordinary inputs."""
    if np.dtype(_NP[dtype]).kind == "f":
        info = np.finfo(_NP[dtype])
        big, tiny, sub = float(info.max), float(info.tiny), float(info.smallest_subnormal)
        magnitudes = [1.0, math.inf, big, big / 2, math.sqrt(big) * 2, math.log(big) + 1, 100.0, tiny, sub]
        with np.errstate(all="ignore"):  # each exactly representable in the dtype
            return [0.0, -0.0, math.nan] + [float(_NP[dtype](v)) for m in magnitudes for v in (m, -m)]
    info = np.iinfo(_NP[dtype])
    if info.min == 0:
        return [0, 1, int(info.max), int(info.max) - 1, 2 ** (info.bits - 1)]
    return [0, 1, -1, int(info.min), int(info.max), int(info.min) + 1]


_NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i8": np.int8, "u8": np.uint8, "i32": np.int32,
       "i64": np.int64}
