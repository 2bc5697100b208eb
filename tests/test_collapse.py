"""A reduction's nested loops over consecutive elements run as one loop (lowering/collapse.py)."""

from __future__ import annotations

import pytest
from stitch.engine.ir.check import check_program
from stitch.engine.ir.parse import parse_program
from stitch.engine.schedule.target import load_target
from stitch.lowering.loops import For, print_loops
from stitch.lowering.lower import lower
from stitch_testing import compile_text, executes_like_the_reference, loops_of

CPU = load_target("cpu")
ACCEL = load_target("accel")

GROUPNORM5 = """func groupnorm5(x: f32[8, 32, 16, 16], gamma: f32[32, 1, 1], beta: f32[32, 1, 1]) \
-> f32[8, 32, 16, 16] {
  g = reshape(x, shape=[8, 4, 8, 16, 16])
  mu = mean(g, axes=[2, 3, 4], keepdims=true)
  d = sub(g, mu)
  var = mean(mul(d, d), axes=[2, 3, 4], keepdims=true)
  n = mul(d, rsqrt(add(var, 1e-5)))
  y = reshape(n, shape=[8, 32, 16, 16])
  return add(mul(y, gamma), beta)
}
"""


def test_a_group_s_sums_over_a_5d_reshape_run_as_one_loop():
    """Before: `for r0 in 0..8 { for r1 in 0..16 { for r2 in 0..16 reduce { k0_v6[0, p1h] += x_s0[0,
    p1h, r0, r1, r2] } } }`, a 16-element inner loop. After: one loop over the group's 2048 elements,
    reading them at the digits of r0 (flat address `2048*p1h + r0`), from x where it is (a group's
    8 KiB are consecutive: plan.read_in_place)."""
    loops = loops_of(GROUPNORM5, CPU)
    assert ("for r0 in 0..2048 reduce {\n"
            "          k0_v6[0, p1h] += x[2*p0o + p0, 8*p1h + r0 // 256, (r0 % 256) // 16, (r0 % 256) % 16]\n") in loops, loops
    assert "for r1 in 0..16 reduce" not in loops
    graph = check_program(parse_program(GROUPNORM5))["groupnorm5"]
    for target in (CPU, ACCEL):
        c = compile_text(GROUPNORM5, target)
        traffic = executes_like_the_reference(lower(c), graph, seed=1)
        assert traffic.read + traffic.written == c.cost.global_bytes


def _reduce_depth(stmts, depth: int = 0) -> int:
    """The deepest run of nested reduce loops."""
    deepest = depth
    for s in stmts:
        if isinstance(s, For):
            deepest = max(deepest, _reduce_depth(s.body, depth + 1 if s.kind == "reduce" else 0))
    return deepest


@pytest.mark.parametrize("text, depth", [
    # a sum over the two trailing axes: one loop over each row's 6 * 10 elements
    ("func f(x: f32[12, 6, 10]) -> f32[12] {\n  return sum(x, axes=[1, 2])\n}\n", 1),
    # a transposed read: the inner loop walks a stride of 10, the loops stay two
    ("func f(x: f32[12, 10, 6]) -> f32[12] {\n  return sum(transpose(x, perm=[0, 2, 1]), axes=[1, 2])\n}\n", 2),
    # the max of a product of two reads over the same two axes: both flat, one loop
    ("func f(x: f32[4, 8, 16], y: f32[4, 8, 16]) -> f32[4] {\n  return max(mul(x, y), axes=[1, 2])\n}\n", 1),
])
@pytest.mark.parametrize("target", [CPU, ACCEL], ids=["cpu", "accel"])
def test_nested_reduce_loops_merge_only_over_consecutive_elements(text, depth, target):
    graph = check_program(parse_program(text))["f"]
    program = lower(compile_text(text, target))
    assert max(_reduce_depth(k.body) for k in program.kernels) == depth, print_loops(program)
    assert executes_like_the_reference(program, graph, seed=2) is not None
