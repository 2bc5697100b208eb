"""Large outputs written with non-temporal stores (targets/c/vector_loop.py from the registers,
stream.py from a row on the stack): wherever the output starts, in groups of vectors, with the
row's long reads prefetched ahead; the reference's values."""

from __future__ import annotations

import re

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare
from stitch.targets import cc, cpu
from stitch.targets.c import tuning
from stitch_testing import needs_cc






@needs_cc
def test_a_large_output_is_streamed_out_whatever_its_alignment(cache):
    """Rows of 16 KiB of a 16 MiB output are written with non-temporal stores (from the registers
    on AVX-512, else from a row on the stack), the partial lines at each end by plain stores: an
    output array starting anywhere (here 4 bytes past a line) gets every element; a small output
    keeps plain stores."""
    text = "func f(x: f32[1024, 4096], b: f32[4096]) -> f32[1024, 4096] {\n  return tanh(add(x, b))\n}\n"
    f = stitch.compile(text, cache_dir=cache)
    source = f.native.source_path.read_text()
    assert "st_stream_f32(&b_out0[" in source
    if cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) == 64:  # (the registers' form is AVX-512's)
        assert "_mm512_stream_ps(st_o + p1, ST_ROW(p1))" in source
    inputs = random_inputs(f.graph, 6)
    (want,) = evaluate(f.graph, inputs)
    block = np.empty(1024 * 4096 + 32, np.float32)
    start = (-block.ctypes.data % 64) // 4 + 1  # one element past a 64-byte boundary
    out = block[start:start + 1024 * 4096].reshape(1024, 4096)
    f(out=[out], **inputs)
    assert compare(out, want) == ""
    small = stitch.compile(text.replace("1024, 4096", "16, 4096"), cache_dir=cache)
    assert "st_stream_f32(&" not in small.native.source_path.read_text()


@needs_cc
@pytest.mark.parametrize("text, prefetched", [
    ("func f(x: f32[8, 2048], b: f32[2048]) -> f32[8, 2048] { return tanh(add(x, b)) }", True),
    # the row read by its sum first (in the cache when it is streamed out)
    ("func f(x: f32[8, 2048]) -> f32[8, 2048] { return mul(x, rsqrt(mean(mul(x, x), axes=[1], keepdims=true))) }",
     False),
    ("func f(x: f32[32, 512], b: f32[512]) -> f32[32, 512] { return tanh(add(x, b)) }", False),  # rows too short
])
def test_a_streamed_rows_long_reads_are_prefetched_ahead(text, prefetched, cache, monkeypatch):
    """A row streamed out from the registers prefetches its global reads STREAM_PREFETCH elements
    ahead where they run along it for twice that, move with the rows (not the bias every row
    reads) and nothing else in the row's loop reads them; the values are the reference's."""
    monkeypatch.setattr(tuning, "STREAM_BYTES", 64)  # (outputs of 8 MiB and more, at full size)
    f = stitch.compile(text, cache_dir=cache)
    source = f.native.source_path.read_text()
    if cc.vector_bytes(cpu.compiler(), cc.DEFAULT_FLAGS) == 64:
        assert "_mm512_stream_ps(st_o" in source
        ahead = re.findall(r"__builtin_prefetch\(&(b_\w+)\[[^\]]*p1 \+ (\d+)\], 0, 0\)", source)
        # (a vector at a time, and each vector of a group of STREAM_GROUP)
        group = {("b_x", str(tuning.STREAM_PREFETCH + 16 * k)) for k in range(tuning.STREAM_GROUP)}
        assert set(ahead) == (group if prefetched else set())
    inputs = random_inputs(f.graph, 4)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
@pytest.mark.parametrize("cols", [16, 23, 40, 127, 129, 256, 300, 383, 1040])
def test_streamed_rows_are_the_same_wherever_the_output_starts(cols, cache, monkeypatch):
    """Rows streamed from the registers: the lines a row covers whole take non-temporal stores, the
    partial ones at its ends plain stores of the lanes inside it; rows of two groups and more in
    groups of STREAM_GROUP vectors, each computed before the group before it is stored. At each of the 16
    starting offsets in a line, and 48 bytes past the input in its page, the output holds every
    element, bit for bit the same (one vector code for all, tanh included) and the same as a
    vector at a time, and nothing is written before or after it."""
    monkeypatch.setattr(tuning, "STREAM_BYTES", 64)  # (outputs of 8 MiB and more, at full size)
    text = f"func f(x: f32[6, {cols}], b: f32[{cols}]) -> f32[6, {cols}] {{ return tanh(add(mul(x, x), b)) }}"
    f = stitch.compile(text, cache_dir=cache)
    grouped = cols >= 32 * tuning.STREAM_GROUP
    monkeypatch.setattr(tuning, "STREAM_GROUP", 1)
    single = stitch.compile(text, cache_dir=cache)
    if cc.vector_bytes(cpu.compiler(), cc.DEFAULT_FLAGS) == 64:
        assert "_mm512_stream_ps(st_o" in f.native.source_path.read_text()
        assert ("__m512 st_b0 = " in f.native.source_path.read_text()) == grouped
        assert "__m512 st_b0 = " not in single.native.source_path.read_text()
    inputs = random_inputs(f.graph, 2)
    (want,) = evaluate(f.graph, inputs)
    (one_at_a_time,) = single(**inputs)
    x = inputs["x"]
    past_input = (x.ctypes.data + 48) % 4096  # (a load there waits on the store before it)
    for offset in [*range(16), None]:
        block = np.full(6 * cols + 1056, np.nan, np.float32)
        start = ((-block.ctypes.data % 64) // 4 + offset if offset is not None
                 else (past_input - block.ctypes.data) % 4096 // 4)
        out = block[start:start + 6 * cols].reshape(6, cols)
        f(out=[out], **inputs)
        assert compare(out, want) == ""
        np.testing.assert_array_equal(out, one_at_a_time)
        assert np.isnan(block[:start]).all() and np.isnan(block[start + 6 * cols:]).all()
