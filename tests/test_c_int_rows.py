"""A product of many rows in 32-bit integers on vpmaddwd (targets/c/int_rows.py): A and B in 16-bit
pairs of k where every value fits, the micro-kernel where B does not, the loops as written where A does
not. Rows that fill the register blocks and not, K even and odd, columns in whole panels and left over,
A computed (a quantized activation less its zero point) and read where it is, u8 and i8 weights: the C
with the recognizer in computes what the plain loops compute and what the reference does, bit for bit,
at the machine's vector width; the 64-byte form compiles for AVX-512."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate
from stitch.targets import cc, cpu
from stitch.targets.c import int_rows, recognizers
from stitch.targets.c.source import c_source
from stitch_testing import compiles_for_avx512

pytestmark = pytest.mark.skipif(cpu.compiler() is None, reason="no C compiler on this machine")
WIDTH = cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) if cpu.compiler() is not None else 0
# the instruction that marks the recognizer's form at this width
MARK = {64: "_mm512_madd_epi16", 32: "_mm256_madd_epi16"}.get(WIDTH)


def quantized(m: int, k: int, n: int, dtype: str) -> str:
    """MatMulInteger's product as onnxruntime's quantize_dynamic writes it: u8 rows less their zero
    point times a byte weight (a u8 weight less its own, a literal)."""
    b = "cast(b, dtype=i32)" if dtype == "i8" else "sub(cast(b, dtype=i32), 134)"
    return f"""func f(a: u8[{m}, {k}], za: u8[], b: {dtype}[{k}, {n}]) -> i32[{m}, {n}] {{
  return matmul(sub(cast(a, dtype=i32), cast(za, dtype=i32)), {b})
}}
"""


def wide(m: int, k: int, n: int) -> str:
    """Factors of any i32 value, read where they are: where one does not fit in 16 bits, not the pairs."""
    return f"""func f(a: i32[{m}, {k}], b: i32[{k}, {n}]) -> i32[{m}, {n}] {{
  return matmul(a, b)
}}
"""


CASES = {  # text, the largest magnitude of A's values, of B's
    "i8, whole blocks and panels": (quantized(256, 64, 48, "i8"), 0, 0),
    "u8, odd K, rows and columns left over": (quantized(264, 75, 52, "u8"), 0, 0),
    "i8, odd K, rows and columns left over": (quantized(268, 33, 40, "i8"), 0, 0),
    "i32 factors in 16 bits": (wide(256, 50, 40), 1 << 15, 1 << 15),
    "an A past 16 bits": (wide(256, 50, 40), 1 << 30, 1 << 15),
    "a B past 16 bits": (wide(256, 50, 40), 1 << 15, 1 << 30),
}


def inputs(graph, seed: int, high_a: int, high_b: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in zip(graph.param_names, graph.param_types):
        if t.dtype == "i32":
            high = high_a if name == "a" else high_b
            out[name] = rng.integers(-high, high, t.shape).astype(np.int32)
        else:
            info = np.iinfo(np.uint8 if t.dtype == "u8" else np.int8)
            out[name] = rng.integers(info.min, info.max + 1, t.shape).astype(info.dtype)
    return out


@pytest.mark.parametrize("walk", ["panels outside", "rows outside"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_recognizer_computes_what_the_plain_loops_compute(case, walk, tmp_path, monkeypatch):
    """Both walks: A's pairs of every row first, then panel by panel (a tile's rows that fit
    ALL_ROWS_BYTES), or block of rows by block (forced here by a budget of 0)."""
    text, high_a, high_b = CASES[case]
    if walk == "rows outside":
        monkeypatch.setattr(int_rows, "ALL_ROWS_BYTES", 0)
    taken = stitch.compile(text, cache_dir=tmp_path)
    if MARK:
        assert MARK in taken.native.source_path.read_text()
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("int_rows", "matmul"))
    plain = stitch.compile(text, cache_dir=tmp_path)
    assert "madd_epi16" not in plain.native.source_path.read_text()
    for seed in range(3):
        values = inputs(taken.graph, seed, high_a, high_b)
        reference = evaluate(taken.graph, values)
        for program in (taken, plain):
            (got,) = program(**values)
            np.testing.assert_array_equal(got, reference[0], err_msg=case)


def test_a_bound_weight_in_pairs_keeps_the_references_sums(tmp_path):
    """A bound u8 weight less its zero point, its tiles laid out at binding (lowering/bind.py): the
    pairs come from the block, and the sums are the reference's."""
    text = quantized(256, 160, 96, "u8")
    graph = stitch.compile(text, cache_dir=tmp_path).graph
    values = inputs(graph, 5, 0, 0)
    weight = {"b": values.pop("b")}
    bound = stitch.compile(text, weights=weight, cache_dir=tmp_path)
    if MARK:
        assert MARK in bound.native.source_path.read_text()
    (got,) = bound(**values)
    np.testing.assert_array_equal(got, evaluate(graph, values | weight)[0])


def test_the_64_byte_form_compiles_for_avx512(tmp_path):
    """The form at AVX-512's width compiles (not run: this machine may have no AVX-512)."""
    program = stitch.compile(quantized(264, 75, 52, "u8"), cache_dir=tmp_path)
    source = c_source(program.loops, 64)[0]
    assert "_mm512_madd_epi16" in source
    assert not compiles_for_avx512(source, tmp_path)


def test_a_tile_of_few_rows_keeps_the_micro_kernel(tmp_path):
    """Fewer rows than MIN_ROWS a tile (the int8 GPT-2 fixture's 8 and 32): the pairs' pass over B would
    not be paid back, so the micro-kernel multiplies."""
    program = stitch.compile(quantized(32, 64, 48, "i8"), cache_dir=tmp_path)
    assert "madd_epi16" not in program.native.source_path.read_text()
