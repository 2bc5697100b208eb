"""Reductions over a row run side by side on consecutive rows by the C backend
(targets/c/pipelined_passes.py): which row loops it takes, and that the programs it writes so equal
the reference, at edge values too, and the rows one after the other."""

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
from stitch.targets.c import recognizers
from stitch.targets.c.emit import KernelWriter
from stitch.targets.c.recognizers import RECOGNIZERS
from stitch_testing import EXAMPLES, sources_holding

pytestmark = pytest.mark.skipif(cpu.compiler() is None, reason="no C compiler on this machine")

AVX512 = cpu.compiler() is not None and cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) == 64
MARK = "const int st_on0"  # the pipelined loop's test of which passes have a row
R, ZERO = Ix.var("r"), Ix.constant(0)
BUFFERS = [Buffer("x", "global", "f32", (8, 64)), Buffer("w", "global", "f32", (8, 64)),
           Buffer("y", "global", "f32", (8,)), Buffer("m", "local", "f32", (1,)),
           Buffer("s", "local", "f32", (1,)), Buffer("l", "local", "f32", (1,)), Buffer("t", "local", "f32", (1,)),
           Buffer("total", "local", "f32", (1,))]


def load(name: str, column: str | None = None, row=R) -> Load:
    return Load(name, (row, Ix.var(column)) if column else (ZERO,))


def op(name: str, *args) -> Op:
    return Op(name, args, "f32")


def reduce(column: str, into: str, how: str, value, n: int = 64, index=(ZERO,)) -> For:
    return For(column, n, "reduce", [Accumulate(into, index, how, value)])


def start(name: str, value: float, index=(ZERO,)) -> Store:
    return Store(name, index, Lit(value, "f32"))


def xent(third=None, n3: int = 64, log_reads: str = "s") -> list:
    """A softmax cross-entropy's row: max, exp sum, log, weighted sum of (x - max - log), into y."""
    return [start("m", float("-inf")), reduce("a", "m", "max", load("x", "a")),
            start("s", 0.0), reduce("b", "s", "sum", op("exp", op("sub", load("x", "b"), load("m")))),
            Store("l", (ZERO,), op("log", load(log_reads))),
            start("y", 0.0, (R,)),
            third or reduce("c", "y", "sum", op("mul", op("sub", op("sub", load("x", "c"), load("m")), load("l")),
                                                load("w", "c")), n3, (R,))]


def written(stmts, rows: int = 8) -> str:
    globals_ = {b.name: b for b in BUFFERS if b.scope == "global"}
    k = KernelWriter(LoopKernel("k0", [b for b in BUFFERS if b.scope != "global"], stmts), globals_, 64,
                     recognizers=RECOGNIZERS)
    k.block([For("r", rows, "serial", stmts)], 1)
    return "\n".join(k.lines)


def test_a_cross_entropy_row_runs_its_three_passes_in_one_loop():
    text = written(xent())
    assert MARK in text and text.count("for (int64_t a = 0; a < 64; a += 16)") == 2  # (all on, or the ends)
    # the max of row r, the exponentials of row r - 1, the weighted sum of row r - 2, which reads the
    # maximum through a copy two rows old and the log through one a row old
    assert "b_x[64 * r + a]" in text and "b_x[64 * r + a + -64]" in text and "b_x[64 * r + a + -128]" in text
    assert "b_m__row2[0]" in text and "b_l__row1[0]" in text and "b_m__row1[0]" in text
    assert "b_s__row" not in text  # (read by its own pass's statements only)
    # finished the oldest row first: the weighted sum, then the log of the sum, then the maximum
    assert text.index("b_y[r + -2] += ") < text.index("b_l[0] = ") < text.index("b_m[0] = st_max_f32")


