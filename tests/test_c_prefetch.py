"""Prefetches the C backend writes: rows of a tile far apart (targets/c/prefetch.py) and the next
row of a row of exponentials (rows.next_row_prefetch)."""

from __future__ import annotations

import re

import pytest
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare
from stitch.targets import cc, cpu
from stitch_testing import EXAMPLES, needs_cc






@needs_cc
@pytest.mark.parametrize("text, ahead", [
    # the row stored and summed at once (summed_row): its global read's next row
    ("func f(x: f32[64, 1024]) -> f32[64, 1024] {\n  e = exp(sub(x, max(x, axes=[1], keepdims=true)))\n"
     "  return div(e, sum(e, axes=[1], keepdims=true))\n}", [("b_x", 1024)]),
    # a sum of exponentials alone (vector_sum)
    ("func f(x: f32[64, 512]) -> f32[64] { return log(sum(exp(sub(x, max(x, axes=[1], keepdims=true))), axes=[1])) }",
     [("b_x", 512)]),
    # one row: no row after it
    ("func f(x: f32[1, 1024]) -> f32[1] { return sum(exp(x), axes=[1]) }", []),
])
def test_a_row_of_exponentials_prefetches_the_next_row(text, ahead, cache):
    """A row of exponentials prefetches, vector by vector, the line its contiguous global reads
    take in the next iteration of the loop around the row; the values are the reference's."""
    f = stitch.compile(text, cache_dir=cache)
    source = f.native.source_path.read_text()
    if cc.vector_bytes(cpu.compiler(), cc.DEFAULT_FLAGS) == 64:
        found = re.findall(r"__builtin_prefetch\(&(b_\w+)\[[^\]]* \+ (\d+)\], 0, 3\); st_", source)
        assert sorted({(name, int(n)) for name, n in found}) == ahead  # (softmax's rows: pipelined, and as before)
    inputs = random_inputs(f.graph, 5)
    for got, want in zip(f(**inputs), evaluate(f.graph, inputs)):
        assert compare(got, want) == ""


@needs_cc
def test_rows_far_apart_are_prefetched_and_contiguous_rows_are_not(cache):
    """Runs of 512 B, 64 KiB apart, are prefetched, the output's too; not a streamed output's (the
    prefetch would read lines the non-temporal stores write whole), nor contiguous rows."""
    text = (EXAMPLES / "layernorm_large.ir").read_text()
    strided = stitch.compile(text.replace("64, 256]", "8, 256]"), cache_dir=cache)  # a 4 MiB output
    streamed = stitch.compile(text, cache_dir=cache)  # 32 MiB
    contiguous = stitch.compile(EXAMPLES / "softmax.ir", cache_dir=cache)
    for f in (strided, streamed):
        assert "__builtin_prefetch(&b_x[" in f.native.source_path.read_text()
    assert "__builtin_prefetch(&b_out0[" in strided.native.source_path.read_text()
    # (rows streamed from the registers: AVX-512's vector_loop; elsewhere from a row on the stack)
    if cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) == 64:
        assert "__builtin_prefetch(&b_out0[" not in streamed.native.source_path.read_text()
    # (softmax's rows of exponentials prefetch their next row, test_a_row_of_exponentials_...)
    assert not re.search(r"\{ for \(int64_t \w+ = 0;[^\n]*__builtin_prefetch", contiguous.native.source_path.read_text())
    # each row's last element is prefetched too: a row starting mid-line spans a line more than
    # the line-sized steps reach
    rows = re.findall(r"for \(int64_t (\w+) = 0; \w+ < (\d+); \w+ \+= \d+\) __builtin_prefetch\(&b_x\[([^\]]*)\], 0, 3\); "
                      r"__builtin_prefetch\(&b_x\[([^\]]*)\], 0, 3\);", streamed.native.source_path.read_text())
    assert rows
    for var, extent, first, last in rows:
        names = {v: 7 for v in re.findall(r"[a-z]\w*", first)}
        assert eval(last, {}, names) == eval(first, {}, {**names, var: int(extent) - 1})
