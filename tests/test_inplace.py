"""Reading in place (lowering/inplace.py): on a cache target a staged copy of long rows is dropped,
its readers read the source at the copy's index; short rows stay staged; a scratchpad keeps every copy."""

from __future__ import annotations

from stitch.engine.schedule.target import parse_target
from stitch.lowering.loops import print_loops
from stitch.lowering.lower import lower
from stitch_testing import compile_text, executes_like_the_reference, target_text

PRODUCT = "func f(a: f32[32, 512], b: f32[512, 64]) -> f32[32, 64] { return matmul(a, b) }"


def loops(**keys):
    c = compile_text(PRODUCT, parse_target(target_text("cpu", onchip_bytes=262144, **keys)))
    return c, lower(c)


def test_long_rows_are_read_where_they_are_and_short_ones_stay_staged():
    _, kept = loops(inplace_run_bytes=0)
    before = print_loops(kept)
    assert "a_s0[p0, r0] = a[p0, r0]" in before and "mul(a_s0[p0, r0], b_s1[r0, p1])" in before
    c, program = loops()  # cpu.toml's 1024 bytes: a's rows hold 2048, b's tile rows 64
    names = c.schedule.params  # the plan says it: a's rows are read in place, b's tile rows copied
    assert {names[s.cid]: s.in_place for s in c.cost.plans[0].staged} == {"a": True, "b": False}
    after = print_loops(program)
    assert "a_s0" not in after
    assert "k0_v0[p0, p1] += mul(a[p0, r0], b_s1[r0, p1])" in after
    assert "b_s1[r0, p1] = b[r0, 16*p1o + p1]" in after
    assert c.cost.kernels[0].price.footprint == compile_text(PRODUCT, parse_target(target_text(
        "cpu", onchip_bytes=262144, inplace_run_bytes=0))).cost.kernels[0].price.footprint  # the plan is the model's
    executes_like_the_reference(program, c.graph, 1)


def test_a_scratchpad_keeps_every_copy():
    c = compile_text(PRODUCT, parse_target(target_text("accel")))
    assert c.target.inplace_run_bytes == 0
    assert "a_s" in print_loops(lower(c))


def test_a_copy_of_a_scalar_is_no_row_to_read_in_place():
    """A product by a scalar reshaped to 1x1 packs the scalar (`k0_pack0[r0] = x1[]`): no row, kept
    (hypothesis found an IndexError here)."""
    c = compile_text("func f(x0: f32[1], x1: f32[]) -> f32[1] { return matmul(x0, reshape(x1, shape=[1, 1])) }",
                     parse_target(target_text("cpu")))
    executes_like_the_reference(lower(c), c.graph, 0)


GROUPS = """func f(x: f32[2, 16, 8, 8]) -> f32[2, 16, 8, 8] {
  g = reshape(x, shape=[2, 4, 256])
  d = sub(g, mean(g, axes=[2], keepdims=true))
  return reshape(mul(d, rsqrt(add(mean(mul(d, d), axes=[2], keepdims=true), 1e-5))), shape=[2, 16, 8, 8])
}
"""


def test_rows_of_short_lines_one_after_another_are_one_long_run():
    """A group's elements, [4 channels, 8, 8] read through the reshape: each line is 8 floats (32 bytes),
    but the channels' lines follow one another, 1 KiB per group; the copy's loops walk one run of
    1 KiB or more, so x is read in place on the cpu (staged where `inplace_run_bytes` asks for longer runs). Both
    compute what the reference does; the traffic counted is the plan's bytes, the cache keeping what
    the tile's three nests read again."""
    from stitch.engine.ir.check import check_program
    from stitch.engine.ir.parse import parse_program

    graph = check_program(parse_program(GROUPS))["f"]
    for run_bytes, in_place in ((1024, True), (1 << 20, False)):
        c = compile_text(GROUPS, parse_target(target_text("cpu", inplace_run_bytes=run_bytes)))
        assert [s.in_place for s in c.cost.plans[0].staged] == [in_place]
        program = lower(c)
        assert ("x_s0" in print_loops(program)) is not in_place
        traffic = executes_like_the_reference(program, graph, 2)
        assert traffic.read + traffic.written == c.cost.global_bytes, (traffic, c.cost.global_bytes)
