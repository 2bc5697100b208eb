"""Row fusion (lowering/fuse.py): a tile's nests over the same rows run as one row loop, and what
only they touch keeps one row; products, one-row loops and a scratchpad are left as they are."""

from __future__ import annotations


from stitch.engine.ir.check import check_program
from stitch.engine.ir.parse import parse_file
from stitch.engine.pipeline import compile_graph
from stitch.engine.rewrite.rules import builtin_rule_files
from stitch.engine.schedule.target import load_target
from stitch.lowering.loops import Ix, print_loops
from stitch.lowering.lower import lower
from stitch_testing import EXAMPLES, executes_like_the_reference


SOFTMAX = """\
kernel k0 {
  alloc local k0_v3: f32[1]
  alloc local k0_v1: f32[1, 1024]
  alloc local k0_v4: f32[1]
  for p0o in 0..64 parallel {
    for p0 in 0..64 serial {
      k0_v3[0] = -inf:f32
      for r0 in 0..1024 reduce {
        k0_v3[0] max= x[64*p0o + p0, r0]
      }
      for p1 in 0..1024 serial {
        k0_v1[0, p1] = exp(sub(x[64*p0o + p0, p1], k0_v3[0]))
      }
      k0_v4[0] = 0:f32
      for r1 in 0..1024 reduce {
        k0_v4[0] += k0_v1[0, r1]
      }
      for p1 in 0..1024 serial {
        out0[64*p0o + p0, p1] = div(k0_v1[0, p1], k0_v4[0])
      }
    }
  }
}
"""


def example(name: str):
    return next(iter(check_program(parse_file(EXAMPLES / f"{name}.ir")).values()))


def test_softmax_runs_one_row_at_a_time_with_its_values_in_one_row():
    """Before: five nests over the tile's 64 rows, the exponentials a [64, 1024] buffer. After: one
    row loop; the row's maximum and sum are scalars, its exponentials one row."""
    c = compile_graph(example("softmax"), builtin_rule_files(), load_target("cpu"))
    program = lower(c)
    assert print_loops(program).endswith(SOFTMAX)
    executes_like_the_reference(program, c.graph, 3)


def test_a_scratchpad_keeps_the_nests_apart():
    c = compile_graph(example("softmax"), builtin_rule_files(), load_target("accel"))
    text = print_loops(lower(c))
    assert text.count("for p0 in 0..") >= 4 and "alloc local k0_v1: f32[1, 1024]" not in text


def test_a_row_reading_another_rows_values_is_not_fused():
    """The second nest reads row 3 - p0 of what the first wrote, and row 0 beside row p0: run one
    row at a time, those would be read before they are written. Both stay apart; a legal pair fuses."""
    from stitch.lowering.fuse import fuse_rows
    from stitch.lowering.loops import Buffer, For, Ix, Load, LoopKernel, LoopProgram, Op, Store

    p0, p1 = Ix.var("p0"), Ix.var("p1")

    def program(read: tuple) -> LoopProgram:
        first = For("p0", 4, "serial", [For("p1", 8, "serial", [Store("b", (p0, p1), Load("x", (p0, p1)))])])
        second = For("p0", 4, "serial", [For("p1", 8, "serial", [
            Store("out", (p0, p1), Op("add", (Load("b", read), Load("x", (p0, p1))), "f32"))])])
        kernel = LoopKernel("k0", [Buffer("b", "shared", "f32", (4, 8))], [first, second])
        return LoopProgram("f", [Buffer("x", "global", "f32", (4, 8))], ["out"], [], [kernel],
                           [Buffer("out", "global", "f32", (4, 8))])

    for read in ((Ix.constant(3) - p0, p1), (Ix.constant(0), p1)):
        assert fuse_rows(program(read)) == program(read)
    fused = fuse_rows(program((p0, p1)))
    (loop,) = fused.kernels[0].body
    assert len(loop.body) == 2 and fused.kernels[0].allocs == [Buffer("b", "local", "f32", (1, 8))]


def test_products_keep_their_rows_in_one_nest():
    c = compile_graph(example("mlp_large"), builtin_rule_files(), load_target("cpu"))
    text = print_loops(lower(c))
    assert "+= mul(" in text
    (nest,) = [line for line in text.splitlines() if "+= mul(" in line]
    assert nest.startswith("          ")  # rows, k and columns: three loops around it, not one row loop


def test_a_reduction_over_the_rows_joins_the_row_loop_of_what_it_sums(tmp_path, monkeypatch):
    """Layer norm over the first axis: the mean's and the variance's sums over the 32 rows each run
    in the row loop of the nest whose rows they add (one pass over the tile instead of two), their
    initial values moved ahead of it. The sums add the same terms in the same order: the compiled
    outputs are bit for bit those of the nests apart."""
    import stitch
    from stitch.engine.ir.interp import random_inputs
    from stitch.lowering import fuse

    c = compile_graph(example("layernorm"), builtin_rule_files(), load_target("cpu"))
    text = print_loops(lower(c))
    assert " reduce {" not in text
    assert ("k0_v5[p1, p2] = 0:f32\n      }\n    }\n    for p0 in 0..32 serial {" in text
            and "for p2 in 0..32 serial {\n          k0_v5[p1, p2] += k0_v4[p0, p1, p2]" in text)
    executes_like_the_reference(lower(c), c.graph, 2)
    fused = stitch.compile(EXAMPLES / "layernorm.ir", cache_dir=tmp_path)
    monkeypatch.setattr(fuse, "_over_rows", lambda a, b: b if fuse._same_rows(a, b) else None)
    separate = stitch.compile(EXAMPLES / "layernorm.ir", cache_dir=tmp_path)
    assert " reduce {" in print_loops(separate.loops)
    inputs = random_inputs(c.graph, 5)
    for a, b in zip(fused(**inputs), separate(**inputs)):
        assert (a == b).all()