def test_a_sum_beside_the_rows_sum_of_its_terms_needs_no_copy():
    """y[r], written and read at its own row, and a sum over the rows, in the last pass alone."""
    stmts = xent() + [Accumulate("total", (ZERO,), "sum", Load("y", (R,)))]
    text = written(stmts)
    assert MARK in text and "b_total[0] += b_y[r + -2];" in text and "b_y__row" not in text


@pytest.mark.parametrize("stmts", [
    # no exponentials: left as it was
    [start("m", float("-inf")), reduce("a", "m", "max", load("x", "a")), start("s", 0.0),
     reduce("b", "s", "sum", op("sub", load("x", "b"), load("m")))],
    # the last pass over 48 columns, the others over 64
    xent(n3=48),
    # a pass over 40 columns (not a multiple of 16)
    [start("m", float("-inf")), reduce("a", "m", "max", load("x", "a"), 40), start("s", 0.0),
     reduce("b", "s", "sum", op("exp", op("sub", load("x", "b"), load("m"))), 40)],
    # the maximum reads the log the row before left, which a later pass writes (carried from row to row)
    [start("m", float("-inf")), reduce("a", "m", "max", op("sub", load("x", "a"), load("l"))), start("s", 0.0),
     reduce("b", "s", "sum", op("exp", op("sub", load("x", "b"), load("m")))),
     Store("l", (ZERO,), op("log", load("s")))],
    # the maximum written again after the last pass (two passes write it)
    xent() + [Store("m", (ZERO,), Lit(0.0, "f32"))],
    # the weighted sum reads another row's element of what it writes
    xent(third=reduce("c", "y", "sum", op("mul", load("x", "c"), Load("y", (ZERO,))), 64, (R,))),
    # a row copied on chip between the passes (a loop that is not a reduction)
    xent()[:4] + [For("c", 64, "serial", [Store("x", (R, Ix.var("c")), load("w", "c"))])] + xent()[4:],
    # the weighted sum's terms read the sum itself
    xent(third=reduce("c", "y", "sum", op("mul", load("x", "c"), Load("y", (R,))), 64, (R,))),
    # a maximum of exponentials (not a pass: the exponentials' 16 lanes are for sums)
    [start("m", float("-inf")), reduce("a", "m", "max", op("exp", load("x", "a"))), start("s", 0.0),
     reduce("b", "s", "sum", op("exp", op("sub", load("x", "b"), load("m"))))],
])
def test_what_is_not_pipelined(stmts):
    assert MARK not in written(stmts)


def test_a_value_carried_from_row_to_row_inside_one_pass_is_pipelined():
    """The exponentials read the log the row before left, which their own pass's statements write:
    that pass runs its rows in order, so the value is the one the rows one after the other read."""
    stmts = [start("m", float("-inf")), reduce("a", "m", "max", load("x", "a")), start("s", 0.0),
             reduce("b", "s", "sum", op("exp", op("sub", load("x", "b"), load("l")))),
             Store("l", (ZERO,), op("log", load("s")))]
    text = written(stmts)
    assert MARK in text and "b_l__row" not in text


def test_one_row_is_not_pipelined():
    assert MARK not in written(xent(), rows=1)


ROWS = st.sampled_from([16, 64, 300])
COLUMNS = st.sampled_from([256, 512, 1024])


@st.composite
def row_programs(draw) -> str:
    """A log-softmax over the last axis (from a maximum or a minimum) and what a row makes of it: a
    cross-entropy against weights, a log-sum-exp, a weighted sum beside the log."""
    rows, cols = draw(ROWS), draw(COLUMNS)
    first, z = draw(st.sampled_from([("max", "sub(x, m)"), ("min", "sub(m, x)")]))
    out = draw(st.sampled_from(["sum(mul(sub(z, l), w), axes=[1])", "reshape(add(l, m), shape=[-1])",
                                "add(sum(mul(z, w), axes=[1]), reshape(l, shape=[-1]))",
                                "neg(mean(sum(mul(sub(z, l), w), axes=[1]), axes=[0], keepdims=true))"]))
    shape, rows_out = f"f32[{rows}, {cols}]", "f32[1]" if "mean(" in out else f"f32[{rows}]"
    return (f"func f(x: {shape}, w: {shape}) -> {rows_out} {{\n  m = {first}(x, axes=[1], keepdims=true)\n"
            f"  z = {z}\n  l = log(sum(exp(z), axes=[1], keepdims=true))\n  return {out}\n}}\n")


