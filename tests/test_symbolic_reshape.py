"""A reshape that adds or drops unit axes of a value with a symbol in two of its dimensions
(`[4, n, n] -> [1, 4, n, n]`: torch's attention scores between bmm and softmax) compiles and runs
at every size. Regression: its index map divided by the symbolic extent `4n` and built the
quotient's Extent from an Extent (engine/schedule/index.py `_by_symbolic`): a TypeError."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate
from stitch.engine.ir.parse import parse_program
from stitch.engine.ir.tolerance import differences
from stitch.engine.programs import check_entry
from stitch_testing import needs_cc

PROGRAMS = {
    "add a unit axis": ("func f[n: 2..300](s: f32[4, n, n]) -> f32[1, 4, n, n] {\n"
                        "  return exp(reshape(s, shape=[1, 4, n, n]))\n}\n", (4, "n", "n")),
    "drop a unit axis": ("func f[n: 2..300](s: f32[1, 4, n, n]) -> f32[4, n, n] {\n"
                         "  return exp(reshape(s, shape=[4, n, n]))\n}\n", (1, 4, "n", "n")),
    "a trailing unit axis": ("func f[n: 2..300](s: f32[4, n, n]) -> f32[4, n, n, 1] {\n"
                             "  return exp(reshape(s, shape=[4, n, n, 1]))\n}\n", (4, "n", "n")),
}


@needs_cc
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_unit_axes_of_a_square_symbolic_value(name):
    text, shape = PROGRAMS[name]
    program = stitch.compile(text)
    rng = np.random.default_rng(0)
    for n in (2, 7, 33):
        s = rng.standard_normal([n if d == "n" else d for d in shape]).astype(np.float32)
        got = program(s=s)
        want = evaluate(check_entry(parse_program(text)), {"s": s})
        assert got[0].shape == want[0].shape
        assert differences(got, want) == []
