"""A computed left operand whose k runs through a concat is made one piece of k at a time
(targets/c/a_pieces.py): no select per element, the same bits as making it element by element."""

from __future__ import annotations

import pytest
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare
from stitch.engine.schedule.index import FloorDiv, Ix, Mod
from stitch.lowering.loops import Load, Select
from stitch.targets import cc, cpu
from stitch.targets.c import a_pieces
from stitch_testing import needs_cc

# A conv's windows as the importer writes them, small: the taps side by side along k (k = tap * C +
# channel), each a channels-first input read transposed, so A is computed (a concat) and read across k
TAPS = """func f(x0: f32[16, 40], x1: f32[16, 40], x2: f32[16, 40], w: f32[48, 32]) -> f32[40, 32] {
  a = concat(transpose(x0, perm=[1, 0]), transpose(x1, perm=[1, 0]), transpose(x2, perm=[1, 0]), axis=1)
  return matmul(a, w)
}
"""


def _a_lines(source: str) -> list[str]:
    return [ln for ln in source.splitlines() if "a_pre[0][" in ln and "] = " in ln and "float a0" not in ln]


@needs_cc
@pytest.mark.parametrize("vector_bytes", [32, 64])
def test_a_concat_of_taps_along_k_is_made_a_piece_at_a_time_to_the_same_bits(vector_bytes, tmp_path, monkeypatch):
    """At the machine's width (32 bytes: AVX2's 6 x 2 blocks) and AVX-512's (8 x 3, asserted on the
    C only where the machine cannot run it): three pieces of k, each reading its own input with a plain
    load, and the product's values the same bits as with A made element by element through the
    selects (MAX_PIECES 1: the form before), and the reference's within tolerance."""
    monkeypatch.setattr(cpu, "vector_bytes", lambda cc_, flags: vector_bytes)
    cut = stitch.compile(TAPS, cache_dir=tmp_path / "cut")
    made = _a_lines(cut.native.source_path.read_text())
    assert made and all("?" not in ln for ln in made), made  # (a block of rows and the rows left over)
    read = [next(b for b in ("b_x0", "b_x1", "b_x2") if b in ln) for ln in made]
    assert read == ["b_x0", "b_x1", "b_x2"] * (len(made) // 3), read
    if vector_bytes > cc.vector_bytes(cpu.compiler(), cc.compiler_flags()):
        return  # (AVX-512's C on a machine without it: the form is checked, not run)
    monkeypatch.setattr(a_pieces, "MAX_PIECES", 1)
    selects = stitch.compile(TAPS, cache_dir=tmp_path / "selects")
    before = _a_lines(selects.native.source_path.read_text())
    assert before and all("?" in ln for ln in before)
    inputs = random_inputs(cut.graph, 7)
    (got,), (want,) = cut(**inputs), selects(**inputs)
    assert got.tobytes() == want.tobytes()
    assert compare(got, evaluate(cut.graph, inputs)[0]) == ""


def test_a_floor_quotient_condition_is_cut_where_k_crosses_it():
    """`(k + 3) // 64 < 2` holds for k + 3 < 128; `2 * (k // 64) + 1 < 4` for k < 128 (floor(k / 64) < 2);
    a condition on the row variable, or on k moving backwards, is not cut."""
    x = Ix.of({"k": 1}, 3)
    low, high = Load("a", (Ix.var("k"),)), Load("b", (Ix.var("k"),))
    assert a_pieces.k_split(Select(Ix.var(FloorDiv(x, 64)), 2, low, high, "f32"), "k", "i") == (x, 128)
    two = Ix.of({FloorDiv(Ix.var("k"), 64): 2}, 1)
    assert a_pieces.k_split(Select(two, 4, low, high, "f32"), "k", "i") == (Ix.var("k"), 128)
    assert a_pieces.k_split(Select(Ix.of({"k": 1, "i": 1}), 8, low, high, "f32"), "k", "i") is None
    assert a_pieces.k_split(Select(Ix.var(FloorDiv(Ix.var("k", -1), 4)), 2, low, high, "f32"), "k", "i") is None
    assert a_pieces.k_split(Select(Ix.of({"k": 1, "r0o": 192}), 64, low, high, "f32"), "k", "i") == (
        Ix.of({"k": 1, "r0o": 192}), 64)


# A padded 3x3 conv as the ONNX importer writes it (Conv: the input padded by concats, the windows
# by slices and concats, k = (row tap * 3 + column tap) * C + channel): A's selects are on
# `(k / 16) % 3 < 2`, a remainder, constant between multiples of 16 but not cut where k crosses one
CONV = """func f(x: f32[1, 16, 12, 12], y0: f32[1, 16, 1, 12], y0_1: f32[1, 16, 1, 12], y0_3: f32[1, 16, 14, 1], y0_4: f32[1, 16, 14, 1], W: f32[144, 32], B: f32[32]) -> f32[1, 32, 12, 12] {
  y0_2 = concat(y0, x, y0_1, axis=2)
  y0_5 = concat(y0_3, y0_2, y0_4, axis=3)
  y0_6 = slice(y0_5, axes=[2], starts=[0], ends=[12])
  y0_7 = reshape(y0_6, shape=[1, 16, 12, 1, 14])
  y0_8 = slice(y0_5, axes=[2], starts=[1], ends=[13])
  y0_9 = reshape(y0_8, shape=[1, 16, 12, 1, 14])
  y0_10 = slice(y0_5, axes=[2], starts=[2], ends=[14])
  y0_11 = reshape(y0_10, shape=[1, 16, 12, 1, 14])
  y0_12 = concat(y0_7, y0_9, y0_11, axis=3)
  y0_13 = slice(y0_12, axes=[4], starts=[0], ends=[12])
  y0_14 = reshape(y0_13, shape=[1, 16, 12, 3, 12, 1])
  y0_15 = slice(y0_12, axes=[4], starts=[1], ends=[13])
  y0_16 = reshape(y0_15, shape=[1, 16, 12, 3, 12, 1])
  y0_17 = slice(y0_12, axes=[4], starts=[2], ends=[14])
  y0_18 = reshape(y0_17, shape=[1, 16, 12, 3, 12, 1])
  y0_19 = concat(y0_14, y0_16, y0_18, axis=5)
  y0_20 = transpose(y0_19, perm=[0, 2, 4, 3, 5, 1])
  y0_21 = reshape(y0_20, shape=[1, 144, 144])
  y0_22 = matmul(y0_21, W)
  y0_23 = add(y0_22, B)
  y0_24 = transpose(y0_23, perm=[0, 2, 1])
  y0_25 = reshape(y0_24, shape=[1, 32, 12, 12])
  y = relu(y0_25)
  return y
}
"""


@needs_cc
def test_a_conv_windows_are_decided_once_per_segment_of_k_to_the_same_bits(tmp_path, monkeypatch):
    """A padded conv's taps (`(k / 16) % 3`, no cut where k crosses a value) are decided once per
    segment of k between multiples of 16 (`st_kp`), each segment's pieces plain loads but for the
    padding's selects on the row; the product the same bits as A made element by element through the
    selects (MAX_PIECES 1), and the reference's within tolerance."""
    segmented = stitch.compile(CONV, cache_dir=tmp_path / "segments")
    source = segmented.native.source_path.read_text()
    assert "st_kp" in source
    made = _a_lines(source)
    assert made and not any("% 3" in ln for ln in made), made[:2]
    monkeypatch.setattr(a_pieces, "MAX_PIECES", 1)
    selects = stitch.compile(CONV, cache_dir=tmp_path / "selects")
    assert "st_kp" not in selects.native.source_path.read_text()
    inputs = random_inputs(segmented.graph, 5)
    (got,), (want,) = segmented(**inputs), selects(**inputs)
    assert got.tobytes() == want.tobytes()
    assert compare(got, evaluate(segmented.graph, inputs)[0]) == ""


def test_segments_of_k_on_which_a_condition_is_constant():
    """`((192 * r0o + k) / 128) % 3` is constant between multiples of 128 of 192 * r0o + k; `r0o / 2`
    throughout k (no bounds); `k % 3`, and a quotient moving with the row variable, are not segments."""
    x = Ix.of({"r0o": 192, "k": 1})
    assert a_pieces.segments(Ix.var(Mod(Ix.var(FloorDiv(x, 128)), 3)), "k", "i") == frozenset({(x, 128)})
    assert a_pieces.segments(Ix.var(FloorDiv(Ix.var("r0o"), 2)), "k", "i") == frozenset()
    assert a_pieces.segments(Ix.var(Mod(Ix.var("k"), 3)), "k", "i") is None
    assert a_pieces.segments(Ix.var(FloorDiv(Ix.of({"k": 1, "i": 1}), 4)), "k", "i") is None
