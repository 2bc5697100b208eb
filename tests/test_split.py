"""Kernel axes split where a held value's index divides them (engine/schedule/split.py; issue 48, item 1).

Group norm's statistics, read by each channel of their group through a reshape, were made once per
channel: the kernel runs over the output's channels `p1` and the group's mean sits at `p1 // 8`.
Split, `p1 = 8*p1h + p1l`, each group's sums are made once and the reads of `x` share one staged
region (read in place on the cpu target, copied on the accelerator).
Every test compares what lowering makes with the numpy reference interpreter.
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.ir.check import check_program
from stitch.engine.ir.parse import parse_program
from stitch.engine.schedule.cost import KernelCost, schedule_cost
from stitch.engine.schedule.facts import facts
from stitch.engine.schedule.plan import candidate_plans, slice_elems
from stitch.engine.schedule.price import price_plan
from stitch.engine.schedule.split import axis_splits, planned_kernel
from stitch.engine.schedule.target import load_target
from stitch.lowering.loops import For, print_loops
from stitch.lowering.lower import lower
from stitch_testing import compile_text, executes_like_the_reference, loops_of, plan_of

CPU = load_target("cpu")
ACCEL = load_target("accel")
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def group_norm(batch: int, groups: int, per_group: int, side: int) -> str:
    """The newcomer's group norm (tests/fixtures/newcomer/groupnorm.ir's form) at other sizes."""
    c = groups * per_group
    return f"""func groupnorm(x: f32[{batch}, {c}, {side}, {side}], gamma: f32[{c}, 1, 1], beta: f32[{c}, 1, 1]) \
-> f32[{batch}, {c}, {side}, {side}] {{
  g = reshape(x, shape=[{batch}, {groups}, -1])
  mu = mean(g, axes=[2], keepdims=true)
  d = sub(g, mu)
  var = mean(mul(d, d), axes=[2], keepdims=true)
  n = mul(d, rsqrt(add(var, 1e-5)))
  y = reshape(n, shape=[{batch}, {c}, {side}, {side}])
  return add(mul(y, gamma), beta)
}}
"""


NEWCOMER = group_norm(8, 4, 8, 16)  # groupnorm.ir of ../shared/newcomer: [8, 32, 16, 16], 4 groups of 8


def test_group_norm_makes_each_group_s_statistics_once():
    """Before, the kernel ran over the channels p1 and the group's mean sat at [p0, p1 // 8]: its sums
    were made 8 times (`for p1 in 0..16 { for r0 in 0..2048 reduce ... }` per tile of 16 channels),
    from two copies of x made 8 times over. After, p1 splits into the group p1h and its channel p1l:
    the statistics sit at [p0, p1h], a tile holds whole groups, and x is read from memory once."""
    after = """\
schedule groupnorm on cpu: 1 kernel(s)

kernel k0 -> out0: f32[8, 32, 16, 16]
  axes split: p1 = 8*p1h + p1l
  tiles over [p0=8, p1h=4] by [2, 4]: 4 tile(s)
  held whole: beta, gamma
  staged per tile: x
  in  x: f32[8, 32, 16, 16]  [p0, 8*p1h + p1l, p2, p3; p0, 8*p1h + r0 // 256, (r0 // 16) % 16, r0 % 16; \
p0, 8*p1h + r1 // 256, (r1 // 16) % 16, r1 % 16]
  in  gamma: f32[32, 1, 1]  [8*p1h + p1l, 0, 0]
  in  beta: f32[32, 1, 1]  [8*p1h + p1l, 0, 0]
  %0 = reshape(global x, shape=[8, 4, 2048])        [p0, p1h, 256*p1l + 16*p2 + p3]  inline
  %1 = reshape(global x, shape=[8, 4, 2048])        [p0, p1h, r0]  inline
  %2 = mean(inline %1, axes=[2], keepdims=true)     [p0, p1h, 0]  shared
  %3 = sub(inline %0, shared %2)                    [p0, p1h, 256*p1l + 16*p2 + p3]  inline
  %4 = reshape(global x, shape=[8, 4, 2048])        [p0, p1h, r1]  inline
  %5 = sub(inline %4, shared %2)                    [p0, p1h, r1]  inline
  %6 = mul(inline %5, inline %5)                    [p0, p1h, r1]  inline
  %7 = mean(inline %6, axes=[2], keepdims=true)     [p0, p1h, 0]  shared
  %8 = add(shared %7, 1e-05)                        [p0, p1h, 0]  inline
  %9 = rsqrt(inline %8)                             [p0, p1h, 0]  shared
  %10 = mul(inline %3, shared %9)                    [p0, p1h, 256*p1l + 16*p2 + p3]  inline
  %11 = reshape(inline %10, shape=[8, 32, 16, 16])   [p0, 8*p1h + p1l, p2, p3]  inline
  %12 = mul(inline %11, global gamma)                [p0, 8*p1h + p1l, p2, p3]  inline
  %13 = add(inline %12, global beta)                 [p0, 8*p1h + p1l, p2, p3]  root
"""
    assert plan_of(NEWCOMER, CPU) == after
    loops = loops_of(NEWCOMER, CPU)
    assert "for p1h in 0..4 serial {\n        for r0 in 0..2048 reduce {" in loops  # once per group
    # x is read where it is (a group's [8, 16, 16] elements are 8 KiB consecutive: plan.read_in_place)
    assert "x_s" not in loops and "+= x[2*p0o + p0, 8*p1h + r0 // 256, (r0 // 16) % 16, r0 % 16]" in loops, loops
    for target in (CPU, ACCEL):
        c = compile_text(NEWCOMER, target)
        assert c.cost.global_bytes == c.cost.compulsory_bytes
        graph = check_program(parse_program(NEWCOMER))["groupnorm"]
        program = lower(c)
        traffic = executes_like_the_reference(program, graph, seed=3)
        assert traffic is not None and traffic.read + traffic.written == c.cost.global_bytes, traffic


def _formed_cost(kernel, types_, target) -> KernelCost:
    """The kernel's cheapest plan with its axes as formed (no split): what was lowered before."""
    f = facts(kernel, types_).on(target)
    priced = [KernelCost(p, price_plan(kernel, p, types_, target, f))
              for p in candidate_plans(kernel, types_, target, f)]
    return min(priced, key=lambda kc: (kc.price.cycles, kc.price.bytes_read))


def _sums_made(program) -> int:
    """How many times the kernels' sum statements run: each one's enclosing loops' extents multiplied."""
    def walk(stmts, times: int) -> int:
        n = 0
        for s in stmts:
            if isinstance(s, For):
                n += walk(s.body, times * s.extent)
            elif getattr(s, "op", None) == "sum":
                n += times
        return n

    return sum(walk(k.body, 1) for k in program.kernels)


def _sums_priced(kernel, types_) -> int:
    """The elements of sum and mean work the cost model prices for the kernel (facts.py `work`)."""
    return sum(slice_elems(axes, kernel, {}) for axes, op, _ in facts(kernel, types_).work if op in ("sum", "mean"))


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([1, 2]), st.sampled_from([2, 4]), st.sampled_from([2, 3, 4]), st.sampled_from([2, 4]),
       st.sampled_from([CPU, ACCEL]))
