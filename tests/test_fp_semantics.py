"""The floating-point semantics every target follows (docs/explanation/floating-point.md).

Each case runs on the reference interpreter, the compiled C (cpu), the
simulator (accel) and the numpy executor, and all must give the same bits
(or, for reductions, agree within the tolerance): casts out of range, NaN and
signed zeros through maximum/minimum/relu and the max/min reductions, pow at
-inf and -0.0, no fused multiply-add, f16 sums accumulated in f32. The
property tests feed the examples and random programs non-finite inputs.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import stitch
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.ir import floats
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.tolerance import compare
from stitch.targets import cc, cpu
from stitch_testing import EXAMPLES, needs_cc

TARGETS = ["cpu", "accel", "numpy"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def compiled(text: str, target: str, cache):
    if target == "numpy":  # the numpy executor, where no C compiler is found
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(cpu, "compiler", lambda: None)
            return stitch.compile(text, cache_dir=cache)
    if target == "cpu" and cpu.compiler() is None:
        pytest.skip("no C compiler on this machine")
    return stitch.compile(text, target=target, cache_dir=cache)


def run_everywhere(text: str, inputs: dict, cache) -> tuple[list, dict]:
    """The reference's outputs and each target's."""
    program = compiled(text, "accel", cache)
    want = evaluate(program.graph, inputs)
    return want, {t: compiled(text, t, cache)(**inputs) for t in TARGETS}


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal dtype, shape and values, NaN to NaN and each zero's sign included."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if got.dtype.kind != "f":
        return np.array_equal(got, want)

    def bits(v):
        return np.where(np.isnan(v), 0, v).view(f"u{v.itemsize}")

    return np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(bits(got), bits(want))


# -- casts ------------------------------------------------------------------------

SPECIAL = [np.nan, np.inf, -np.inf, 1e38, -1e38, 1e30, -1e30, 3e9, -3e9, 2**31, -2**31, 2**31 - 128, 9.3e18,
           -9.3e18, 2**63, -2**63, 65504, -0.0, 0.5, -0.5, -2.7, 2.7]


def test_float_to_int_is_numpys_x86_definition():
    """Measured numpy (2.4, x86-64): truncation toward zero, and NaN, +-inf and anything out of range give the
    integer type's minimum; floats.cast gives the same on every platform."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for src in (np.float16, np.float32, np.float64):
            x = np.array(SPECIAL, np.float64).astype(src)
            for dst in (np.int32, np.int64):
                want = np.where(np.isnan(x) | (np.trunc(x.astype(np.float64)) < np.iinfo(dst).min)
                                | (np.trunc(x.astype(np.float64)) > np.iinfo(dst).max), np.iinfo(dst).min,
                                np.trunc(np.nan_to_num(x.astype(np.float64), posinf=0, neginf=0))).astype(dst)
                np.testing.assert_array_equal(floats.cast(x, dst), want)
                assert floats.cast(x, dst).dtype == dst
            np.testing.assert_array_equal(floats.cast(x, np.bool_), x != 0)
            for dst in (np.int8, np.uint8):  # the i32 cast's low byte, as numpy on x86-64 gives
                np.testing.assert_array_equal(floats.cast(x, dst), floats.cast(x, np.int32).astype(dst))
        small = np.array([300.0, -1.0, -300.0, 255.9, -0.5, 127.5, -128.7], np.float32)
        np.testing.assert_array_equal(floats.cast(small, np.uint8), small.astype(np.uint8))
        np.testing.assert_array_equal(floats.cast(small, np.int8), small.astype(np.int8))


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
@pytest.mark.parametrize("to", ["i8", "u8", "i32", "i64", "bool"])
def test_out_of_range_casts_agree_on_every_target(dtype, to, cache):
    # cast back to a float too: gcc -O3 folded cast(cast(x, i64), f32) to x before (issue 18.5)
    text = f"func f(x: {dtype}[{len(SPECIAL)}]) -> ({to}[{len(SPECIAL)}], f64[{len(SPECIAL)}]) " \
           f"{{\n  c = cast(x, dtype={to})\n  return c, cast(c, dtype=f64)\n}}\n"
    with np.errstate(all="ignore"):
        x = np.array(SPECIAL, np.float64).astype(dtype.replace("f", "float"))
    want, got = run_everywhere(text, {"x": x}, cache)
    for target, outs in got.items():
        for g, w in zip(outs, want):
            assert same_bits(g, w), (target, x, g, w)


