"""The reference interpreter against hand-written numpy, and its float behaviour."""

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from stitch.engine.check import check_func
from stitch.engine.errors import StitchError
from stitch.engine.interp import evaluate, random_inputs
from stitch.engine.parse import parse_file, parse_program

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.ir"))
f32 = np.float32


# -- hand-written numpy for every example, in float32 ----------------------------------


def layernorm(x, gamma, beta):
    a = x + x
    d = a - a.mean(axis=0)
    var = (d * d).mean(axis=0)
    return [d / np.sqrt(var + f32(1e-5)) * gamma + beta]


def layernorm_lastaxis(x, gamma, beta):
    d = x - x.mean(axis=-1, keepdims=True)
    var = np.square(d).mean(axis=-1, keepdims=True)
    return [d / np.sqrt(var + f32(1e-5)) * gamma + beta]


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return [e / e.sum(axis=1, keepdims=True)]


def attention(q, k, v):
    scores = np.einsum("hqd,hkd->hqk", q, k) / f32(8.0)
    return [softmax_lastaxis(scores) @ v]


def softmax_lastaxis(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def mlp(x, w, bias):
    return [np.maximum(x @ w + bias, f32(0))]


def bias_gelu(x, bias):
    y = x + bias
    c = f32(math.sqrt(2 / math.pi))
    return [f32(0.5) * y * (f32(1) + np.tanh(c * (y + f32(0.044715) * (y * y * y))))]


def rmsnorm(x, weight):
    return [x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + f32(1e-6)) * weight]


def two_outputs(x):
    return [x * f32(2), x.sum(axis=1)]


REFERENCES = {
    "attention": attention,
    "bias_gelu": bias_gelu,
    "layernorm": layernorm,
    "layernorm_large": layernorm,
    "layernorm_lastaxis": layernorm_lastaxis,
    "mlp": mlp,
    "mlp_large": mlp,
    "rmsnorm": rmsnorm,
    "softmax": softmax,
    "two_outputs": two_outputs,
}


def test_every_example_has_a_reference():
    names = {f.name for path in EXAMPLES for f in parse_file(path).funcs}
    assert names == set(REFERENCES)


# The big examples (up to 4096 x 4096) run once each, on one seed.
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_handwritten_numpy(path):
    for func in parse_file(path).funcs:
        graph = check_func(func)
        inputs = random_inputs(graph, seed=7)
        got = evaluate(graph, inputs)
        want = REFERENCES[func.name](*(inputs[n] for n in graph.param_names))
        assert len(got) == len(want) == len(func.results)
        for g, w, t in zip(got, want, graph.output_types):
            assert g.dtype == np.float32 and w.dtype == np.float32
            assert g.shape == t.shape
            assert_close(g, w, rtol=1e-5, atol=1e-6)


def assert_close(got, want, rtol, atol):
    """np.testing.assert_allclose, with a cheap first pass for the 16M-element outputs."""
    if got.shape == want.shape and bool(np.all(np.abs(got - want) <= atol + rtol * np.abs(want))):
        return
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# -- float behaviour -------------------------------------------------------------------------


def run(text: str, **inputs):
    program = parse_program(text)
    return evaluate(check_func(program.funcs[0], program.source), inputs)


def test_float32_stays_float32():
    x = np.random.default_rng(1).uniform(0.5, 2, size=256).astype(f32)
    mul, mean, sig, s = run(
        """func f(x: f32[256]) -> (f32[256], f32[], f32[256], f32[256]) {
          return mul(x, 0.1), mean(x), sigmoid(x), sqrt(add(x, 1e-3))
        }""",
        x=x,
    )
    assert {a.dtype for a in (mul, mean, sig, s)} == {np.dtype(f32)}
    # Bit-exact float32 arithmetic: a float64 detour rounds differently for some elements.
    np.testing.assert_array_equal(mul, x * f32(0.1))
    np.testing.assert_array_equal(s, np.sqrt(x + f32(1e-3)))
    assert not np.array_equal(mul, (x.astype(np.float64) * 0.1).astype(f32)), "test inputs cannot tell"


def test_float16_stays_float16():
    x = np.linspace(0.5, 2, 12, dtype=np.float16)
    (y,) = run("func f(x: f16[12]) -> f16[12] { return div(exp(x), 3.0) }", x=x)
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, np.exp(x) / np.float16(3.0))


