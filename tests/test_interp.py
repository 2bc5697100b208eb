"""The reference interpreter against hand-written numpy, and its float behaviour."""

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from stitch.engine.ir import dims
from stitch.engine.ir.check import check_func, check_program
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import evaluate, index_bounds, random_inputs
from stitch.engine.ir.parse import parse_file, parse_program
from stitch_testing import example_sizes

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


def causal_attention(q, k, v):
    scores = np.einsum("hqd,hkd->hqk", q, k) * f32(0.125)
    n = scores.shape[-1]
    future = np.arange(n)[None, :] > np.arange(n)[:, None]
    return [softmax_lastaxis(np.where(future, -np.inf, scores)) @ v]


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


def attention_block(x, wq, wk, wv, wo):
    def heads(w):  # [128, 256] -> [4, 128, 64]
        return (x @ w).reshape(128, 4, 64).transpose(1, 0, 2)

    s = heads(wq) @ heads(wk).transpose(0, 2, 1) * f32(0.125)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    o = (e / e.sum(axis=-1, keepdims=True)) @ heads(wv)
    return [o.transpose(1, 0, 2).reshape(128, 256) @ wo]


def embedding_layernorm(ids, wte, wpe, g, b):
    h = wte[ids] + wpe
    d = h - h.mean(axis=-1, keepdims=True)
    return [d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + f32(1e-5)) * g + b]


def logsumexp(x):
    m = x.max(axis=1)
    return [np.log(np.exp(x - m[:, None]).sum(axis=1)) + m]


def matmul_transpose_bias_relu(a, b, bias):
    return [np.maximum((a @ b).T + bias, f32(0))]


def qkv_split(x, w, bias):
    qkv = x @ w + bias
    return [qkv[:, 256 * i:256 * (i + 1)].reshape(128, 4, 64).transpose(1, 0, 2) for i in range(3)]


def residual_layernorm(x, r, g, b):
    h = x + r
    d = h - h.mean(axis=-1, keepdims=True)
    return [h, d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + f32(1e-5)) * g + b]


def rope(x, cos, sin):
    rotated = np.concatenate([-x[..., 32:], x[..., :32]], axis=-1)
    return [x * cos + rotated * sin]


def softmax_xent(logits, onehot):
    z = logits - logits.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=1, keepdims=True))
    return [-((z - lse) * onehot).sum(axis=1).mean(dtype=np.float32)]


def dynamic_rows(x, g, b, w):
    d = x - x.mean(axis=-1, keepdims=True)
    return [(d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + f32(1e-5)) * g + b) @ w]


REFERENCES = {
    "attention": attention,
    "attention_block": attention_block,
    "embedding_layernorm": embedding_layernorm,
    "logsumexp": logsumexp,
    "matmul_transpose_bias_relu": matmul_transpose_bias_relu,
    "qkv_split": qkv_split,
    "residual_layernorm": residual_layernorm,
    "rope": rope,
    "softmax_xent": softmax_xent,
    "bias_gelu": bias_gelu,
    "layernorm": layernorm,
    "layernorm_large": layernorm,
    "layernorm_lastaxis": layernorm_lastaxis,
    "mlp": mlp,
    "mlp_large": mlp,
    "rmsnorm": rmsnorm,
    "softmax": softmax,
    "causal_attention": causal_attention,
    "row_softmax": lambda x: [softmax_lastaxis(x)],
    "two_outputs": two_outputs,
    "rows": dynamic_rows,
}


def test_every_example_has_a_reference():
    names = {f.name for path in EXAMPLES for f in parse_file(path).funcs}
    assert names == set(REFERENCES)


# The big examples (up to 4096 x 4096) run once each, on one seed.
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_handwritten_numpy(path):
    program = parse_file(path)
    for func in program.funcs:
        graph = check_program(program)[func.name]
        inputs = random_inputs(graph, seed=7, sizes=example_sizes(graph))
        got = evaluate(graph, inputs)
        want = [np.asarray(w) for w in REFERENCES[func.name](*(inputs[n] for n in graph.param_names))]
        assert len(got) == len(want) == len(func.results)
        for g, w, t in zip(got, want, graph.output_types):
            assert g.dtype == np.float32 and w.dtype == np.float32
            assert g.shape == tuple(dims.evaluate(d, example_sizes(graph)) for d in t.shape)
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


# -- slice, concat, gather ------------------------------------------------------------------

MOVEMENT = """func moves(x: f32[4, 6], y: f32[4, 2], i: i64[2, 3], j: i32[]) -> (f32[2, 3], f32[4, 8], f32[4, 2, 3], f32[4], f32[3, 5]) {
  a = slice(x, axes=[-1, 0], starts=[-5, 1], ends=[100, -1], steps=[2, 1])
  c = concat(slice(x, axes=[1], starts=[0], ends=[3]), y, slice(x, axes=[1], starts=[3], ends=[6]), axis=-1)
  g = gather(x, i, axis=1)
  h = gather(x, j, axis=-1)
  r = reshape(transpose(slice(x, axes=[0, 1], starts=[1, -5], ends=[4, 6]), perm=[1, 0]), shape=[3, 5])
  return a, c, g, h, r
}
"""


def moves(x, y, i, j):
    return [x[1:-1, -5:100:2], np.concatenate([x[:, :3], y, x[:, 3:]], axis=-1), np.take(x, i, axis=1),
            np.take(x, j, axis=-1), x[1:4, -5:6].T.reshape(3, 5)]