# -- integers: wrap-around, bit operations, shifts by any count -------------------------------------

INTEGER_PROGRAM = """func f(a: {d}[{n}], b: {d}[{n}]) -> ({d}[{n}], {d}[{n}], {d}[{n}], {d}[{n}], {d}[{n}], {d}[{n}], {d}[{n}],
                                 {d}[{n}], {d}[{n}], f32[{n}], i32[{n}], u8[{n}]) {{
  return add(a, b), mul(a, b), neg(a), abs(a), bitand(a, b), bitor(a, b), bitxor(a, b), shl(a, b), shr(a, b),
         cast(a, dtype=f32), cast(a, dtype=i32), cast(a, dtype=u8)
}}
"""


@pytest.mark.parametrize("dtype", ["i8", "u8", "i32", "i64"])
def test_integer_ops_wrap_and_shift_as_numpy_on_every_target(dtype, cache):
    """Every edge value against every other (shift counts outside 0..bits-1 and negative ones
    among them): each target gives numpy's bits, and the reference is numpy's own ufuncs."""
    edges = floats.edge_values(dtype) + [3, 7, 8, 31, 63, 64, 100]
    info = np.iinfo(dtype.replace("i", "int").replace("u", "uint"))
    edges = [v for v in dict.fromkeys(edges) if info.min <= v <= info.max]
    a, b = (np.array(v, info.dtype) for v in zip(*[(x, y) for x in edges for y in edges]))
    text = INTEGER_PROGRAM.format(d=dtype, n=len(a))
    want, got = run_everywhere(text, {"a": a, "b": b}, cache)
    with np.errstate(all="ignore"):
        bits = 8 * info.dtype.itemsize
        inside = (b >= 0) & (b < bits)
        numpy = [a + b, a * b, -a, np.abs(a), a & b, a | b, a ^ b,
                 np.where(inside, np.left_shift(a, np.where(inside, b, 0)), 0),
                 np.where(inside, np.right_shift(a, np.where(inside, b, 0)), np.where(a < 0, -1, 0)),
                 a.astype(np.float32), a.astype(np.int32), a.astype(np.uint8)]
    for w, n in zip(want, numpy):
        np.testing.assert_array_equal(w, np.asarray(n).astype(w.dtype))
    for target, outs in got.items():
        for k, (g, w) in enumerate(zip(outs, want)):
            assert same_bits(g, w), (target, k, a, b, g, w)


def test_scalar_cast_is_not_folded_away(cache):
    program = compiled("func f(x: f32[]) -> f32[] {\n  return cast(cast(x, dtype=i64), dtype=f32)\n}\n", "cpu", cache)
    for v in (np.nan, 1e38, 1e30):
        assert program(x=np.array(v, np.float32))[0] == np.float32(-(2.0**63))


# -- literals ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
def test_a_negative_zero_literal_keeps_its_sign(dtype, cache):
    """egglog's f64 holds -0.0 and 0.0 as one value: the literal -0.0 enters the e-graph as neg(0.0)
    (it was read back as 0.0, and x / -0.0 came out inf where numpy gives -inf)."""
    text = (f"func f(x: {dtype}[3]) -> ({dtype}[3], {dtype}[3], {dtype}[3]) {{\n"
            "  return div(x, -0.0), mul(x, -0.0), sub(mul(x, 0.0), -0.0)\n}\n")
    x = np.array([2.0, -0.5, 0.0], dtype=np.dtype(dtype.replace("f", "float")))
    want, got = run_everywhere(text, {"x": x}, cache)
    assert np.isneginf(want[0][0]) and np.signbit(want[1][0]) and not np.signbit(want[2][0])
    for target, outs in got.items():
        assert all(same_bits(g, w) for g, w in zip(outs, want)), target