def test_integer_sum_keeps_i32():
    x = np.arange(12, dtype=np.int32).reshape(4, 3) - 5
    rows, total, big = run(
        """func f(x: i32[4, 3], b: i32[2]) -> (i32[4], i32[], i32[]) {
          return sum(x, axes=[1]), sum(x), sum(b)
        }""",
        x=x,
        b=np.array([2**31 - 1, 1], dtype=np.int32),
    )
    assert rows.dtype == total.dtype == big.dtype == np.int32
    np.testing.assert_array_equal(rows, [-12, -3, 6, 15])
    assert total == 6
    assert big == -(2**31)  # wraps as i32 arithmetic does


def test_integer_ops_keep_their_dtype():
    x = np.array([[-3, 4], [5, -6]], dtype=np.int64)
    outs = run(
        """func f(x: i64[2, 2]) -> (i64[2], i64[2, 2], i64[2, 2], i64[2, 2]) {
          return max(x, axes=[0]), matmul(x, x), relu(x), mul(x, 3)
        }""",
        x=x,
    )
    assert [o.dtype for o in outs] == [np.int64] * 4
    for got, want in zip(outs, [[5, 4], x @ x, [[0, 4], [5, 0]], x * 3]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype, rtol", [("f64", 1e-15), ("f32", 1e-6)])
def test_erf_matches_math_erf(dtype, rtol):
    xs = np.concatenate([np.linspace(-5, 5, 201), [-1e-8, 1e-8, 0.0, 30.0, -30.0]])
    xs = xs.astype(np.float64 if dtype == "f64" else f32)
    (y,) = run(f"func f(x: {dtype}[{len(xs)}]) -> {dtype}[{len(xs)}] {{ return erf(x) }}", x=xs)
    assert y.dtype == xs.dtype
    want = [math.erf(float(v)) for v in xs]
    np.testing.assert_allclose(y, want, rtol=rtol, atol=rtol * 1e-3)
    assert y[list(xs).index(30.0)] == 1.0 and y[list(xs).index(-30.0)] == -1.0


def test_erf_of_a_scalar():
    (y,) = run("func f(x: f32[]) -> f32[] { return erf(x) }", x=np.asarray(0.5, dtype=f32))
    assert y.shape == () and y.dtype == f32
    assert y == f32(math.erf(0.5))


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_sigmoid_at_extremes(dtype):
    xs = np.array([-1e4, -100, -30, -1, 0, 1, 30, 100, 1e4]).astype(dtype.replace("f", "float"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # overflow in exp must stay quiet
        (y,) = run(f"func f(x: {dtype}[9]) -> {dtype}[9] {{ return sigmoid(x) }}", x=xs)
    assert y.dtype == xs.dtype
    assert not np.isnan(y).any()
    assert np.all((y >= 0) & (y <= 1)) and np.all(np.diff(y) >= 0)
    want = [1 / (1 + math.exp(-v)) if v > -700 else 0.0 for v in xs.astype(float)]
    np.testing.assert_allclose(y.astype(float), want, rtol=1e-3, atol=1e-7)
    assert y[4] == 0.5 and y[-1] == 1.0 and y[0] == 0.0


def test_outputs_keep_their_declared_shapes():
    x = np.ones((2, 3), dtype=f32)
    scalar, same, moved = run(
        "func f(x: f32[2, 3]) -> (f32[], f32[2, 3], f32[3, 2]) { return sum(x), x, transpose(x) }", x=x
    )
    assert scalar.shape == () and scalar == 6
    assert same.shape == (2, 3)
    assert moved.shape == (3, 2) and moved.flags.c_contiguous


def test_inputs_are_checked():
    graph = check_func(parse_program("func f(x: f32[2]) -> f32[2] { return x }").funcs[0])
    with pytest.raises(StitchError):
        evaluate(graph, {})
    with pytest.raises(StitchError):
        evaluate(graph, {"x": np.ones(2, f32), "y": np.ones(2, f32)})
    with pytest.raises(StitchError):
        evaluate(graph, {"x": np.ones(3, f32)})
    with pytest.raises(StitchError):
        evaluate(graph, {"x": np.ones(2, np.float64)})


def test_random_inputs_stay_in_every_ops_domain():
    program = parse_program("func f(x: f32[50, 50], i: i32[40], b: bool[30]) -> f32[50, 50] { return log(x) }")
    graph = check_func(program.funcs[0])
    inputs = random_inputs(graph, seed=3)
    assert inputs["x"].dtype == f32 and inputs["x"].min() >= 0.5 and inputs["x"].max() < 2
    assert inputs["i"].dtype == np.int32 and inputs["b"].dtype == np.bool_
    np.testing.assert_array_equal(random_inputs(graph, seed=3)["x"], inputs["x"])
