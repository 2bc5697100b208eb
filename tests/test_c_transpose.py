"""A transpose copy walks its inner loop in blocks (targets/c/transpose.py): whole blocks of a
constant trip count, then the block left over, at every size of a symbolic axis, computing the
same bits as the loops as written."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.targets.c import recognizers
from stitch_testing import needs_cc

CACHE = """func t[p: 1..300](k: f32[3, p, 64]) -> f32[3, 64, p] {
  return mul(transpose(k, perm=[0, 2, 1]), 0.35)
}
"""


@needs_cc
def test_a_symbolic_transpose_in_blocks_computes_what_the_plain_loops_do(tmp_path, monkeypatch):
    taken = stitch.compile(CACHE, cache_dir=tmp_path)
    assert "st_bi < 16" in taken.native.source_path.read_text()
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("transpose"))
    plain = stitch.compile(CACHE, cache_dir=tmp_path)
    assert "st_bi" not in plain.native.source_path.read_text()
    rng = np.random.default_rng(0)
    for p in (1, 15, 16, 17, 33, 300):
        k = rng.standard_normal((3, p, 64)).astype(np.float32)
        (got,), (want,) = taken(k=k), plain(k=k)
        assert got.tobytes() == want.tobytes()
        np.testing.assert_array_equal(got, k.transpose(0, 2, 1) * np.float32(0.35))


@needs_cc
@pytest.mark.parametrize("rows", [3, 16])
def test_a_short_inner_loop_is_left_as_written(rows, tmp_path):
    text = f"func t(x: f32[{rows}, 64]) -> f32[64, {rows}] {{ return mul(transpose(x, perm=[1, 0]), 2.0) }}"
    source = stitch.compile(text, cache_dir=tmp_path).native.source_path.read_text()
    assert "st_bi" not in source
