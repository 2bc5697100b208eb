"""An integer product whose bound byte weight is laid out in pairs of k (lowering/pairs.py) and read with a
widening load (targets/c/int_pairs.py): the pack is gone, the block holds the weight's bytes moved, and
the C with the recognizer in computes what the plain loops compute and what the reference does, bit for
bit: i8 and u8 weights (a zero point), A computed (a quantized activation) and read where it is, A's
values past 16 bits (the loops as written), rows that fill the register blocks and not, both walks.
The layout is made for the machine's width here (the suite pins AVX-512's 64 bytes, tests/conftest.py);
the 64-byte form compiles for AVX-512."""

from __future__ import annotations

import re

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate
from stitch.engine.schedule import target as machine
from stitch.lowering.bind import run_prologue
from stitch.lowering.loops import print_loops
from stitch.targets import cc, cpu
from stitch.targets.c import int_pairs, recognizers
from stitch.targets.c.source import c_source
from stitch_testing import compiles_for_avx512

pytestmark = pytest.mark.skipif(cpu.compiler() is None, reason="no C compiler on this machine")
WIDTH = cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) if cpu.compiler() is not None else 0
MARK = {64: "_mm512_madd_epi16", 32: "_mm256_madd_epi16"}.get(WIDTH)


@pytest.fixture
def machine_width(monkeypatch):
    """The layout made for this machine's vectors (a machine without 32- or 64-byte ones: AVX2's)."""
    width = WIDTH if WIDTH in (32, 64) else 32
    monkeypatch.setattr(machine, "machine_vector_bytes", lambda cpuinfo=None: width)
    return width


def quantized(m: int, k: int, n: int, dtype: str) -> str:
    """MatMulInteger's product as onnxruntime's quantize_dynamic writes it: u8 rows less their zero
    point times a byte weight (a u8 weight less its own, a literal)."""
    b = "cast(w, dtype=i32)" if dtype == "i8" else "sub(cast(w, dtype=i32), 134)"
    return f"""func f(a: u8[{m}, {k}], za: u8[], w: {dtype}[{k}, {n}]) -> i32[{m}, {n}] {{
  return matmul(sub(cast(a, dtype=i32), cast(za, dtype=i32)), {b})
}}
"""


def wide(m: int, k: int, n: int) -> str:
    """An i32 A read where it is: where a value does not fit in 16 bits, the loops as written."""
    return f"""func f(a: i32[{m}, {k}], w: i8[{k}, {n}]) -> i32[{m}, {n}] {{
  return matmul(a, cast(w, dtype=i32))
}}
"""


CASES = {  # text, the largest magnitude of A's values (i32 A)
    "i8": (quantized(256, 64, 64, "i8"), 0),
    "u8, rows left over": (quantized(260, 96, 64, "u8"), 0),
    "i32 A in 16 bits": (wide(130, 40, 64), 1 << 15),
    "an A past 16 bits": (wide(130, 40, 64), 1 << 30),
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


def built(text: str, weight: np.ndarray, cache, **kw):
    return stitch.compile(text, weights={"w": weight}, cache_dir=cache, **kw)


@pytest.mark.parametrize("walk", ["every row first", "rows outside"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_recognizer_computes_what_the_plain_loops_compute(case, walk, cache, monkeypatch, machine_width):
    text, high = CASES[case]
    if walk == "rows outside":
        monkeypatch.setattr(int_pairs, "ALL_ROWS_BYTES", 0)
    graph = stitch.compile(text, cache_dir=cache).graph
    values = inputs(graph, 3, high)
    weight = values.pop("w")
    taken = built(text, weight, cache)
    source = taken.native.source_path.read_text()
    assert "_pairs" in print_loops(taken.loops) and "_pack" not in print_loops(taken.loops)
    if MARK:
        assert MARK in source and '"vpaddd %1, %0, %0"' in source
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("int_pairs"))
    plain = built(text, weight, cache)
    assert "madd_epi16" not in plain.native.source_path.read_text()
    reference = evaluate(graph, values | {"w": weight})[0]
    for program in (taken, plain):
        (got,) = program(**values)
        np.testing.assert_array_equal(got, reference, err_msg=case)


def test_the_block_holds_the_weights_bytes_in_pairs_of_k(cache, machine_width):
    """Each tile's panel of W columns one run along k, a column's two k of a pair side by side."""
    text = quantized(256, 64, 64, "u8")
    weight = inputs(stitch.compile(text, cache_dir=cache).graph, 1, 0)["w"]
    program = built(text, weight, cache)
    loops = print_loops(program.loops)
    columns = 2 * machine_width // 4
    assert re.search(rf"cast\(w\w*_pairs0\[[^\]]*p1 // {columns}, r0 // 2, p1 % {columns}, r0 % 2\]\), 134", loops)
    (block,) = [b for b in program.loops.params if b.name.endswith("_pairs0")]
    laid = run_prologue(program.loops.prologue, {"w": weight})[block.name]
    laid = laid.reshape((-1,) + laid.shape[-4:])  # [tile of columns, panel, k // 2, column, k % 2]
    tiles, panels, pairs = laid.shape[:3]
    back = laid.transpose(0, 2, 4, 1, 3).reshape(tiles, 2 * pairs, panels * columns)
    np.testing.assert_array_equal(np.concatenate(list(back), axis=1), weight)


def test_the_64_byte_form_compiles_for_avx512(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "machine_vector_bytes", lambda cpuinfo=None: 64)
    text = quantized(260, 96, 64, "u8")
    weight = inputs(stitch.compile(text, cache_dir=cache).graph, 1, 0)["w"]
    source = c_source(built(text, weight, cache).loops, 64)[0]
    assert "_mm512_cvtepu8_epi16" in source and "_mm512_madd_epi16" in source
    assert not compiles_for_avx512(source, tmp_path)


def test_a_weight_the_caller_passes_keeps_its_pack(cache, machine_width):
    """Not bound: its pairs would be made on every call anyway; int_rows makes them from the pack."""
    program = stitch.compile(quantized(256, 64, 64, "i8"), cache_dir=cache)
    assert "_pairs" not in print_loops(program.loops)
