"""A one-row product in 32-bit integers of a byte weight read along its columns (targets/c/int_dot.py):
i8 and u8 weights, K even and odd, columns that fill the 128-column groups, the 32-column halves and
neither, and a left factor that fits in 16 bits (the VNNI path on AVX-512, vpmaddwd on AVX2) or not
(the loops as written): the C with the recognizer in computes what the plain loops compute and what
the reference does, bit for bit, at the machine's vector width."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate
from stitch.targets import cc, cpu
from stitch.targets.c import recognizers

pytestmark = pytest.mark.skipif(cpu.compiler() is None, reason="no C compiler on this machine")
WIDTH = cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) if cpu.compiler() is not None else 0
# the instruction that marks the recognizer's form at this width (VNNI on AVX-512, vpmaddwd on AVX2)
MARK = {64: "_mm512_dpwssd_epi32", 32: "_mm256_madd_epi16"}.get(WIDTH)


def quantized(k: int, n: int, dtype: str) -> str:
    """MatMulInteger's product as onnxruntime's quantize_dynamic writes it: a u8 row less its zero point."""
    return f"""func f(a: u8[1, {k}], za: u8[], b: {dtype}[{k}, {n}]) -> i32[1, {n}] {{
  return matmul(sub(cast(a, dtype=i32), cast(za, dtype=i32)), cast(b, dtype=i32))
}}
"""


def wide(k: int, n: int) -> str:
    """A left factor of any i32 value: where one does not fit in 16 bits the loops run as written."""
    return f"""func f(a: i32[1, {k}], b: i8[{k}, {n}]) -> i32[1, {n}] {{
  return matmul(a, cast(b, dtype=i32))
}}
"""


CASES = {
    "i8, groups and halves": (quantized(96, 1152, "i8"), 0),
    "u8, odd K, columns left over": (quantized(75, 672, "u8"), 0),
    "i8, halves and columns left over": (quantized(64, 200, "i8"), 0),
    "u8, odd K, tiles of a half and 8 columns": (quantized(33, 216, "u8"), 0),
    "i32 left factor, small": (wide(50, 520), 1 << 15),
    "i32 left factor, past 16 bits": (wide(50, 520), 1 << 30),
}


def inputs(graph, seed: int, high: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in zip(graph.param_names, graph.param_types):
        if t.dtype == "i32":
            out[name] = rng.integers(-high, high, t.shape).astype(np.int32)
        else:
            info = np.iinfo(np.uint8 if t.dtype == "u8" else np.int8)
            out[name] = rng.integers(info.min, info.max + 1, t.shape).astype(info.dtype)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_recognizer_computes_what_the_plain_loops_compute(case, tmp_path, monkeypatch):
    text, high = CASES[case]
    taken = stitch.compile(text, cache_dir=tmp_path)
    if MARK:
        assert MARK in taken.native.source_path.read_text()
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("int_dot"))
    plain = stitch.compile(text, cache_dir=tmp_path)
    assert "_mm512_dpwssd_epi32" not in plain.native.source_path.read_text()
    assert "_mm256_madd_epi16" not in plain.native.source_path.read_text()
    for seed in range(3):
        values = inputs(taken.graph, seed, high)
        reference = evaluate(taken.graph, values)
        for program in (taken, plain):
            (got,) = program(**values)
            np.testing.assert_array_equal(got, reference[0], err_msg=case)


def test_a_bound_weight_is_prefetched_block_by_block(tmp_path):
    """A bound weight laid out tile by tile (lowering/bind.py) has its rows one after the other: the
    next block of rows is prefetched, and the sums are still the reference's."""
    text = quantized(77, 1280, "i8")
    graph = stitch.compile(text, cache_dir=tmp_path).graph
    values = inputs(graph, 5, 0)
    weight = {"b": values.pop("b")}
    bound = stitch.compile(text, weights=weight, cache_dir=tmp_path)
    if MARK:
        assert "__builtin_prefetch(st_pf" in bound.native.source_path.read_text()
    (got,) = bound(**values)
    np.testing.assert_array_equal(got, evaluate(graph, values | weight)[0])
