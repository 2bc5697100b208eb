"""A row stored contiguously from a read along another axis is written in vectors with gathers
(targets/c/strided_row.py), its ReLU6's max and min in branch-free vector forms: the same bits as its
plain-loop twin (the same program with the recognizer left out of the table), NaN and signed zeros
included, and the reference's values."""

from __future__ import annotations

import numpy as np
import stitch
from stitch.engine.ir.interp import evaluate
from stitch.targets import cc, cpu
from stitch.targets.c import recognizers
from stitch_testing import needs_cc

# MobileNetV2's padded expansion, small: the product's rows are positions, the depthwise conv reads
# channels-first (32 of them: a step gcc leaves scalar); 21 positions a row (two vectors of 8 and a
# scalar tail on AVX2, one of 16 on AVX-512)
PADDED = """func t(y: f32[1, 441, 32], b: f32[32, 1, 1], z1: f32[1, 32, 1, 21],
       z2: f32[1, 32, 23, 1]) -> f32[1, 32, 23, 23] {
  x = reshape(transpose(y, perm=[0, 2, 1]), shape=[1, 32, 21, 21])
  c = minimum(maximum(add(x, b), 0.0), 6.0)
  p = concat(z1, c, z1, axis=2)
  return concat(z2, p, z2, axis=3)
}
"""
# the clip with the bound first and a maximum of two reads, the bias first: each operand order of max and min
CLAMPED = """func t(y: f32[1, 441, 32], b: f32[32, 1, 1], z1: f32[1, 32, 1, 21],
       z2: f32[1, 32, 23, 1]) -> f32[1, 32, 23, 23] {
  x = reshape(transpose(y, perm=[0, 2, 1]), shape=[1, 32, 21, 21])
  p = concat(z1, minimum(6.0, maximum(b, x)), z1, axis=2)
  return concat(z2, p, z2, axis=3)
}
"""


def inputs(rng) -> dict:
    y = rng.standard_normal((1, 441, 32)).astype(np.float32)
    y[0, ::7, 3] = np.nan  # the NaN-aware max and min keep it
    y[0, 1::5, 5] = -0.0  # max(-0, +0) is +0, min(-0, +0) is -0
    y[0, 2::5, 6] = 0.0
    y[0, 3::9, 7] = 6.0
    b = rng.standard_normal((32, 1, 1)).astype(np.float32)
    b[5] = b[6] = 0.0
    b[8] = -0.0
    b[9] = np.nan
    return {"y": y, "b": b, "z1": np.zeros((1, 32, 1, 21), np.float32), "z2": np.zeros((1, 32, 23, 1), np.float32)}


def twins(text: str, tmp_path, monkeypatch):
    taken = stitch.compile(text, cache_dir=tmp_path)
    monkeypatch.setattr(recognizers, "RECOGNIZERS", recognizers.without("strided_row"))
    plain = stitch.compile(text, cache_dir=tmp_path)
    return taken, plain


def gathers(program) -> bool:
    return "st_gatherv_f32(&" in program.native.source_path.read_text()


VECTORS = cpu.compiler() is not None and cc.vector_bytes(cpu.compiler(), cc.compiler_flags()) in (32, 64)


@needs_cc
def test_a_padded_transpose_with_relu6_gathers_and_computes_its_twins_bits(tmp_path, monkeypatch):
    taken, plain = twins(PADDED, tmp_path, monkeypatch)
    assert gathers(taken) == VECTORS and not gathers(plain)
    v = inputs(np.random.default_rng(0))
    (got,), (want,) = taken(**v), plain(**v)
    assert got.tobytes() == want.tobytes()
    x = v["y"].transpose(0, 2, 1).reshape(1, 32, 21, 21) + v["b"]
    c = np.where(np.isnan(x), x, np.minimum(np.maximum(x, np.float32(0)), np.float32(6)))
    np.testing.assert_array_equal(got, np.pad(c, ((0, 0), (0, 0), (1, 1), (1, 1))))
    assert (got == 0).any() and not np.signbit(got[got == 0]).any()  # max(-0, +0) = +0


@needs_cc
def test_max_and_min_keep_the_scalar_bits_in_either_operand_order(tmp_path, monkeypatch):
    taken, plain = twins(CLAMPED, tmp_path, monkeypatch)
    assert gathers(taken) == VECTORS and not gathers(plain)
    v = inputs(np.random.default_rng(1))
    (got,), (want,) = taken(**v), plain(**v)
    assert got.tobytes() == want.tobytes()
    (ref,) = evaluate(taken.graph, v)
    assert ref.tobytes() == got.tobytes()
    assert np.isnan(got).any() and (np.signbit(got) & (got == 0)).any()
