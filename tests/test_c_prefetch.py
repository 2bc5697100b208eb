"""Prefetches the C backend writes: rows of a tile far apart (targets/c/prefetch.py), the next
row of a row of exponentials (rows.next_row_prefetch) and the next tile of a SiLU row in groups
(rows.next_tile_prefetch)."""

from __future__ import annotations

import itertools
import re

import pytest
import stitch
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare, differences
from stitch.lowering.loops import For
from stitch.targets import cc, cpu
from stitch.targets.c import tiles
from stitch.targets.c.source import c_source
from stitch_testing import EXAMPLES, compiles_for_avx512, needs_cc


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


# a group norm (4 groups of 4 channels) and SiLU, as torch's GroupNorm + SiLU export computes it, in
# rows of 64: groups of 4 vectors at 16 lanes too
GROUP_NORM_SILU = """func f(x: f32[4, 16, 16, 64], g: f32[16, 1, 1], b: f32[16, 1, 1]) -> f32[4, 16, 16, 64] {
  r = reshape(x, shape=[4, 4, 4096])
  d = sub(r, mean(r, axes=[2], keepdims=true))
  n = mul(d, rsqrt(add(mean(mul(d, d), axes=[2], keepdims=true), 1e-5)))
  y = add(mul(reshape(n, shape=[4, 16, 16, 64]), g), b)
  return mul(y, sigmoid(y))
}
"""


@needs_cc
def test_a_silu_row_in_groups_prefetches_what_the_next_tile_reads(cache, tmp_path):
    """A group norm's SiLU row, bound by its arithmetic, prefetches its reads of x at the next tile
    (the same element with the tile loops' variables at the next tile's values, st_n_*): the next
    tile's sums would otherwise wait on each line from the L3 cache or memory. In the C for 8 and
    16 lanes (the 16-lane form compiled for AVX-512 wherever it runs); the values are the
    reference's."""
    f = stitch.compile(GROUP_NORM_SILU, cache_dir=cache)
    for width in (32, 64):
        source = c_source(f.loops, width)[0]
        tile_vars = re.findall(r"const int64_t st_n_(\w+) = ", source)
        read = re.search(r"#define ST_FIRST\(\w+\) .*?b_x\[([^\]]*)\]", source).group(1)
        fetched = re.findall(r"__builtin_prefetch\(&b_x\[([^\]]*)\], 0, 2\);", source)
        assert tile_vars and len(fetched) == 4 * width // 64  # (a line a prefetch, a group of 4 vectors)
        assert fetched[0] == re.sub(r"\b(" + "|".join(tile_vars) + r")\b", r"st_n_\1", read)
    assert compiles_for_avx512(source, tmp_path) == ""
    inputs = random_inputs(f.graph, 6)
    assert differences(f(**inputs), evaluate(f.graph, inputs), f.graph, inputs) == []


def c_value(expr: str, names: dict[str, int]) -> int:
    """A C integer expression of `_next_tile`'s (?:, / of non-negative values) evaluated."""
    python = re.sub(r"\(([^()?]*) \? ([^():]*) : ([^()]*)\)", r"((\2) if (\1) else (\3))", expr).replace("/", "//")
    return eval(python, {}, names)


@pytest.mark.parametrize("extents", [[6], [3, 4], [2, 3, 2]])
def test_the_next_tile_is_the_one_after_in_the_claim_and_the_last_is_itself(extents):
    """`_next_tile` gives each tile loop variable's value at the next tile of a claim lo..hi-1 (the
    tile loops as one index, the outermost slowest), and at the claim's last tile its own."""
    nest = [For(f"t{i}", n, "parallel", []) for i, n in enumerate(extents)]
    for outer, inner in itertools.pairwise(nest):
        outer.body.append(inner)
    values = tiles._next_tile(nest)
    count = 1
    for n in extents:
        count *= n
    def digits(t):
        out, rest = {}, t
        for lp in reversed(nest):
            out[lp.var] = rest % lp.extent
            rest //= lp.extent
        return out
    for lo, hi in ((0, count), (1, count - 1)):
        for t in range(lo, hi):
            names = {"st_tile": t, "lo": lo, "hi": hi} | digits(t)
            got = {v: c_value(e, names) for v, e in values.items()}
            assert got == digits(t + 1 if t + 1 < hi else t)
