"""A transcendental of a transpose loops along what it reads (targets/c/read_order.py)."""

from __future__ import annotations

import re

import pytest
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare
from stitch_testing import needs_cc


@needs_cc
@pytest.mark.parametrize("op, swapped", [("erf", True), ("neg", False)])
def test_a_transcendental_of_a_transpose_loops_along_what_it_reads(op, swapped, tmp_path):
    """erf(transpose(x)) reads x along its outer loop: the two loops are swapped so the inner one
    reads contiguously and the C compiler vectorizes erf (wav2vec2's GELU over a transposed
    product: 24.6 -> 4.2 ms); a transpose without such an op keeps its loops, writing in order
    (in blocks of the loop along what it writes: targets/c/transpose.py)."""
    text = ("func t(x: f32[1, 40, 48], b: f32[1, 48, 1]) -> f32[1, 48, 40] {\n"
            f"  return {op}(add(mul(transpose(x, perm=[0, 2, 1]), 0.5), b))\n}}\n")
    f = stitch.compile(text, cache_dir=tmp_path)
    source = f.native.source_path.read_text()
    if swapped:  # p1: x's last axis
        assert re.search(r"for \(int64_t p1 = 0; p1 < \d+; \+\+p1\) \{\n[^\n]*b_out0", source), source
    else:
        assert "const int64_t p2 = st_b0 + st_bi; b_out0[" in source, source
    inputs = random_inputs(f.graph, 2)
    (got,) = f(**inputs)
    assert compare(got, evaluate(f.graph, inputs)[0]) == ""