def with_edges(x: np.ndarray) -> np.ndarray:
    """Rows spread over [-40, 40) with a NaN, -inf and +inf rows, rows of zeros of either sign (the
    maximum's sign of zero), a row of 3e38."""
    x = x * np.float32(80) - np.float32(40)
    x[1, 3] = np.nan
    x[2] = -np.inf
    x[3, 7] = np.inf
    x[4] = 0.0
    x[5] = -0.0
    x[6, ::3] = 3e38
    x[7] = -0.0
    x[7, 5] = 0.0
    return x


@settings(max_examples=10, deadline=None)
@given(row_programs(), st.integers(0, 3))
def test_pipelined_rows_equal_the_reference(tmp_path_factory, text, seed):
    """The build as the machine runs it and the ST_NO_VECTOR_EXP one (rows one after the other) both
    within the reference's tolerance, on inputs with NaN, infinities and signed zeros in rows."""
    cache = tmp_path_factory.mktemp("passes")
    vector = stitch.compile(text, cache_dir=cache)
    scalar = stitch.compile(text, cache_dir=cache, cflags="-O3 -march=native -DST_NO_VECTOR_EXP")
    inputs = random_inputs(vector.graph, seed)
    inputs["x"] = with_edges(inputs["x"])
    want = evaluate(vector.graph, inputs)
    for program in (vector, scalar):
        assert differences(program(**inputs), want, vector.graph) == []


def test_the_property_sees_pipelined_rows(tmp_path_factory):
    if not AVX512:
        pytest.skip("no AVX-512 here: the passes are not pipelined")
    seen = sources_holding(row_programs(), MARK, tmp_path_factory.mktemp("seen"))
    assert sum(seen) >= len(seen) // 2, seen


@pytest.mark.parametrize("rows, cols", [(16, 256), (300, 512), (64, 1024)])
def test_the_maximum_and_the_exponentials_are_the_same_bits_as_row_by_row(tmp_path, monkeypatch, rows, cols):
    """A log-sum-exp's passes (a maximum, a sum of exponentials in `rows.lane_sum`'s order) pipelined
    give the bits the rows one after the other give, NaN, infinities and zeros included."""
    text = (f"func f(x: f32[{rows}, {cols}]) -> f32[{rows}] {{\n  m = max(x, axes=[1], keepdims=true)\n"
            f"  return reshape(add(log(sum(exp(sub(x, m)), axes=[1], keepdims=true)), m), shape=[-1])\n}}\n")
    piped = stitch.compile(text, cache_dir=tmp_path / "a")
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("pipelined_passes"))
    plain = stitch.compile(text, cache_dir=tmp_path / "b")
    if AVX512:
        assert MARK in piped.native.source_path.read_text()
    assert MARK not in plain.native.source_path.read_text()
    x = with_edges(np.random.default_rng(4).random((rows, cols), dtype=np.float32))
    (got,), (want,) = piped(x=x), plain(x=x)
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[4:6]).tolist() == np.signbit(want[4:6]).tolist()


def test_the_cross_entropy_example_is_pipelined_and_equals_the_reference(tmp_path):
    f = stitch.compile(EXAMPLES / "softmax_xent.ir", cache_dir=tmp_path)
    if AVX512:
        assert MARK in f.native.source_path.read_text()
    inputs = random_inputs(f.graph, 2)
    assert differences(f(**inputs), evaluate(f.graph, inputs), f.graph) == []
