"""Pipelined tiles (lowering/overlap.py): which kernels are marked, the stages a tile loop is cut
into, and the C of a pipelined kernel computing what the plain one does, bit for bit, on any tile
counts, claims and threads."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import differences
from stitch.engine.schedule.target import parse_target
from stitch.lowering.alloc import scratch_layout
from stitch.lowering.loops import print_loops
from stitch.lowering.lower import lower
from stitch.lowering.overlap import MIN_ROWS, stages, tile_loops
from stitch.lowering.verify import capacity_problem
from stitch_testing import compile_text, needs_cc, target_text


def layer_norm(rows: int, a: int, b: int, outputs: str = "one") -> str:
    """A layer norm over the first axis; with outputs='two' its mean is a second output."""
    x, row = f"f32[{rows}, {a}, {b}]", f"f32[{a}, {b}]"
    two = outputs == "two"
    return (f"func f(x: {x}, gamma: {row}, beta: {row}) -> {f'({x}, {row})' if two else x} {{\n"
            "  e = add(x, x)\n  m = mean(e, axes=[0])\n  d = sub(e, m)\n"
            "  v = mean(mul(d, d), axes=[0])\n  r = rsqrt(add(v, 1e-5))\n"
            f"  return add(mul(mul(d, r), gamma), beta){', m' if two else ''}\n}}\n")


def lowered(text: str, **keys):
    c = compile_text(text, parse_target(target_text("cpu", onchip_bytes=1 << 20, **keys)))
    return c, lower(c)


def test_a_layer_norm_over_rows_is_cut_into_its_stages():
    _, program = lowered(layer_norm(64, 16, 128))
    (k,) = program.kernels
    assert k.pipelined and "# pipelined" in print_loops(program)
    (loop,) = tile_loops(k)
    st_ = stages(loop, {b.name for b in k.allocs})
    assert st_.head.extent == st_.tail.extent == 64
    head = print_loops(program).split(f"for {st_.head.var} in 0..64")
    assert "= add(x[" in head[1] and "out0[" in head[-1]  # the first row loop reads x, the last writes out0
    assert st_.before and st_.middle  # the mean's zeros before; the deviations' pass between


def test_the_plan_says_which_kernels_pipeline_and_the_verifier_counts_two_copies():
    c, program = lowered(layer_norm(64, 16, 128))
    assert c.cost.plans[0].pipelined and program.kernels[0].pipelined
    off = lowered(layer_norm(64, 16, 128), pipeline_tiles="false")[0]
    assert not off.cost.plans[0].pipelined
    (k,) = program.kernels
    need = 2 * scratch_layout(k)[0]
    assert capacity_problem(k, need) is None
    assert "two copies of a pipelined tile's buffers" in capacity_problem(k, need - 1)


def test_what_is_not_pipelined():
    assert not lowered(layer_norm(64, 16, 128), pipeline_tiles="false")[1].kernels[0].pipelined
    c, one = lowered(layer_norm(64, 16, 128))
    # a budget the same tiles fit (the cost model's footprint) but two copies of their buffers do not
    budget = c.cost.kernels[0].price.footprint
    assert budget < 2 * scratch_layout(one.kernels[0])[0]
    tight = compile_text(layer_norm(64, 16, 128), parse_target(target_text("cpu", onchip_bytes=budget)))
    assert tight.cost.plans[0].tile == c.cost.plans[0].tile and tight.cost.plans[0].pipelined  # the plan asks
    assert not lower(tight).kernels[0].pipelined  # lowering finds it illegal: two copies do not fit
    assert not lowered(layer_norm(MIN_ROWS - 1, 16, 128))[1].kernels[0].pipelined  # too few rows to take turns in
    # a row of the last axis is read, reduced and written in one row loop: nothing to overlap
    text = "func f(x: f32[256, 512]) -> f32[256, 512] { m = max(x, axes=[1], keepdims=true) \n return exp(sub(x, m)) }"
    assert not any(k.pipelined for k in lowered(text)[1].kernels)
    assert not any(k.pipelined for k in lower(compile_text(text, parse_target(target_text("accel")))).kernels)


def _builds(text: str, tmp_path, cache):
    plain = tmp_path / "plain.toml"
    plain.write_text(target_text("cpu", pipeline_tiles="false", name='"plain"'))
    return stitch.compile(text, cache_dir=cache), stitch.compile(text, target=str(plain), cache_dir=cache)


def _same_as_plain_and_reference(piped, plain, seed: int) -> None:
    inputs = random_inputs(piped.graph, seed)
    got, want = piped(**inputs), plain(**inputs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)  # the same steps in each tile: the same bits
    assert not differences(got, evaluate(piped.graph, inputs), piped.graph)


@needs_cc
@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_a_pipelined_kernel_computes_what_the_plain_one_does(cache, tmp_path, n_threads):
    """Large enough to run in parallel, in claims of several tiles (tile loops nested in the claimed
    one included): every claim's first tile reads alone, its last writes alone."""
    before = stitch.num_threads()
    stitch.set_num_threads(n_threads)
    try:
        piped, plain = _builds(layer_norm(96, 24, 200, "two"), tmp_path, cache)
        assert piped.loops.kernels[0].pipelined and not plain.loops.kernels[0].pipelined
        source = piped.native.source_path.read_text()
        assert "st_t - 1" in source and "(st_k & 1)" in source
        for seed in range(3):
            _same_as_plain_and_reference(piped, plain, seed)
    finally:
        stitch.set_num_threads(before)


@st.composite
def row_programs(draw) -> str:
    rows = draw(st.integers(MIN_ROWS, 40))
    a, b = draw(st.integers(2, 9)), draw(st.integers(16, 70))  # some tiles to pipeline
    first = draw(st.sampled_from(["add(x, x)", "mul(x, 0.75)", "exp(x)", "x"]))
    reduce = draw(st.sampled_from(["mean", "sum", "max"]))
    out = draw(st.sampled_from(["mul(d, g)", "add(mul(d, rsqrt(add(mean(mul(d, d), axes=[0]), 1e-5))), g)",
                                "div(d, add(sum(abs(d), axes=[0]), 1.0))"]))
    two = draw(st.booleans())
    ret = f"(f32[{rows}, {a}, {b}], f32[{a}, {b}])" if two else f"f32[{rows}, {a}, {b}]"
    return (f"func f(x: f32[{rows}, {a}, {b}], g: f32[{a}, {b}]) -> {ret} {{\n"
            f"  e = {first}\n  m = {reduce}(e, axes=[0])\n  d = sub(e, m)\n"
            f"  return {out}{', m' if two else ''}\n}}\n")


@needs_cc
@settings(max_examples=12, deadline=None)
@given(row_programs(), st.integers(0, 3))
def test_pipelined_programs_equal_the_plain_ones_and_the_reference(tmp_path_factory, text, seed):
    tmp = tmp_path_factory.mktemp("overlap")
    piped, plain = _builds(text, tmp, tmp / "cache")
    _same_as_plain_and_reference(piped, plain, seed)


def test_the_property_sees_pipelines():
    """Most drawn programs are pipelined (the property above would prove little otherwise)."""
    seen = []

    @settings(max_examples=30, deadline=None, database=None, derandomize=True)
    @given(row_programs())
    def count(text):
        seen.append(any(k.pipelined for k in lowered(text)[1].kernels))

    count()
    assert sum(seen) >= len(seen) // 2, seen
