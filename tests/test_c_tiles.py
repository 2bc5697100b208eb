"""Tile loops nested directly in one another are one tile index to the runtime (targets/c/tiles.py,
`_parallel_nest`): a symbolic axis's whole tiles around a static axis's tiles are shared by every
thread, at every size, computing what the reference computes."""

from __future__ import annotations

import re

import numpy as np
import stitch
from stitch.engine.ir.interp import evaluate
from stitch.engine.ir.tolerance import differences
from stitch_testing import needs_cc

PROJ = """func proj[n: 1..1024](x: f32[n, 3072], w: f32[3072, 768]) -> f32[n, 768] {
  return matmul(x, w)
}
"""


@needs_cc
def test_nested_tile_loops_are_one_index(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3072, 768)).astype(np.float32)
    compiled = stitch.compile(PROJ, cache_dir=tmp_path, weights={"w": w})
    source = compiled.native.source_path.read_text()
    assert "for (int64_t st_tile = lo; st_tile < hi; ++st_tile) {" in source
    # the runtime gets every tile of the nest: the symbolic count of row tiles times the column tiles
    assert re.search(r"st_run\(kernel_k0_tiles0_run, &a, \(\d+LL\*ST_FDIV\(\(st_dim_n\), \d+LL\)\)", source), source
    before = stitch.num_threads()
    try:
        for threads in (1, 2):
            stitch.set_num_threads(threads)
            for n in (1, 77, 333, 600):
                x = rng.standard_normal((n, 3072)).astype(np.float32)
                (got,) = compiled(x=x)
                assert differences([got], evaluate(compiled.graph, {"x": x, "w": w}), compiled.graph) == [], n
    finally:
        stitch.set_num_threads(before)