def test_a_rules_zero_does_not_match_a_negative_zero(tmp_path):
    """A rule's 0.0 (here in an unsound rule) matches 0.0 and not -0.0, and -0.0 on a rule's right
    side enters as -0.0."""
    from stitch.engine.pipeline import check_entry, load_rule_files, read_program, saturate_program
    from stitch.engine.rewrite.rulecompile import compile_rule_file

    rules = tmp_path / "zero.rules"
    rules.write_text("rule times-zero: mul(?x, 0.0) => add(?x, 1.0)\nrule sub-zero: sub(?x, 0.0) => add(?x, -0.0)\n")
    files = load_rule_files([str(rules)], builtin=False, trust_rules=True)  # unsound on purpose

    def matches(zero: str) -> int:
        graph = check_entry(read_program(f"func f(x: f32[4]) -> f32[4] {{\n  return mul(x, {zero})\n}}\n"))
        return saturate_program(graph, files)[1].matches.get("times-zero", 0)

    assert matches("0.0") >= 1 and matches("-0.0") == 0
    assert '(Un "neg" (Global (Const 0.0' in compile_rule_file(files[0])


@pytest.mark.parametrize("op", ["rsqrt", "sigmoid"])
def test_f16_rsqrt_and_sigmoid_round_each_step_as_numpy_does(op, cache):
    """The reference's f16 rsqrt is the reciprocal of its f16 sqrt (two roundings); the C computed
    1 / sqrtf(x) in float and rounded once, a different f16 near a rounding midpoint (rsqrt(1.781):
    0.7495 where numpy gives 0.749; a random seed found it). sigmoid likewise, step by step."""
    x = np.arange(1, 1 << 15, 7, dtype=np.uint16).view(np.float16)  # a stride of the positive f16s
    x = x[np.isfinite(x)]
    want, got = run_everywhere(f"func f(x: f16[{x.size}]) -> f16[{x.size}] {{\n  return {op}(x)\n}}\n",
                               {"x": x}, cache)
    for target, outs in got.items():
        assert same_bits(outs[0], want[0]), target


# -- no fused multiply-add ----------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_multiply_then_add_is_not_fused(target, cache):
    text = "func f(a: f32[8], b: f32[8], c: f32[8]) -> f32[8] {\n  return add(mul(a, b), c)\n}\n"
    inputs = {"a": np.full(8, 2, np.float32), "b": np.full(8, 3e38, np.float32), "c": np.full(8, -3e38, np.float32)}
    (out,) = compiled(text, target, cache)(**inputs)
    assert np.all(np.isposinf(out))  # 2 * 3e38 overflows before the add; an FMA would give 3e38


@needs_cc
def test_matmul_micro_kernel_fuses_multiply_add_explicitly(cache):
    """matmul's products and sums may be fused (as BLAS's are); its micro-kernel asks for FMA by name."""
    program = compiled("func f(a: f32[16, 64], b: f32[64, 64]) -> f32[16, 64] {\n  return matmul(a, b)\n}\n",
                       "cpu", cache)
    source = program.native.source_path.read_text()
    assert "st_fma_f32(" in source and "-ffp-contract=off" in cc.REQUIRED_FLAGS
    a, b = (np.random.default_rng(1).random(s, dtype=np.float32) for s in ((16, 64), (64, 64)))
    assert compare(program(a=a, b=b)[0], a @ b) == ""


# -- maximum, minimum, relu, max, min: NaN and signed zeros ---------------------------