def test_movement_ops_match_handwritten_numpy():
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (4, 6)).astype(f32)
    y = rng.uniform(-1, 1, (4, 2)).astype(f32)
    i = np.array([[0, -1, 5], [-6, 2, 3]], dtype=np.int64)
    j = np.asarray(-2, dtype=np.int32)
    got = run(MOVEMENT, x=x, y=y, i=i, j=j)
    for g, w in zip(got, moves(x, y, i, j), strict=True):
        assert g.dtype == f32 and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("bad", [6, -7, 2**31 - 1, -(2**31)])
def test_gather_index_out_of_range_is_a_clean_error(bad):
    text = "func f(x: f32[4, 6], i: i32[3]) -> f32[4, 3] {\n  return gather(x, i, axis=1)\n}\n"
    i = np.array([0, bad, 1], dtype=np.int32)
    with pytest.raises(StitchError) as err:
        run(text, x=np.zeros((4, 6), f32), i=i)
    assert err.value.message == f"gather: index {bad} is out of range for axis 1 of size 6"
    assert (err.value.pos.line, err.value.pos.col) == (2, 10)


def test_gather_out_of_range_through_the_cli(tmp_path, capsys):
    from stitch.engine.cli import main

    src = tmp_path / "g.ir"
    src.write_text("func f(x: f32[8], i: i64[2]) -> f32[2] {\n  return gather(x, i, axis=0)\n}\n")
    np.savez(tmp_path / "in.npz", x=np.zeros(8, f32), i=np.array([3, 9], dtype=np.int64))
    code = main(["eval", str(src), "--inputs", str(tmp_path / "in.npz")])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"{src}:2:10: error: gather: index 9 is out of range for axis 0 of size 8")
    assert "return gather(x, i, axis=0)" in err and "^" in err and "Traceback" not in err


def test_eval_runs_each_movement_op(tmp_path, capsys):
    from stitch.engine.cli import main

    src = tmp_path / "m.ir"
    src.write_text(MOVEMENT)
    assert main(["eval", str(src), "--seed", "3", "-o", str(tmp_path / "out.npz")]) == 0
    graph = check_func(parse_file(src).funcs[0])
    inputs = random_inputs(graph, seed=3)
    with np.load(tmp_path / "out.npz") as out:
        for k, want in enumerate(moves(*(inputs[n] for n in graph.param_names))):
            np.testing.assert_array_equal(out[f"out{k}"], want)


def test_random_inputs_index_in_range_through_movement_and_casts():
    text = """func f(x: f32[5, 7], i: i32[2, 3], k: i64[4], m: i64[2, 2]) -> (f32[6, 7], f32[5, 4], f32[2, 2, 7]) {
      a = gather(x, reshape(cast(i, dtype=i64), shape=[6]), axis=0)
      b = gather(x, k, axis=1)
      c = gather(x, gather(k, m, axis=0), axis=0)
      return a, b, c
    }"""
    graph = check_func(parse_program(text).funcs[0])
    assert index_bounds(graph) == {"i": 5, "k": 5, "m": 4}
    for seed in range(20):
        inputs = random_inputs(graph, seed)
        assert inputs["i"].min() >= -5 and inputs["i"].max() < 5
        assert inputs["k"].min() >= -5 and inputs["k"].max() < 5  # read by gathers over 7 and over 5
        assert inputs["m"].min() >= -4 and inputs["m"].max() < 4
        evaluate(graph, inputs)  # never out of range
    drawn = np.concatenate([random_inputs(graph, s)["k"] for s in range(20)])
    assert drawn.min() < 0 and drawn.max() > 0  # negative indices too


def test_every_elementwise_op_has_a_reference_and_the_executors_use_it():
    """The reference table covers the elementwise ops of the op table; the numpy executor, and the
    accelerator simulator that runs on it, compute elementwise ops with that same table."""
    from stitch.engine.ir import interp
    from stitch.engine.ir.ops import OPS
    from stitch.lowering import execute
    from stitch.targets import simulator

    assert set(interp.ELEMENTWISE) == {name for name, spec in OPS.items() if spec.elementwise}
    assert execute.elementwise is interp.elementwise
    assert simulator.execute is execute.execute


def test_a_table_missing_an_op_fails_naming_it():
    from stitch.engine.ir.interp import ELEMENTWISE
    from stitch.engine.ir.ops import check_elementwise_table

    check_elementwise_table(ELEMENTWISE, "the reference")
    without_erf = {op: f for op, f in ELEMENTWISE.items() if op != "erf"}
    with pytest.raises(NotImplementedError, match=r"^the reference has no entry for the elementwise op erf of "):
        check_elementwise_table(without_erf, "the reference")
    with pytest.raises(ValueError, match=r"an entry for hypothetical, not an elementwise op"):
        check_elementwise_table({**ELEMENTWISE, "hypothetical": None}, "the reference")


def test_an_op_added_without_a_reference_fails_at_import():
    """A new unary op in engine/ir/ops.py alone: importing the interpreter raises, naming it."""
    import subprocess
    import sys

    code = ("import stitch.engine.ir.ops as o\n"
            "o.OPS['hypothetical'] = o.OpSpec('hypothetical', o.OpGroup.UNARY, 1, o.FLOAT)\n"
            "import importlib, stitch.engine.ir.interp as i\nimportlib.reload(i)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "NotImplementedError: engine/ir/interp.py's ELEMENTWISE has no entry for the elementwise op hypothetical" \
        in proc.stderr