def test_the_estimate_prices_the_sums_lowering_makes_split_or_not(batch, groups, per_group, side, target):
    """For group norms of several sizes, on both targets: the sums the cost model prices are the sums
    the lowered loops make, with the kernel as formed (each group's sums made once per channel,
    `per_group` times over) and split (once per group); the formed kernel is priced above the split
    one, which is chosen. Both lowerings compute what the reference interpreter does."""
    text = group_norm(batch, groups, per_group, side)
    graph = check_program(parse_program(text))["groupnorm"]
    c = compile_text(text, target)
    ((kernel,), (chosen,)) = c.schedule.kernels, c.cost.kernels
    assert axis_splits(kernel) == (("p1", per_group),) and chosen.plan.splits == axis_splits(kernel)
    formed = _formed_cost(kernel, c.schedule.types, target)
    assert formed.price.cycles > chosen.price.cycles
    made = {}
    for name, kc in (("formed", formed), ("split", chosen)):
        cost = schedule_cost(c.schedule, target, [kc])
        program = lower(types.SimpleNamespace(graph=c.graph, schedule=c.schedule, cost=cost, target=target))
        assert executes_like_the_reference(program, graph, seed=batch + side) is not None
        made[name] = _sums_made(program)
        assert made[name] == _sums_priced(planned_kernel(kernel, kc.plan), c.schedule.types), print_loops(program)
    assert made["formed"] == per_group * made["split"]


def test_a_group_norm_and_silu_exported_by_torch_is_one_kernel_at_the_compulsory_bytes():
    """torch.nn.GroupNorm(32, 128) + SiLU through the dynamo exporter (tools/export_group_norm.py):
    Reshape, InstanceNormalization, Reshape back, the affine per channel, Sigmoid, Mul. One kernel,
    split by the group's 4 channels, moving each byte once; its output is onnxruntime's."""
    pytest.importorskip("onnx")
    from stitch.frontends.onnx_import import import_onnx
    from stitch.lowering.execute import execute

    stem = FIXTURES / "models" / "norms" / "group_norm_silu-dynamo"
    imported = import_onnx(stem.with_suffix(".onnx"))
    graph = next(iter(check_program(imported.program).values()))
    for target in (CPU, ACCEL):
        from stitch.engine.pipeline import compile_graph
        from stitch.engine.rewrite.rules import builtin_rule_files

        c = compile_graph(graph, builtin_rule_files(), target)
        ((kc,),) = (c.cost.kernels,)
        assert kc.plan.splits == (("p1", 4),), c.to_json()
        assert c.cost.global_bytes == c.cost.compulsory_bytes
        with np.load(stem.with_suffix(".npz")) as data:
            feeds = {imported.inputs[k]: data[k] for k in data.files if k in imported.inputs} | imported.weights
            want = data["output:output"]
        (got,), traffic = execute(lower(c), feeds)
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
        assert traffic.read + traffic.written == c.cost.global_bytes


def test_a_block_read_at_0_of_an_axis_of_extent_1_shares_the_copy_made_along_it():
    """x[p0, p1, p2] (p0 of extent 1) and the row mean's x[0, p1, r0] read one block of 32 elements per
    tile: one copy, which the mean reads at 0 where the copy's nest ran p0 (the reduction's nest has
    no p0 loop: reading the copy at p0 failed the verifier, found through torch.compile's GPT-2 block)."""
    text = """func f(x: f32[1, 7, 32]) -> f32[1, 7, 32] {
  m = mean(reshape(x, shape=[7, 32]), axes=[1], keepdims=true)
  return sub(x, reshape(m, shape=[1, 7, 1]))
}
"""
    graph = check_program(parse_program(text))["f"]
    for target in (CPU, ACCEL):
        c = compile_text(text, target)
        program = lower(c)
        loops = print_loops(program)
        assert loops.count("= x[") == 1 and "+= x_s0[0, p1, r0]" in loops, loops
        traffic = executes_like_the_reference(program, graph, seed=4)
        assert traffic.read + traffic.written == c.cost.global_bytes
