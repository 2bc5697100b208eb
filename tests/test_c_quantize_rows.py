"""A dynamically quantized product's rows of A (onnxruntime's DynamicQuantizeLinear feeding MatMulInteger):
float_helpers.h's max, min and float -> int casts are branch-free, and the micro-kernel computes what does
not change along k once a row, ahead of the row's loop (KernelWriter.hoisted), so gcc vectorizes that
loop. The same bits as the plain loops and the reference, NaN, signed zeros and infinities included."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate
from stitch.targets.c import recognizers
from stitch_testing import needs_cc

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 255.0, 255.5, -0.4, np.inf, -np.inf, np.nan, -np.nan, 3e38, -3e38,
           2147483520.0, -2147483648.0, 2147483648.0, -2147483904.0, 1e19, -9.2e18, 1e-40, 65504.0]


@needs_cc
@pytest.mark.parametrize("t", ["f32", "f64", "f16"])
def test_max_min_and_casts_keep_the_references_bits_on_nan_signed_zeros_and_infinities(t, cache):
    """Every pair of special values through maximum and minimum (NaN propagates from either operand,
    max(-0, +0) = +0, min(-0, +0) = -0), and each through the casts to i32, i64, i8 and u8 (NaN and
    values out of range give the type's minimum, or the i32 cast's low byte)."""
    dtype = {"f32": np.float32, "f64": np.float64, "f16": np.float16}[t]
    with np.errstate(over="ignore"):
        values = np.array(SPECIAL, dtype)
    x, y = (a.ravel() for a in np.meshgrid(values, values))
    n = x.size
    f = stitch.compile(f"func f(x: {t}[{n}], y: {t}[{n}]) -> ({t}[{n}], {t}[{n}], i32[{n}], i64[{n}], i8[{n}], "
                       f"u8[{n}]) {{\n  return maximum(x, y), minimum(y, x), cast(x, dtype=i32), cast(x, dtype=i64), "
                       f"cast(x, dtype=i8), cast(x, dtype=u8)\n}}\n", cache_dir=cache)
    inputs = {"x": x, "y": y}
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


# DynamicQuantizeLinear of x (as frontends/onnx translates it: u8, scale and zero point from x's range)
# feeding MatMulInteger with an i8 weight, the product's A computed in its rows
QUANTIZED = """func f(x: f32[32, 64], w: i8[64, 48]) -> i32[32, 48] {
  lo = minimum(min(x), 0.0)
  hi = maximum(max(x), 0.0)
  s0 = div(sub(hi, lo), 255.0)
  s = where(equal(s0, 0.0), 1.0, s0)
  z0 = sub(0.0, div(lo, s))
  z1 = minimum(where(greater(z0, -1024.0), z0, -1024.0), 1024.0)
  z = minimum(maximum(sub(add(z1, 12582912.0), 12582912.0), 0.0), 255.0)
  q0 = div(x, s)
  q1 = minimum(where(greater(q0, -1024.0), q0, -1024.0), 1024.0)
  q = minimum(maximum(add(sub(add(q1, 12582912.0), 12582912.0), z), 0.0), 255.0)
  a = sub(cast(cast(q, dtype=u8), dtype=i32), cast(cast(z, dtype=u8), dtype=i32))
  return matmul(a, cast(w, dtype=i32))
}
"""


def quantized_inputs(case: str) -> dict:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    if case == "nan":
        x[3, 5] = np.nan
    elif case == "inf":
        x[0, 0] = np.inf
    elif case == "signed zeros":
        x[:] = np.where(rng.random((32, 64)) < 0.5, np.float32(-0.0), np.float32(0.0))  # a scale of 0: 1
    elif case == "positive":
        x = np.abs(x) + np.float32(0.25)  # the zero point at 0
    return {"x": x, "w": rng.integers(-128, 128, (64, 48), dtype=np.int8)}


@needs_cc
@pytest.mark.parametrize("case", ["plain", "nan", "inf", "signed zeros", "positive"])
def test_a_quantized_rows_invariants_are_hoisted_and_the_product_keeps_the_plain_loops_values(case, cache,
                                                                                                 monkeypatch):
    """The scale and zero point (from the reductions, the same for every k) are computed once a row
    ahead of its loop over k; the product is the plain loops' and the reference's, bit for bit (integer
    sums), whatever x holds."""
    taken = stitch.compile(QUANTIZED, cache_dir=cache)
    source = taken.native.source_path.read_text()
    assert "a_pre[" in source and "const float st_h0_ = " in source
    # (the plain loops: neither the micro-kernel nor int_rows, which makes its pairs from the same a_pre)
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("matmul", "int_rows"))
    plain = stitch.compile(QUANTIZED, cache_dir=cache)
    assert "a_pre[" not in plain.native.source_path.read_text()
    inputs = quantized_inputs(case)
    (got,), (want,), (ref,) = taken(**inputs), plain(**inputs), evaluate(taken.graph, inputs)
    assert got.dtype == np.int32 and np.array_equal(got, want) and np.array_equal(got, ref)
