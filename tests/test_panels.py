"""Bound weights in panels (lowering/panels.py): on a cpu a product's bound right operand is laid
out once in panels of the micro-kernel's width, each product runs one nest per panel, a product
of one row without a row loop reaches the micro-kernel, and every result is the reference's."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.ir.interp import evaluate
from stitch.engine.ir.tolerance import compare
from stitch.engine.schedule.machine import panel_columns
from stitch.engine.schedule.target import load_target
from stitch.lowering.bind import bind
from stitch.lowering.loops import print_loops
from stitch.lowering.lower import lower
from stitch.targets.cpu import c_for_target
from stitch_testing import compile_text, needs_cc

ONE_ROW = """
func step(x: f32[1, 64], w: f32[64, 384], b: f32[384]) -> f32[1, 384] {
  return add(matmul(x, w), b)
}
"""


def test_panel_columns():
    assert panel_columns(3072, 4) == 48  # three 16-lane vectors
    assert panel_columns(1024, 4) == 64  # 64 vectors: four leave no lone one over
    assert panel_columns(3072, 8) == 24
    assert panel_columns(48, 4) is None  # one panel: already contiguous
    assert panel_columns(100, 4) is None  # not whole vectors
    assert panel_columns(80, 4) is None  # five vectors: not whole panels


def test_a_bound_weight_is_laid_out_in_panels_once():
    loops = lower(compile_text(ONE_ROW, load_target("cpu")), ("w", "b"))
    text = print_loops(loops)
    (panels,) = [b for b in loops.params if b.name.endswith("_panels")]
    assert panels.shape[-2:] == (64, 48)
    assert f"for p1_panel in 0..{panels.shape[-3]} serial" in text or "_panel in 0.." in text
    rng = np.random.default_rng(0)
    w, b = rng.random((64, 384), dtype=np.float32), rng.random(384, dtype=np.float32)
    arrays = bind(loops, {"w": w, "b": b})
    block = arrays[panels.name]
    # every element of w is in the panels once: panels[.., jp, k, j] is a column 48*jp + j of the tile's
    lead = int(np.prod(panels.shape[:-3]))
    columns = block.reshape(lead, panels.shape[-3], 64, 48).transpose(0, 2, 1, 3).reshape(lead, 64, -1)
    np.testing.assert_array_equal(np.concatenate(list(columns), axis=1), w)


def test_not_on_a_scratchpad_nor_without_bound_weights():
    assert "_panels" not in print_loops(lower(compile_text(ONE_ROW, load_target("accel")), ("w", "b")))
    assert "_panels" not in print_loops(lower(compile_text(ONE_ROW, load_target("cpu"))))


def test_a_weight_read_otherwise_too_keeps_its_layout():
    text = """
func f(x: f32[1, 64], w: f32[64, 384]) -> (f32[1, 384], f32[64, 384]) {
  return matmul(x, w), exp(w)
}
"""
    assert "_panels" not in print_loops(lower(compile_text(text, load_target("cpu")), ("w",)))


@needs_cc
def test_a_product_of_one_row_runs_in_the_micro_kernel(tmp_path):
    compiled = stitch.compile(ONE_ROW, cache_dir=tmp_path, weights={
        "w": np.ones((64, 384), np.float32), "b": np.zeros(384, np.float32)})
    source = c_for_target(compiled.loops, load_target("cpu"))
    assert "st_fma_f32(a0, b0" in source and "_panels" in source


@needs_cc
@settings(max_examples=25, deadline=None)
@given(rows=st.sampled_from([1, 2, 3, 8, 13]), k=st.sampled_from([1, 5, 64, 130]),
       n=st.sampled_from([48, 96, 144, 192, 320, 100, 1024]), dtype=st.sampled_from(["f32", "f64"]),
       bias=st.booleans(), vector=st.booleans(), seed=st.integers(0, 99))
def test_products_with_panels_compute_what_the_reference_computes(rows, k, n, dtype, bias, vector, seed,
                                                                  tmp_path_factory):
    x_type = f"{dtype}[{k}]" if vector else f"{dtype}[{rows}, {k}]"
    out_type = f"{dtype}[{n}]" if vector else f"{dtype}[{rows}, {n}]"
    body = "add(matmul(x, w), b)" if bias else "matmul(x, w)"
    text = f"func f(x: {x_type}, w: {dtype}[{k}, {n}], b: {dtype}[{n}]) -> {out_type} {{\n  return {body}\n}}\n"
    rng = np.random.default_rng(seed)
    np_dtype = np.float32 if dtype == "f32" else np.float64
    x = rng.standard_normal((k,) if vector else (rows, k)).astype(np_dtype)
    weights = {"w": rng.standard_normal((k, n)).astype(np_dtype), "b": rng.standard_normal(n).astype(np_dtype)}
    compiled = stitch.compile(text, cache_dir=tmp_path_factory.getbasetemp() / "cache", weights=weights)
    (got,) = compiled(x=x)
    (want,) = evaluate(compiled.graph, {"x": x} | weights)
    assert compare(got, want) == "", text


@pytest.mark.parametrize("threads", [1, 2])
@needs_cc
def test_panels_under_threads(threads, tmp_path):
    rng = np.random.default_rng(threads)
    w, b = rng.standard_normal((64, 384)).astype(np.float32), rng.standard_normal(384).astype(np.float32)
    compiled = stitch.compile(ONE_ROW, cache_dir=tmp_path, weights={"w": w, "b": b})
    x = rng.standard_normal((1, 64)).astype(np.float32)
    before = stitch.num_threads()
    stitch.set_num_threads(threads)
    try:
        (got,) = compiled(x=x)
    finally:
        stitch.set_num_threads(before)
    np.testing.assert_allclose(got, x @ w + b, rtol=1e-5, atol=1e-5)
