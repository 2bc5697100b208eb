"""A decoder step's attention reads its key cache where it is (engine/schedule/kernel.py,
`read_along_sum`; targets/c/dot.py): the query against every key as dot products along each key's
contiguous run, no transposed copy of the cache, at every cache length of one compile, on both targets."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate
from stitch.engine.ir.tolerance import compare
from stitch.engine.schedule.target import load_target
from stitch.lowering.loops import print_loops
from stitch.lowering.lower import lower
from stitch_testing import compile_text, needs_cc, schedule_of

STEP = """func attend[p: 1..300](q: f32[1, 12, 1, 64], past: f32[1, 12, p, 64], k: f32[1, 12, 1, 64],
                            v: f32[1, 12, p + 1, 64]) -> (f32[1, 12, 1, 64], f32[1, 12, p + 1, 64]) {
  keys = concat(past, k, axis=2)
  s = matmul(mul(q, 0.125), transpose(keys, perm=[0, 1, 3, 2]))
  e = exp(sub(s, max(s, axes=[3], keepdims=true)))
  w = div(e, sum(e, axes=[3], keepdims=true))
  return matmul(w, v), keys
}
"""


def test_the_keys_are_read_where_they_are():
    cpu = load_target("cpu")
    text = schedule_of(STEP, cpu)
    # no kernel writes a transposed copy of the keys, and the product packs none per tile
    roots = [line for line in text.splitlines() if line.rstrip().endswith(" root")]
    assert not any("transpose(" in line for line in roots), text
    loops = print_loops(lower(compile_text(STEP, cpu)))
    assert "pack" not in loops
    assert "+= mul(mul(q[0, 3*p1o + p1, 0, r1], 0.125:f32), (r0 < p ? past[" in loops, loops


@needs_cc
@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_every_cache_length_computes_what_the_reference_computes(target, tmp_path):
    compiled = stitch.compile(STEP, target=target, cache_dir=tmp_path)
    if target == "cpu":  # the keys' two sides (the cache, the new key) each summed as dot products
        assert compiled.native.source_path.read_text().count("st_hsum_f32(s0)") == 4
    rng = np.random.default_rng(0)
    for p in (1, 3, 4, 17, 64, 300):
        inputs = {"q": rng.standard_normal((1, 12, 1, 64)), "past": rng.standard_normal((1, 12, p, 64)),
                  "k": rng.standard_normal((1, 12, 1, 64)), "v": rng.standard_normal((1, 12, p + 1, 64))}
        inputs = {n: a.astype(np.float32) for n, a in inputs.items()}
        for got, want in zip(compiled(**inputs), evaluate(compiled.graph, inputs)):
            assert compare(got, want) == "", (target, p)


@needs_cc
def test_keys_of_three_pieces_are_summed_piece_by_piece(tmp_path):
    """A concat of three pieces along the keys: each piece's columns read their own operand (a
    select within a select is cut again, not taken for the outer one's side)."""
    text = """func f[p: 1..100](q: f32[2, 1, 64], a: f32[2, p, 64], b: f32[2, 3, 64], c: f32[2, 1, 64]) -> f32[2, 1, p + 4] {
  keys = concat(concat(a, b, axis=1), c, axis=1)
  return matmul(q, transpose(keys, perm=[0, 2, 1]))
}
"""
    compiled = stitch.compile(text, cache_dir=tmp_path)
    assert "st_hsum_f32(s0)" in compiled.native.source_path.read_text()
    rng = np.random.default_rng(3)
    for p in (1, 5, 100):
        inputs = {"q": rng.standard_normal((2, 1, 64)), "a": rng.standard_normal((2, p, 64)),
                  "b": rng.standard_normal((2, 3, 64)), "c": rng.standard_normal((2, 1, 64))}
        inputs = {n: x.astype(np.float32) for n, x in inputs.items()}
        (got,) = compiled(**inputs)
        assert compare(got, evaluate(compiled.graph, inputs)[0]) == "", p
