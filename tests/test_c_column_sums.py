"""A loop over the rows of an on-chip tile whose row loops update the rows in place and add them
into sums over the rows, written by the C backend with the columns outside and each sum's lanes in
a register (targets/c/column_sums.py): which loops it takes, and that its results are the plain
loops' bit for bit and the reference's."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import stitch
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import differences
from stitch.engine.schedule.index import Ix
from stitch.lowering.loops import Accumulate, Buffer, For, Load, LoopKernel, Op, Store
from stitch.targets import cc, cpu
from stitch.targets.c import recognizers
from stitch.targets.c.emit import KernelWriter
from stitch.targets.c.recognizers import RECOGNIZERS
from stitch_testing import sources_holding

pytestmark = pytest.mark.skipif(cpu.compiler() is None, reason="no C compiler on this machine")

R, C = Ix.var("r"), Ix.var("c")
BUFFERS = [Buffer("g", "global", "f32", (32 * 64,)), Buffer("v", "local", "f32", (32 * 64,)),
           Buffer("m", "local", "f32", (64,)), Buffer("s", "local", "f32", (64,))]


def at(row_stride: int = 64) -> tuple[Ix, ...]:
    return (R * row_stride + C,)


def deviations(buffer: str = "v", index=None, columns: int = 64) -> For:
    index = index or at()
    return For("c", columns, "serial", [Store(buffer, index, Op("sub", (Load(buffer, index), Load("m", (C,))), "f32"))])


def squares(value=None, columns: int = 64, index=None) -> For:
    v = Load("v", index or at())
    return For("c", columns, "serial", [Accumulate("s", (C,), "sum", value or Op("mul", (v, v), "f32"))])


def written(*nests) -> str:
    k = KernelWriter(LoopKernel("k0", [b for b in BUFFERS if b.scope != "global"], []),
                     {b.name: b for b in BUFFERS if b.scope == "global"}, 64, recognizers=RECOGNIZERS)
    k.block([For("r", 32, "serial", list(nests))], 1)
    return "\n".join(k.lines)


@pytest.mark.parametrize("columns, blocks", [(64, 4), (128, 4), (32, 2), (96, 2), (16, 1), (48, 1)])
def test_the_rows_become_the_inner_loop_and_the_sums_stay_in_registers(columns, blocks):
    """Up to four blocks of 16 columns a pass over the rows (four sums' chains at once), each
    statement written for every block in turn."""
    rows = at(row_stride=max(64, columns))
    text = written(deviations(columns=columns, index=rows), squares(columns=columns, index=rows))
    names = [f"_{j}" for j in range(blocks)] if blocks > 1 else [""]
    assert text.index(f"for (int64_t c = 0; c < {columns}; c += {16 * blocks})") < text.index(
        "for (int64_t r = 0; r < 32; ++r)")
    for j, name in enumerate(names):
        at_j = f"c + {16 * j}" if j else "c"
        assert f"st_c0{name} += (st_w0{name} * st_w0{name});" in text  # the deviation just stored, not loaded again
        assert f"st_f0{name} = (*(st_vf32 *)&b_m[{at_j}]);" in text  # the mean loaded once a block of columns
    assert f"st_c0_{blocks}" not in text
    stores = [line for line in text.splitlines() if "st_vf32 st_w0" in line]
    sums = [line for line in text.splitlines() if "+= (st_w0" in line]
    assert len(stores) == len(sums) == blocks
    assert text.index(stores[-1]) < text.index(sums[0])  # statement by statement


@pytest.mark.parametrize("nests", [
    (deviations(index=at(row_stride=16)), squares(index=at(row_stride=16))),  # rows closer than a row of
    # columns: they overlap
    (deviations(buffer="g"), squares()),  # global memory: the columns outside would stride it
    (deviations(), squares(value=Load("s", (C,)))),  # a sum read inside the loop
    (deviations(), squares(value=Load("v", (R * 64 + C + Ix.constant(1),)))),  # another element of a written row
    (deviations(), squares(value=Op("exp", (Load("v", at()),), "f32"))),  # exponentials (ST_NO_VECTOR_EXP's)
    (deviations(columns=40), squares(columns=40)),  # columns not a multiple of 16
    (deviations(),),  # no sum
])
def test_what_is_not_taken(nests):
    assert "st_c0" not in written(*nests)


@pytest.mark.parametrize("rows, cols", [(512, 128), (40, 48)])
def test_a_layer_norm_over_the_first_axis_equals_the_plain_loops_bit_for_bit(tmp_path, monkeypatch, rows, cols):
    """The same program with column_sums turned off computes the same bits (each element is
    updated in the order of the rows either way), and both are within the reference's tolerance."""
    text = (f"func f(x: f32[{rows}, 4, {cols}], g: f32[4, {cols}]) -> f32[{rows}, 4, {cols}] {{\n"
            "  m = mean(x, axes=[0])\n  d = sub(x, m)\n  v = mean(mul(d, d), axes=[0])\n"
            "  return mul(mul(d, rsqrt(add(v, 1e-5))), g)\n}\n")
    taken = stitch.compile(text, cache_dir=tmp_path)
    if cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) == 64:
        assert "st_c0" in taken.native.source_path.read_text()
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("column_sums"))
    plain = stitch.compile(text, cache_dir=tmp_path)
    assert "st_c0" not in plain.native.source_path.read_text()
    inputs = random_inputs(taken.graph, 7)
    inputs["x"] = inputs["x"] * np.float32(40) - np.float32(30)
    got, want = taken(**inputs), plain(**inputs)
    assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(got, want))
    assert differences(got, evaluate(taken.graph, inputs), taken.graph) == []


