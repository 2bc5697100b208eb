"""Softmax's division of each row run in the loop of the next row's exponentials
(targets/c/pipelined_rows.py): where it is taken, and bit for bit the rows one after the other."""

from __future__ import annotations


import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare
from stitch.targets import cc, cpu
from stitch.targets.c import recognizers, tuning
from stitch_testing import needs_cc






SOFTMAX = "func f(x: f32[{r}, {c}]) -> f32[{r}, {c}] {{\n  e = exp(sub(x, max(x, axes=[1], keepdims=true)))\n" \
          "  return div(e, sum(e, axes=[1], keepdims=true))\n}}"


@needs_cc
@pytest.mark.parametrize("rows, cols, streamed, gap", [
    (24, 64, True, None), (24, 64, False, None), (12, 1024, True, None), (10, 16, True, None),
    (24, 256, True, None), (24, 256, False, None),
    (24, 256, True, 4096),  # the division run ahead by all but the row's last line, wherever the arrays fall
])
def test_pipelined_rows_compute_the_rows_one_after_the_other_do(rows, cols, streamed, gap, cache, monkeypatch):
    """Softmax with each row's division in the loop of the next row's exponentials: bit for bit
    what the rows one after the other give, wherever the input and the output start (every 4 bytes
    of a line, and the output's stores just ahead of the input's reads modulo 4 KiB, where the
    division runs ahead), with -inf, NaN and large values in rows; nothing written outside. (Rows
    of 64 read a copy of the input, rows of 256 and 1024 the input itself.)"""
    if streamed:
        monkeypatch.setattr(tuning, "STREAM_BYTES", 64)  # (outputs of 8 MiB and more, at full size)
    if gap is not None:
        monkeypatch.setattr(tuning, "ROW_STORE_GAP", gap)
    text = SOFTMAX.format(r=rows, c=cols)
    f = stitch.compile(text, cache_dir=cache)
    source = f.native.source_path.read_text()
    if cc.vector_bytes(cpu.compiler(), cc.DEFAULT_FLAGS) == 64:
        assert "st_sum = " in source and ("_mm512_stream_ps(st_o + st_q" in source) == streamed
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("pipelined_rows"))
    plain = stitch.compile(text, cache_dir=cache)
    assert "st_sum = " not in plain.native.source_path.read_text()
    rng = np.random.default_rng(3)
    n = rows * cols
    x_block, out_block = np.empty(n + 1024, np.float32), np.empty(n + 2048, np.float32)
    for x_at, gap in [(0, 0), (4, 0), (12, 16), (16, 48), (0, 1024), (60, 4032), (8, 4), (16, 2000), (8, 272), (0, 256),
                      (4, 4080), (0, 4048), (12, 4064)]:  # (the output just behind the input: run ahead too)
        x = x_block[x_at:x_at + n].reshape(rows, cols)
        x[...] = rng.standard_normal((rows, cols)).astype(np.float32) * 20
        x[1, 3] = np.nan
        x[2] = -np.inf
        x[3, :5] = 3e38
        out_at = x_at + ((x.ctypes.data + gap - out_block.ctypes.data) % 4096) // 4
        out = out_block[out_at:out_at + n].reshape(rows, cols)
        (want,) = plain(x=x)
        out_block[...] = 7.0
        f(out=[out], x=x)
        np.testing.assert_array_equal(out, want)
        assert (out_block[:out_at] == 7.0).all() and (out_block[out_at + n:] == 7.0).all()
        (ref,) = evaluate(f.graph, {"x": x})
        assert compare(out, ref) == ""


@needs_cc
@pytest.mark.parametrize("text, pipelined", [
    (SOFTMAX.format(r=64, c=1024), True),
    (SOFTMAX.format(r=64, c=1000), False),  # rows not a multiple of 16 long
    # the output row reads the row maximum too, which the next row's first pass overwrites
    ("func f(x: f32[64, 1024]) -> f32[64, 1024] {\n  m = max(x, axes=[1], keepdims=true)\n  e = exp(sub(x, m))\n"
     "  return mul(div(e, sum(e, axes=[1], keepdims=true)), m)\n}", False),
])
def test_rows_are_pipelined_only_where_the_division_reads_the_row_and_its_sum(text, pipelined, cache):
    """(and the build without the 16-lane exponentials, -DST_NO_VECTOR_EXP, runs the rows one after
    the other: the reference's values too)"""
    f = stitch.compile(text, cache_dir=cache)
    if cc.vector_bytes(cpu.compiler(), cc.DEFAULT_FLAGS) == 64:
        assert ("st_sum = " in f.native.source_path.read_text()) == pipelined
    scalar = stitch.compile(text, cache_dir=cache, cflags="-O3 -march=native -DST_NO_VECTOR_EXP")
    inputs = random_inputs(f.graph, 8)
    for program in (f, scalar):
        for got, want in zip(program(**inputs), evaluate(f.graph, inputs)):
            assert compare(got, want) == ""
