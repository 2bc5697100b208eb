"""A loop over a tile of merged positions with a sum over taps inside it (a depthwise conv's) runs in
row segments with the taps outside (targets/c/row_segments.py): the same bits as its plain-loop twin
(the same program with the recognizer left out of the table), and the conv's values."""

from __future__ import annotations

import re

import numpy as np
import pytest
import stitch
from stitch.engine.schedule.index import FloorDiv, Ix, Mod
from stitch.lowering.loops import Accumulate, Buffer, For, Lit, Load, LoopKernel, LoopProgram, Op, Store
from stitch.targets import cpu
from stitch.targets.c import recognizers
from stitch_testing import needs_cc

ROWS, COLS, TILE = 10, 40, 100  # a tile of 100 positions: two and a half rows of 40


def conv_in_tiles(stride: int) -> LoopProgram:
    """out[c, p] = sum over r2, r3 of x[c, r2 + s * (p // 40), r3 + s * (p % 40)] * w[c, r2, r3] (s the
    stride), tiled by 100 positions (a tile starts mid-row every other time), as MobileNetV2's
    depthwise convs lower."""
    c, p, r2, r3 = (Ix.var(v) for v in ("c", "p", "r2", "r3"))
    at = Ix.var("p1o", TILE) + p
    read = Load("x", (c, r2 + Ix.var(FloorDiv(at, COLS), stride), r3 + Ix.var(Mod(at, COLS), stride)))
    tap = Accumulate("out", (c, at), "sum", Op("mul", (read, Load("w", (c, r2, r3))), "f32"))
    body = [For("p1o", ROWS * COLS // TILE, "parallel", [For("c", 4, "serial", [
        For("p", TILE, "serial", [Store("out", (c, at), Lit(0.0, "f32"))]),
        For("p", TILE, "serial", [For("r2", 3, "reduce", [For("r3", 3, "reduce", [tap])])])])])]
    shape = (4, stride * ROWS + 2, stride * COLS + 2)
    return LoopProgram("dw", [Buffer("x", "global", "f32", shape), Buffer("w", "global", "f32", (4, 3, 3))], ["out"],
                       [], [LoopKernel("k0", [], body)], [Buffer("out", "global", "f32", (4, ROWS * COLS))])


def conv(x, w, channels=4, rows=ROWS, cols=COLS, stride=1):
    """The depthwise conv in numpy, positions merged."""
    out = np.zeros((channels, rows, cols), np.float32)
    for r2 in range(3):
        for r3 in range(3):
            out += x[:, r2:r2 + stride * rows:stride, r3:r3 + stride * cols:stride] * w[:, r2, r3, None, None]
    return out.reshape(channels, rows * cols)


@needs_cc
@pytest.mark.parametrize("stride", [1, 2])
def test_a_tile_crossing_rows_runs_in_row_segments_with_its_twins_bits(stride, tmp_path, monkeypatch):
    taken = cpu.build(conv_in_tiles(stride), tmp_path)
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("row_segments"))
    plain = cpu.build(conv_in_tiles(stride), tmp_path)
    source, twin = taken.source_path.read_text(), plain.source_path.read_text()
    assert "st_q0 = st_n0 / 40" in source and "st_s = st_e" not in twin
    # the taps outside the segment's loop over positions, which reads x's row without a div or mod
    assert re.search(r"for \(int64_t r3 = 0; r3 < 3; \+\+r3\) \{\n *for \(int64_t p = st_s; p < st_e; \+\+p\)", source)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, stride * ROWS + 2, stride * COLS + 2)).astype(np.float32)
    x[1, 3, 5] = np.nan
    w = rng.standard_normal((4, 3, 3)).astype(np.float32)
    (got,), (want,) = taken.run({"x": x, "w": w}), plain.run({"x": x, "w": w})
    assert got.tobytes() == want.tobytes()
    np.testing.assert_allclose(got, conv(x, w, stride=stride), rtol=1e-5, atol=1e-5)


def depthwise(n: int) -> str:
    """A depthwise 3x3 conv of 8 channels over an n x n plane padded to n + 2, as the ONNX importer writes it."""
    rows = ", ".join(f"reshape(slice(x, axes=[2], starts=[{i}], ends=[{n + i}]), shape=[1, 8, {n}, 1, {n + 2}])"
                     for i in range(3))
    taps = ", ".join(f"reshape(slice(r, axes=[4], starts=[{i}], ends=[{n + i}]), shape=[1, 8, {n}, 3, {n}, 1])"
                     for i in range(3))
    return (f"func f(x: f32[1, 8, {n + 2}, {n + 2}], w: f32[8, 1, 3, 1, 3]) -> f32[1, 8, {n}, {n}] {{\n"
            f"  r = concat({rows}, axis=3)\n  return sum(mul(concat({taps}, axis=5), w), axes=[3, 5])\n}}\n")


@needs_cc
def test_a_row_of_positions_gets_its_taps_outside(tmp_path, monkeypatch):
    taken = stitch.compile(depthwise(40), cache_dir=tmp_path)
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("row_segments"))
    plain = stitch.compile(depthwise(40), cache_dir=tmp_path)
    assert "st_s = st_e" in taken.native.source_path.read_text()
    rng = np.random.default_rng(1)
    v = {"x": rng.standard_normal((1, 8, 42, 42)).astype(np.float32),
         "w": rng.standard_normal((8, 1, 3, 1, 3)).astype(np.float32)}
    (got,), (want,) = taken(**v), plain(**v)
    assert got.tobytes() == want.tobytes()
    np.testing.assert_allclose(got[0], conv(v["x"][0], v["w"].reshape(8, 3, 3), 8, 40, 40).reshape(8, 40, 40),
                               rtol=1e-5, atol=1e-5)


@needs_cc
def test_a_row_of_two_vectors_or_more_gets_its_taps_outside_at_the_machines_width(tmp_path, monkeypatch):
    """MobileNetV2's 28-position rows: two vectors and more of 8 lanes, under two of 16 (where the taps'
    passes over them were slower than the taps inside); outside where they are two vectors at least,
    the same bits either way."""
    from stitch.targets.c.row_segments import MIN_ROW_VECTORS
    from stitch.targets.cc import compiler, compiler_flags, vector_bytes

    lanes = vector_bytes(compiler(), compiler_flags()) // 4
    taken = stitch.compile(depthwise(28), cache_dir=tmp_path)
    assert ("st_s = st_e" in taken.native.source_path.read_text()) is (28 >= MIN_ROW_VECTORS * lanes)
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("row_segments"))
    plain = stitch.compile(depthwise(28), cache_dir=tmp_path)
    rng = np.random.default_rng(2)
    v = {"x": rng.standard_normal((1, 8, 30, 30)).astype(np.float32),
         "w": rng.standard_normal((8, 1, 3, 1, 3)).astype(np.float32)}
    (got,), (want,) = taken(**v), plain(**v)
    assert got.tobytes() == want.tobytes()


@needs_cc
def test_short_rows_and_a_sum_read_in_columns_stay_as_written(tmp_path):
    columns = "func f(x: f32[64, 48]) -> f32[64] { return sum(x, axes=[1]) }"
    for text in (depthwise(7), columns):
        assert "st_s = st_e" not in stitch.compile(text, cache_dir=tmp_path).native.source_path.read_text()
