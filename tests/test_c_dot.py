"""targets/c/dot.py: a product of one row whose right operand runs along the sum (torch's Linear
weight [out, in], a decoder step's keys) is summed column by column as dot products, at the
machine's vector width (16 lanes with AVX-512, 8 with AVX2), and computes what the reference does."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare
from stitch.targets.c import recognizers
from stitch_testing import needs_cc

# a Linear layer of torch's layout (the weight [out, in], read transposed), as the torch backend imports it
LINEAR = """func f(x: f32[1, 1, 96], w: f32[200, 96], b: f32[200]) -> f32[1, 1, 200] {
  y = matmul(reshape(x, shape=[1, 96]), transpose(w, perm=[1, 0]))
  return reshape(add(y, b), shape=[1, 1, 200])
}
"""
# the row is attention's heads merged back ([heads, 1, 64] -> [1, heads * 64]): its index divides and
# wraps (`r // 64`, `r % 64`), its flat address runs along the sum all the same
MERGED_HEADS = """func f(h: f32[3, 1, 64], w: f32[40, 192]) -> f32[1, 40] {
  a = reshape(transpose(reshape(h, shape=[1, 3, 1, 64]), perm=[0, 2, 1, 3]), shape=[1, 192])
  return matmul(a, transpose(w, perm=[1, 0]))
}
"""


@needs_cc
@pytest.mark.parametrize("text", [LINEAR, MERGED_HEADS], ids=["linear", "merged_heads"])
def test_a_one_row_product_reading_its_weight_along_the_sum_is_dot_products(text, tmp_path, monkeypatch):
    taken = stitch.compile(text, cache_dir=tmp_path)
    assert "st_hsum_f32(s0)" in taken.native.source_path.read_text()
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("dot"))
    plain = stitch.compile(text, cache_dir=tmp_path)
    assert "st_hsum_f32(s0)" not in plain.native.source_path.read_text()
    rng = np.random.default_rng(7)
    inputs = {n: rng.standard_normal(a.shape).astype(np.float32) for n, a in random_inputs(taken.graph).items()}
    want = evaluate(taken.graph, inputs)
    for got in (taken(**inputs), plain(**inputs)):
        assert compare(got[0], want[0]) == ""


@needs_cc
def test_non_finite_values_reach_the_dot_products_result(tmp_path):
    """A NaN or an infinity in the row or the weight comes out where the reference puts it."""
    compiled = stitch.compile(LINEAR, cache_dir=tmp_path)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 1, 96)).astype(np.float32)
    w = rng.standard_normal((200, 96)).astype(np.float32)
    b = rng.standard_normal(200).astype(np.float32)
    x[0, 0, 5] = np.inf
    w[3, 90] = np.nan
    inputs = {"x": x, "w": w, "b": b}
    (got,) = compiled(**inputs)
    (want,) = evaluate(compiled.graph, inputs)
    assert compare(got, want) == ""
    assert np.isnan(got[0, 0, 3]) and np.array_equal(np.isinf(got), np.isinf(want))
