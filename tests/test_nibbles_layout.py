"""4-bit weights laid out for 8-lane products (lowering/nibbles.py): where the machine's vectors are
32 bytes, a one-row product's bound nibbles (and its scales, one per block of 32) are read from
blocks the prologue makes once, 8 columns a 32-byte word; each block holds the weight's own bytes
(and scales) moved, none changed or repeated; the loops on the numpy executor compute what the
reference does; and nothing is laid out where the columns are not whole groups of 8, K not whole
blocks of 32, or the vectors are AVX-512's."""

from __future__ import annotations

import numpy as np
import pytest
from stitch.engine.ir.interp import evaluate
from stitch.engine.ir.tolerance import differences
from stitch.engine.schedule import target as machine
from stitch.engine.schedule.target import load_target
from stitch.lowering.bind import bind
from stitch.lowering.execute import execute
from stitch.lowering.loops import print_loops
from stitch.lowering.lower import lower
from stitch_testing import compile_text
from test_c_nibble_dot import nibbles, weights


@pytest.fixture
def avx2(monkeypatch):
    """The machine's vectors read as AVX2's 32 bytes (the suite pins AVX-512's 64: tests/conftest.py),
    on an AMD core (the laid-out form's subnormal operands: lowering/passes.py SUBNORMALS_AT_SPEED)."""
    monkeypatch.setattr(machine, "machine_vector_bytes", lambda cpuinfo=None: 32)
    monkeypatch.setattr(machine, "machine_vendor", lambda cpuinfo=None: "AuthenticAMD")


def test_the_machines_vendor_is_read_from_cpuinfo(tmp_path):
    intel, bare = tmp_path / "intel", tmp_path / "bare"  # (read once a path: functools.cache)
    intel.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n")
    bare.write_text("processor\t: 0\n")
    assert machine.machine_vendor(intel) == "GenuineIntel"
    assert machine.machine_vendor(bare) is None
    assert machine.machine_vendor(tmp_path / "absent") is None


def laid_out(text: str):
    compiled = compile_text(text, load_target("cpu"))
    return compiled, lower(compiled, tuple(compiled.graph.param_names[1:]))


def test_the_nibbles_and_scales_are_read_from_blocks_8_columns_a_word(avx2):
    compiled, loops = laid_out(nibbles(256, 40, 32, "literal"))
    text = print_loops(loops)
    # (tiles of 8 columns: one group a tile, nb2 the group within the groups a block interleaves)
    assert ("b_k0_nibbles0[p1o, nb0, nb1, nb2, nb3, nb4, nb5] = b[8*nb0 + 8*nb2 + 8*p1o + nb4, "
            "16*nb1 + 4*nb3 + nb5]") in text, text
    assert "s_k0_nibbles1[p1o, nb0, nb1, nb2, nb3] = s[8*nb0 + 8*nb2 + 8*p1o + nb3, nb1]" in text, text
    assert "b_k0_nibbles0[p1o, 0, r0 // 32, 0, (r0 // 8) % 4, p1, (r0 // 2) % 4]" in text, text
    assert "s_k0_nibbles1[p1o, 0, r0 // 32, 0, p1]" in text, text
    assert {b.name for b in loops.params} == {"x", "b_k0_nibbles0", "s_k0_nibbles1"}
    values = weights(compiled.graph, 2)
    x = {"x": values.pop("x")}
    blocks = bind(loops, values)
    # the weight's bytes and the scales, each once, moved: a column's 4 bytes of 8 k, 8 columns a word
    b, s = values["b"], values["s"]
    assert blocks["b_k0_nibbles0"].dtype == np.uint8 and blocks["b_k0_nibbles0"].size == b.size
    words = blocks["b_k0_nibbles0"].reshape(5, 8, 4, 8, 4)  # (tile of 8 columns, block, word, column, byte)
    np.testing.assert_array_equal(words.transpose(0, 3, 1, 2, 4).reshape(40, 128), b)
    np.testing.assert_array_equal(blocks["s_k0_nibbles1"].reshape(5, 8, 8).transpose(0, 2, 1).reshape(40, 8), s)
    (got,), _ = execute(loops, x | blocks)
    assert differences([got], evaluate(compiled.graph, x | values), compiled.graph) == []


@pytest.mark.parametrize("case, zero_points, scales_laid_out", [
    (nibbles(256, 40, 32, "tensor"), True, True),  # zero points: a u8 tensor, read as it is
    (nibbles(192, 48, 64, "none"), False, False),  # blocks of 64: laid out per 32, each scale would repeat
])
def test_zero_points_and_coarser_blocks(avx2, case, zero_points, scales_laid_out):
    compiled, loops = laid_out(case)
    names = {b.name for b in loops.params}
    assert "b" not in names and any(n.startswith("b_") and "nibbles" in n for n in names), names
    assert ("z" in names) == zero_points and ("s" not in names) == scales_laid_out, names
    values = weights(compiled.graph, 4)
    x = {"x": values.pop("x")}
    (got,), _ = execute(loops, x | bind(loops, values))
    assert differences([got], evaluate(compiled.graph, x | values), compiled.graph) == []


@pytest.mark.parametrize("case", [
    nibbles(80, 40, 32, "literal"),  # a partial block of K
    nibbles(256, 37, 32, "literal"),  # 37 columns: tiles of whole groups of 8 are not there
])
def test_not_where_the_blocks_or_groups_are_not_whole(avx2, case):
    assert "nibbles" not in print_loops(laid_out(case)[1])


def test_not_with_avx512_vectors():
    assert "nibbles" not in print_loops(laid_out(nibbles(256, 40, 32, "literal"))[1])


def test_wide_tiles_interleave_four_groups_a_block(avx2):
    """Tiles of whole groups of 32 columns: a block's words of 4 groups follow one another (one stream
    for the recognizer's 4 groups); the block holds the weight's bytes, each once."""
    compiled, loops = laid_out(nibbles(128, 256, 32, "literal"))
    (block,) = [b for b in loops.params if b.name.startswith("b_")]
    assert block.shape[-4:] == (4, 4, 8, 4), block.shape  # (groups, words, columns, bytes) of a block
    values = weights(compiled.graph, 6)
    x = {"x": values.pop("x")}
    arrays = bind(loops, values)
    assert np.array_equal(np.sort(arrays[block.name].ravel()), np.sort(values["b"].ravel()))
    (got,), _ = execute(loops, x | arrays)
    assert differences([got], evaluate(compiled.graph, x | values), compiled.graph) == []