@st.composite
def first_axis_programs(draw) -> str:
    """Reductions over the first axis whose tile updates its rows in place and sums them: a layer
    norm's shapes (tiles of a multiple of 16 columns or not), heads, sums and outputs."""
    rows, a = draw(st.sampled_from([8, 40, 128])), draw(st.sampled_from([1, 3]))
    # one draw in five 48 columns: tiles of a width not a multiple of 16, left to gcc
    cols = draw(st.sampled_from([128, 256])) if draw(st.integers(0, 4)) else 48
    first = draw(st.sampled_from(["x", "add(x, x)", "mul(x, 2.5)"]))
    reduce = draw(st.sampled_from(["mean", "sum"]))
    term = draw(st.sampled_from(["mul(d, d)", "mul(d, 3.0)", "sub(d, 1.0)"]))
    return (f"func f(x: f32[{rows}, {a}, {cols}]) -> f32[{rows}, {a}, {cols}] {{\n  e = {first}\n"
            f"  m = {reduce}(e, axes=[0])\n  d = sub(e, m)\n  v = mean({term}, axes=[0])\n"
            "  return mul(d, rsqrt(add(abs(v), 1e-5)))\n}\n")


def taken_and_plain(text: str, cache) -> tuple:
    taken = stitch.compile(text, cache_dir=cache)
    with mock.patch.object(recognizers, "RECOGNIZERS", recognizers.without("column_sums")):
        plain = stitch.compile(text, cache_dir=cache)
    return taken, plain


@settings(max_examples=10, deadline=None)
@given(first_axis_programs(), st.integers(0, 3))
def test_column_sums_compute_the_plain_loops_bits_and_the_reference(tmp_path_factory, text, seed):
    taken, plain = taken_and_plain(text, tmp_path_factory.mktemp("columns"))
    inputs = random_inputs(taken.graph, seed)
    inputs["x"] = inputs["x"] * np.float32(20) - np.float32(15)
    got = taken(**inputs)
    assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(got, plain(**inputs)))
    assert differences(got, evaluate(taken.graph, inputs), taken.graph) == []


def test_the_property_sees_column_sums(tmp_path_factory):
    """Most drawn programs are written with column sums where the machine has AVX-512 (the property
    above would prove little otherwise)."""
    if cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) != 64:
        pytest.skip("no AVX-512 here: column sums are not written")
    seen = sources_holding(first_axis_programs(), "st_c0", tmp_path_factory.mktemp("seen"))
    assert sum(seen) >= len(seen) // 2, seen