def _sum_rows(init_reads: str, second_reads: str, init_first: bool = False):
    """A row nest writing v[p0, :], an initial value of `acc` (or before the row nest), a sum over
    the rows of v into acc."""
    from stitch.lowering.loops import Accumulate, Buffer, For, Ix, Lit, Load, LoopKernel, LoopProgram, Op, Store

    p0, p1, r0 = Ix.var("p0"), Ix.var("p1"), Ix.var("r0")
    first = For("p0", 4, "serial", [For("p1", 8, "serial", [
        Store("v", (p0, p1), Op("add", (Load("x", (p0, p1)), Load(second_reads, (Ix.constant(0), p1))), "f32"))])])
    init = For("p1", 8, "serial", [Store("acc", (Ix.constant(0), p1), Load(init_reads, (Ix.constant(0), p1))
                                         if init_reads != "zero" else Lit(0.0, "f32"))])
    total = For("r0", 4, "reduce", [For("p1", 8, "serial", [Accumulate("acc", (Ix.constant(0), p1), "sum",
                                                                       Load("v", (r0, p1)))])])
    out = For("p1", 8, "serial", [Store("out", (Ix.constant(0), p1), Load("acc", (Ix.constant(0), p1)))])
    kernel = LoopKernel("k0", [Buffer("v", "shared", "f32", (4, 8)), Buffer("acc", "shared", "f32", (1, 8))],
                        [init, first, total, out] if init_first else [first, init, total, out])
    return LoopProgram("f", [Buffer("x", "global", "f32", (4, 8))], ["out"], [], [kernel],
                       [Buffer("out", "global", "f32", (1, 8))])


def test_a_sum_over_the_rows_fuses_only_where_nothing_in_the_run_sees_it_partly_summed():
    """The sum joins the row loop and its initial value moves ahead; not where the row nest reads
    the accumulator (it would see a partial sum), nor where the initial value reads what the row
    nest writes (it cannot move ahead of it)."""
    from stitch.lowering.fuse import fuse_rows

    fused = fuse_rows(_sum_rows("zero", "x")).kernels[0].body
    assert [type(s).__name__ for s in fused] == ["For", "For", "For"]
    init, rows, out = fused
    assert init.var == "p1" and rows.var == "p0" and len(rows.body) == 2 and rows.body[1].body[0].index[1] == Ix.var("p1")
    for apart in (_sum_rows("zero", "acc", init_first=True), _sum_rows("v", "x")):
        assert fuse_rows(apart) == apart


def test_a_reduction_whose_own_loop_has_the_row_loops_name_stays_apart():
    """`sum(sum(x, axes=[0]))`: the column sums' initial values run over r0, and the sum over the rows
    r1 holds its own loop r0; read as r0 it would be captured (found by the bound-programs property
    test: x[r0, r0] summed, a wrong answer)."""
    from stitch.engine.pipeline import check_entry, read_program

    graph = check_entry(read_program("func f(x: f32[2, 2]) -> f32[] { return sum(sum(x, axes=[0])) }"))
    program = lower(compile_graph(graph, builtin_rule_files(), load_target("cpu")))
    assert "for r1 in 0..2 reduce {\n    for r0 in 0..2 serial {" in print_loops(program)
    executes_like_the_reference(program, graph, 1)


def test_two_nests_adding_to_one_sum_over_the_rows_stay_apart():
    """Both nests add each row's terms to `acc`: fused, the two nests' terms would interleave, another
    order of the sum than the nests apart give."""
    from stitch.lowering.fuse import fuse_rows
    from stitch.lowering.loops import Accumulate, Buffer, For, Load, LoopKernel, LoopProgram, Op, Store

    p0, p1 = Ix.var("p0"), Ix.var("p1")

    def adding(value):
        return For("p0", 4, "serial", [For("p1", 8, "serial", [Accumulate("acc", (Ix.constant(0), p1), "sum", value)])])

    x = Load("x", (p0, p1))
    out = For("p1", 8, "serial", [Store("out", (Ix.constant(0), p1), Load("acc", (Ix.constant(0), p1)))])
    kernel = LoopKernel("k0", [Buffer("acc", "shared", "f32", (1, 8))],
                        [adding(x), adding(Op("mul", (x, x), "f32")), out])
    program = LoopProgram("f", [Buffer("x", "global", "f32", (4, 8))], ["out"], [], [kernel],
                          [Buffer("out", "global", "f32", (1, 8))])
    assert fuse_rows(program) == program
