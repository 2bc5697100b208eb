"""A computed left operand whose k runs through a concat is made one piece of k at a time
(targets/c/a_pieces.py): no select per element, the same bits as making it element by element."""

from __future__ import annotations

import pytest
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare
from stitch.engine.schedule.index import FloorDiv, Ix
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
