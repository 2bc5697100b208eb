"""Row fusion (lowering/fuse.py): a tile's nests over the same rows run as one row loop, and what
only they touch keeps one row; products, one-row loops and a scratchpad are left as they are."""

from __future__ import annotations

from pathlib import Path

from stitch.engine.check import check_program
from stitch.engine.parse import parse_file
from stitch.engine.pipeline import compile_graph
from stitch.engine.rules import builtin_rule_files
from stitch.engine.testing import compile_text, executes_like_the_reference, target_text
from stitch.lowering.loops import print_loops
from stitch.lowering.lower import lower
from stitch.targets.target import load_target, parse_target

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

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