def test_maximum_orders_zeros_and_propagates_nan():
    z, nz, nan = np.float32(0), np.float32(-0.0), np.float32(np.nan)
    assert not np.signbit(floats.maximum(nz, z)) and not np.signbit(floats.maximum(z, nz))
    assert np.signbit(floats.minimum(nz, z)) and np.signbit(floats.minimum(z, nz))
    assert np.signbit(floats.maximum(nz, nz)) and not np.signbit(floats.minimum(z, z))
    assert np.isnan(floats.maximum(nan, z)) and np.isnan(floats.minimum(z, nan))
    x = np.array([[0.0, -0.0], [-0.0, -0.0], [np.nan, 1.0]], np.float32)
    assert list(np.signbit(floats.reduce_extremum("max", x, 1, False))[:2]) == [False, True]
    assert list(np.signbit(floats.reduce_extremum("min", -x, 1, False))[:2]) == [True, False]
    assert np.isnan(floats.reduce_extremum("max", x, 1, False)[2])


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
def test_zeros_and_nan_through_extrema_agree_on_every_target(dtype, cache):
    n = 37  # over a vector's width: the vectorized reductions combine lanes
    text = (f"func f(x: {dtype}[4, {n}], y: {dtype}[4, {n}]) -> ({dtype}[4, {n}], {dtype}[4, {n}], "
            f"{dtype}[4, {n}], {dtype}[4], {dtype}[4], {dtype}[{n}], {dtype}[{n}]) {{\n"
            f"  return maximum(x, y), minimum(x, y), relu(x), max(x, axes=[1]), min(x, axes=[1]), "
            f"max(x, axes=[0]), min(x, axes=[0])\n}}\n")
    rng = np.random.default_rng(7)
    np_dt = np.dtype(dtype.replace("f", "float"))
    pool = np.array([0.0, -0.0, np.nan, -1.0], np_dt)
    x = rng.choice(pool, size=(4, n)).astype(np_dt)
    x[0] = 0.0
    x[0, 5] = -0.0  # a zero max with one -0.0
    x[1] = -0.0
    x[1, n - 1] = 0.0  # and one +0.0 last
    x[2] = -1.0
    x[2, 3] = np.nan
    y = rng.choice(pool, size=(4, n)).astype(np_dt)
    want, got = run_everywhere(text, {"x": x, "y": y}, cache)
    for target, outs in got.items():
        for k, (g, w) in enumerate(zip(outs, want)):
            assert same_bits(g, w), (target, k, g, w)


# -- pow -----------------------------------------------------------------------------


def test_pow_is_c99_pow_even_with_a_scalar_exponent(cache):
    # numpy alone gives power(-inf, 0.5) = nan (it takes sqrt for a scalar exponent of 0.5), but inf
    # for an array of 0.5s; stitch's pow is C99's everywhere
    text = "func f(x: f32[4]) -> (f32[4], f32[4]) {\n  return pow(x, 0.5), pow(x, 2.0)\n}\n"
    x = np.array([-np.inf, -0.0, 4.0, -1.0], np.float32)
    want, got = run_everywhere(text, {"x": x}, cache)
    assert list(want[0][:2]) == [np.inf, 0.0] and not np.signbit(want[0][1])
    for target, outs in got.items():
        for g, w in zip(outs, want):
            assert same_bits(g, w), (target, g, w)


# -- f16 sums --------------------------------------------------------------------------


def test_f16_sums_and_means_accumulate_in_f32_everywhere(cache):
    text = ("func f(x: f16[4096, 3], y: f16[4096]) -> (f16[3], f16[3], f16[], f16[], f16[]) {\n"
            "  return sum(x, axes=[0]), mean(x, axes=[0]), sum(y), mean(mul(y, 100.0)), sum(mul(y, 100.0))\n}\n")
    inputs = {"x": np.ones((4096, 3), np.float16), "y": np.ones(4096, np.float16)}
    want, got = run_everywhere(text, inputs, cache)
    # numpy's own f16 sum along axis 0 accumulates in f16 and stops at 2048
    assert np.sum(inputs["x"], axis=0, dtype=np.float16)[0] == 2048
    assert [float(w.flat[0]) for w in want] == [4096.0, 1.0, 4096.0, 100.0, np.inf]
    for target, outs in got.items():
        for g, w in zip(outs, want):
            assert same_bits(g, w), (target, g, w)


# -- non-finite inputs on the examples (issue 15.2) ----------------------------------------


def with_non_finite(inputs: dict, seed: int) -> dict:
    """10-30% of each float input's elements set to nan, inf or -inf."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, v in inputs.items():
        v = v.copy()
        if v.dtype.kind == "f":
            hit = rng.random(v.shape) < rng.uniform(0.1, 0.3)
            v[hit] = rng.choice([np.nan, np.inf, -np.inf], size=int(hit.sum()))
        out[name] = v
    return out


@pytest.mark.parametrize("example", ["mlp", "layernorm", "two_outputs"])
@pytest.mark.parametrize("target", ["cpu", "accel"])
@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_examples_with_non_finite_inputs_agree(example, target, seed, cache):
    program = compiled((EXAMPLES / f"{example}.ir").read_text(), target, cache)
    inputs = with_non_finite(random_inputs(program.graph, seed), seed)
    with np.errstate(all="ignore"):
        want = evaluate(program.graph, inputs)
    for k, (g, w) in enumerate(zip(program(**inputs), want)):
        assert compare(g, w) == "", (example, target, k)
