"""Reductions into one element (targets/c/simd_reduce.py, extremum.py, vector_sum.py): NaN and
zeros as numpy gives them."""

from __future__ import annotations


import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare
from stitch_testing import needs_cc






@needs_cc
@pytest.mark.parametrize("t", ["f32", "f64", "i32", "i64"])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("n", [37, 53])
def test_vectorized_extrema_propagate_nan_like_numpy(t, op, n, cache):
    """gcc's vector reduction, or for f32 rows on AVX-512 two 16-lane vectors a step (37 = 32 + 5
    one by one, 53 = 32 + 16 + 5): NaN wherever it stands, infinities beside it."""
    f = stitch.compile(f"func f(x: {t}[6, {n}]) -> {t}[6, 1] {{ return {op}(mul(x, x), axes=[1], keepdims=true) }}",
                       cache_dir=cache)
    source = f.native.source_path.read_text()
    assert f"reduction({op}:acc)" in source or f"st_m0 = _mm512_{op}_ps(st_v0, st_m0)" in source
    x = random_inputs(f.graph, 5)["x"]
    if t[0] == "f":
        x[1, n - 10] = np.nan  # NaN in the middle, at the end, beside an infinity, and at the start
        x[2, n - 1] = np.nan
        x[3, 0], x[3, 10] = np.inf, np.nan
        x[4, 0] = np.nan
        x[5, :] = -np.inf
    (got,) = f(x=x)
    (want,) = evaluate(f.graph, {"x": x})
    assert compare(got, want) == ""
    if t[0] == "f":
        assert np.isnan(got[1:5, 0]).all() and not np.isnan(got[[0, 5], 0]).any()
