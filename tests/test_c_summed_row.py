"""A row stored on chip and a later sum over it, written as one loop by the C backend
(targets/c/summed_row.py): which statement sequences it fuses, and that the results of fused
programs equal the reference's."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import differences
from stitch.engine.schedule.index import Ix
from stitch.lowering.loops import Accumulate, Buffer, For, Lit, Load, LoopKernel, Op, Store
from stitch.targets import cc, cpu
from stitch.targets.c.emit import KernelWriter
from stitch.targets.c.recognizers import RECOGNIZERS
from stitch_testing import sources_holding

pytestmark = pytest.mark.skipif(cpu.compiler() is None, reason="no C compiler on this machine")

I, J, ZERO = Ix.var("i"), Ix.var("j"), Ix.constant(0)
BUFFERS = [Buffer("x", "global", "f32", (64,)), Buffer("y", "global", "f32", (64,)),
           Buffer("r", "local", "f32", (64,)), Buffer("s", "local", "f32", (1,)), Buffer("t", "local", "f32", (1,))]


def row(reads: str = "x") -> For:
    return For("i", 64, "serial", [Store("r", (I,), Op("add", (Load(reads, (I,)), Lit(1.0, "f32")), "f32"))])


def total(term=None) -> For:
    return For("j", 64, "reduce", [Accumulate("s", (ZERO,), "sum", term or Load("r", (J,)))])


def start(value=None) -> Store:
    return Store("s", (ZERO,), value or Lit(0.0, "f32"))


def copy_out(reads: str = "r", writes: str = "y") -> For:
    return For("k", 64, "serial", [Store(writes, (Ix.var("k"),), Load(reads, (Ix.var("k"),)))])


def written(stmts) -> str:
    globals_ = {b.name: b for b in BUFFERS if b.scope == "global"}
    k = KernelWriter(LoopKernel("k0", [b for b in BUFFERS if b.scope != "global"], stmts), globals_, 64,
                     recognizers=RECOGNIZERS)
    k.block(stmts, 1)
    return "\n".join(k.lines)


def test_a_row_and_its_sum_become_one_loop():
    text = written([row(), start(), total()])
    assert "st_acc += st_e;" in text and "for (int64_t j" not in text  # (the sum's own loop is gone)
    assert text.index("b_s[0] = ") < text.index("st_acc")  # the sum's start first


def test_a_sum_of_a_function_of_the_row_and_a_copy_between_them():
    square = Op("mul", (Load("r", (J,)), Load("r", (J,))), "f32")
    text = written([row(), copy_out(), start(), total(square)])
    assert "st_acc += (st_e * st_e);" in text
    assert text.index("st_acc") < text.index("b_y[")  # the copy after the fused loop, reading the whole row


@pytest.mark.parametrize("stmts", [
    [row(), copy_out(reads="r", writes="x"), start(), total()],  # writes what the row reads
    [row(), copy_out(reads="s", writes="y"), start(), total()],  # reads the sum before it is summed
    [row(), Store("t", (ZERO,), Lit(2.0, "f32")), start(Load("t", (ZERO,))), total()],  # the start reads what
    # a statement before it writes
    [row(), start(), total(Load("r", (Ix.var("j") + Ix.constant(1),)))],  # the sum reads another element
    [row(), start(Load("r", (ZERO,))), total()],  # the start reads the row
])
def test_what_is_not_fused(stmts):
    assert "st_acc" not in written(stmts)


@pytest.mark.parametrize("cols", [16, 40, 768])
def test_a_residual_layer_norm_sums_its_rows_as_they_are_made_and_equals_the_reference(tmp_path, cols):
    """The sum returned and layer-normed (a copy of the row to an output between the row and its
    sum); the mean and the squared deviations each summed in the loop writing their row; the
    plain build and the ST_NO_VECTOR_EXP one within the tolerance of the reference."""
    text = (f"func f(x: f32[64, {cols}], r: f32[64, {cols}]) -> (f32[64, {cols}], f32[64, {cols}]) {{\n"
            "  h = add(x, r)\n  m = mean(h, axes=[-1], keepdims=true)\n  d = sub(h, m)\n"
            "  v = mean(mul(d, d), axes=[-1], keepdims=true)\n  return h, mul(d, rsqrt(add(v, 1e-5)))\n}\n")
    vector = stitch.compile(text, cache_dir=tmp_path)
    if cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) == 64:
        source = vector.native.source_path.read_text()
        assert "st_acc += st_e;" in source and "st_acc += (st_e * st_e);" in source
    scalar = stitch.compile(text, cache_dir=tmp_path, cflags="-O3 -march=native -DST_NO_VECTOR_EXP")
    inputs = random_inputs(vector.graph, 6)
    inputs["x"] = inputs["x"] * np.linspace(-30, 30, cols, dtype=np.float32)  # rows far from their mean
    want = evaluate(vector.graph, inputs)
    for program in (vector, scalar):
        assert differences(program(**inputs), want, vector.graph) == []


@st.composite
def last_axis_programs(draw) -> str:
    """A row made from the inputs, summed over the last axis (its sum, its mean, a sum of a
    function of it), the row maybe returned too (a copy between the row and its sum)."""
    rows, cols = draw(st.sampled_from([(4, 16), (8, 40), (16, 768), (3, 1000)]))
    row = draw(st.sampled_from(["add(x, r)", "exp(sub(x, max(x, axes=[1], keepdims=true)))", "mul(x, r)",
                                "sub(x, mean(x, axes=[1], keepdims=true))"]))
    total = draw(st.sampled_from(["sum(h, axes=[1], keepdims=true)", "mean(mul(h, h), axes=[1], keepdims=true)",
                                  "sum(mul(h, 0.5), axes=[1], keepdims=true)"]))
    both = draw(st.booleans())
    t = f"f32[{rows}, {cols}]"
    return (f"func f(x: {t}, r: {t}) -> {f'({t}, {t})' if both else t} {{\n  h = {row}\n  s = {total}\n"
            f"  return div(h, add(abs(s), 1.0)){', h' if both else ''}\n}}\n")


@settings(max_examples=10, deadline=None)
@given(last_axis_programs(), st.integers(0, 3))
def test_rows_summed_as_they_are_made_equal_the_reference(tmp_path_factory, text, seed):
    """The build as the machine runs it and the ST_NO_VECTOR_EXP one, both within the reference's
    tolerance on inputs spread over [-20, 20)."""
    cache = tmp_path_factory.mktemp("rows")
    vector = stitch.compile(text, cache_dir=cache)
    scalar = stitch.compile(text, cache_dir=cache, cflags="-O3 -march=native -DST_NO_VECTOR_EXP")
    inputs = random_inputs(vector.graph, seed)
    inputs["x"] = inputs["x"] * np.float32(20) - np.float32(25)
    want = evaluate(vector.graph, inputs)
    for program in (vector, scalar):
        assert differences(program(**inputs), want, vector.graph) == []


def test_the_property_sees_summed_rows(tmp_path_factory):
    """Most drawn programs sum a row as it is made where the machine has AVX-512."""
    if cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) != 64:
        pytest.skip("no AVX-512 here: the fused rows are not written")
    seen = sources_holding(last_axis_programs(), "= st_e; st_acc +=", tmp_path_factory.mktemp("seen"))
    assert sum(seen) >= len(seen) // 2, seen
