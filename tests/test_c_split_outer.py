"""A loop nest reading a concat along its outer loop is cut there (targets/c/split_outer.py), and a
transpose with a loop between its two loops has that loop moved outside (targets/c/transpose_middle.py):
each computes the same bits as its plain-loop twin (the same program with it left out of the table)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import stitch
from stitch.targets.c import recognizers
from stitch_testing import needs_cc

# the padded input of a depthwise 3x3 conv after a 1x1 one (MobileNetV2's): the product's rows are
# positions, the conv reads channels-first, ReLU6 and the zero borders on both spatial axes
PADDED = """func t(y: f32[1, 400, 32], b: f32[32, 1, 1], z1: f32[1, 32, 1, 20],
       z2: f32[1, 32, 22, 1]) -> f32[1, 32, 22, 22] {
  x = reshape(transpose(y, perm=[0, 2, 1]), shape=[1, 32, 20, 20])
  c = minimum(maximum(add(x, b), 0.0), 6.0)
  p = concat(z1, c, z1, axis=2)
  return concat(z2, p, z2, axis=3)
}
"""


def padded_inputs(rng):
    y = rng.standard_normal((1, 400, 32)).astype(np.float32)
    y[0, 7, 3] = np.nan  # the NaN-aware max and min keep it
    return {"y": y, "b": rng.standard_normal((32, 1, 1)).astype(np.float32),
            "z1": np.zeros((1, 32, 1, 20), np.float32), "z2": np.zeros((1, 32, 22, 1), np.float32)}


def padded_reference(v):
    x = v["y"].transpose(0, 2, 1).reshape(1, 32, 20, 20) + v["b"]
    c = np.minimum(np.maximum(x, np.float32(0)), np.float32(6))
    c[np.isnan(x)] = np.nan
    return np.pad(c, ((0, 0), (0, 0), (1, 1), (1, 1)))


def kernel_source(program) -> str:
    source = program.native.source_path.read_text()
    start = source.index("static void kernel_k0_tiles0(")
    return source[start:source.index("static void kernel_k0_tiles0_run")]


@needs_cc
@pytest.mark.parametrize("left_out", ["split_outer", "transpose_middle"])
def test_a_padded_transpose_computes_what_its_plain_twin_does(left_out, tmp_path, monkeypatch):
    taken = stitch.compile(PADDED, cache_dir=tmp_path)
    source = kernel_source(taken)
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without(left_out))
    plain = stitch.compile(PADDED, cache_dir=tmp_path)
    twin = kernel_source(plain)
    rows = re.compile(r"for \(int64_t p2 = cut_p2_\d+; p2 < cut_p2_\d+; \+\+p2\)")
    if left_out == "split_outer":  # the rows cut into the borders and the middle, whose nest selects nothing
        assert rows.search(source) and not rows.search(twin), source
        middle = source[rows.search(source).end():]
        middle = middle[:middle.index("for (int64_t p2")]
        assert "b_y[" in middle and "?" not in middle.replace("ST_CLAMP", ""), middle
    else:  # the rows outside the channels: each row's lines of y read across all channels before the next
        order = lambda s: [m.group(1) for m in re.finditer(r"for \(int64_t (p\d) =", s)][:4]  # noqa: E731
        assert order(source).index("p2") < order(source).index("p1"), source
        assert order(twin).index("p1") < order(twin).index("p2"), twin
    v = padded_inputs(np.random.default_rng(0))
    (got,), (want,) = taken(**v), plain(**v)
    assert got.tobytes() == want.tobytes()
    np.testing.assert_array_equal(got, padded_reference(v))


@needs_cc
def test_a_concat_along_the_inner_axis_only_is_not_cut_outside(tmp_path):
    text = ("func t(x: f32[16, 30], z: f32[16, 2]) -> f32[16, 32] {\n"
            "  return concat(z, relu(x), axis=1)\n}\n")
    f = stitch.compile(text, cache_dir=tmp_path)
    assert "cut_p0" not in f.native.source_path.read_text()
    x, z = np.random.default_rng(1).standard_normal((16, 30)).astype(np.float32), np.ones((16, 2), np.float32)
    (got,) = f(x=x, z=z)
    np.testing.assert_array_equal(got, np.concatenate([z, np.maximum(x, 0)], axis=1))
