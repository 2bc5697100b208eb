"""Every op of the IR on the special values, on both targets: where NaN, the infinities and each zero's
sign land is the reference's (issue 52.4; docs/explanation/floating-point.md).

The values (`special`): the fuzzers' edge values (NaN, +-inf, +-0.0, the dtype's largest and half of
it, values whose square or exp overflows, the smallest normal and subnormal: floats.edge_values)
and a few ordinary ones. One program per target holds the whole table, so it compiles once: each
unary op and cast on every value, each binary op, compare and where on every pair, the built-in
algebra rules' left sides (compiled with the rules, so the right sides run), literal NaN, inf and
-0.0 operands, and reductions, softmax, log-sum-exp and layer norm over rows of them.

Exact ops must give the reference's bits. Ops from libm (exp log tanh sigmoid erf pow) must put
NaN, the infinities and zero signs where it does and agree within the tolerance elsewhere. A sum
whose finite terms could overflow a partial sum, in some order, is left out (its order, so its
answer, is unspecified), and so is a matmul element one of whose products overflows or underflows
(fused or not, as BLAS's, its infinities and zero signs are unspecified: the floating-point page).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import stitch
from stitch.engine.ir import floats
from stitch.engine.ir.interp import evaluate, np_dtype
from stitch.engine.ir.ops import OPS, OpGroup
from stitch.engine.ir.tolerance import RTOL, magnitudes
from stitch.engine.programs import check_entry, read_program
from stitch_testing import HAVE_CC

FLOATS = ("f16", "f32", "f64")
DTYPES = FLOATS + ("i8", "u8", "i32", "i64", "bool")
UNARY = tuple(name for name, spec in OPS.items() if spec.group == OpGroup.UNARY)
BINARY_FLOAT = tuple(name for name, spec in OPS.items() if spec.group == OpGroup.BINARY and spec.dtypes != "integer")
COMPARE = tuple(name for name, spec in OPS.items() if spec.group == OpGroup.COMPARE)
FROM_LIBM = ("exp", "log", "tanh", "sigmoid", "erf", "pow")
# forms a built-in rule rewrites to one that rounds otherwise (within the tolerance: `stitch rules check`)
REROUNDED = ("div(1.0, rsqrt(", "div({a}, sqrt(", "mul(sqrt({x}), rsqrt(")

# the left sides of rules/algebra.rules' rules that compile uses (and forms near them), on x
RULE_FORMS = (
    "pow({x}, 2.0)", "pow({x}, 3.0)", "pow({x}, 1.0)", "maximum({x}, {x})", "minimum({x}, {x})", "mul({x}, 1.0)",
    "mul(1.0, {x})", "sub({x}, 0.0)", "div({x}, 1.0)", "neg(neg({x}))", "abs(neg({x}))", "abs(abs({x}))",
    "relu(relu({x}))", "mul({x}, -1.0)", "div({x}, -1.0)", "div(1.0, sqrt({x}))", "div(1.0, rsqrt({x}))",
    "mul(sqrt({x}), rsqrt({x}))", "sub({x}, {x})", "mul({x}, 0.0)", "div({x}, {x})", "mul(mul({x}, 2.0), 0.5)",
    "cast(cast({x}, dtype=f64), dtype={d})",
    "mul(mul({x}, 0.5), add(tanh(mul(add({x}, mul(mul(mul({x}, {x}), {x}), 0.044715)), 0.7978845608)), 1.0))",
    # literal operands at the edges
    "maximum({x}, nan)", "minimum(nan, {x})", "add({x}, inf)", "sub({x}, -inf)", "mul({x}, -0.0)", "div({x}, 0.0)",
    "div({x}, -0.0)", "pow({x}, inf)", "pow({x}, -inf)", "pow(inf, {x})", "pow({x}, 0.0)", "pow({x}, -0.5)",
    "pow({x}, 0.5)", "where({c}, {x}, nan)", "where({c}, -0.0, {x})", "maximum({x}, -0.0)", "minimum({x}, 0.0)",
    "sub(-0.0, {x})", "add({x}, -0.0)", "div({x}, inf)", "mul({x}, 65504.0)", "mul({x}, 1e-30)",
)
PAIR_FORMS = ("sub({a}, neg({b}))", "div({a}, sqrt({b}))", "mul({a}, rsqrt({b}))",
              "sub(maximum({a}, {b}), minimum({a}, {b}))")
ROWS = 37  # a row longer than two 16-lane vectors: the vector reductions combine lanes
# softmax, log-sum-exp and layer norm over the rows of {r} ({n} of them), named with the suffix {s}
ROW_PRELUDE = ("  m{s} = max({r}, axes=[1], keepdims=true)\n  e{s} = exp(sub({r}, m{s}))\n"
               "  sm{s} = div(e{s}, sum(e{s}, axes=[1], keepdims=true))\n"
               "  lse{s} = add(log(sum(e{s}, axes=[1])), reshape(m{s}, shape=[{n}]))\n"
               "  dv{s} = sub({r}, mean({r}, axes=[1], keepdims=true))\n"
               "  ln{s} = mul(dv{s}, rsqrt(add(mean(mul(dv{s}, dv{s}), axes=[1], keepdims=true), 1e-5)))\n")
# over the rows of {r}, or the columns of {t}: the same values transposed
ROW_FORMS = ("sum({r}, axes=[1])", "mean({r}, axes=[1])", "max({r}, axes=[1])", "min({r}, axes=[1])",
             "max(neg({r}), axes=[1])", "sum(exp({r}), axes=[1])", "sm{s}", "lse{s}", "ln{s}", "sum({t}, axes=[0])",
             "mean({t}, axes=[0])", "max({t}, axes=[0])", "min({t}, axes=[0])")


def special(dtype: str) -> np.ndarray:
    """The edge values of `dtype` and a few ordinary ones, each once."""
    extra = [0.5, -0.5, 3.0, -3.0, 2.0, 88.72, -88.72, 3e9, -3e9] if dtype in FLOATS else []
    with np.errstate(all="ignore"):
        values = np.array(floats.edge_values(dtype) + extra, np.float64).astype(np_dtype(dtype))
    keys = {(float(v), bool(np.signbit(v))) if not np.isnan(v) else "nan": v for v in values}
    return np.array(list(keys.values()), np_dtype(dtype))


def overflowable(rows: np.ndarray, dtype: str) -> np.ndarray:
    """Which rows' finite terms could carry a partial sum past the accumulator's largest (f16 sums in f32)."""
    finite = np.where(np.isfinite(rows), np.abs(rows.astype(np.float64)), 0.0)
    return finite.sum(axis=1) >= float(np.finfo(np.float32 if dtype == "f16" else np_dtype(dtype)).max) / 4


class Table:
    """The program's outputs: each its text, its type, how it is compared, and which elements count."""

    def __init__(self):
        self.params: list[str] = []
        self.inputs: dict[str, np.ndarray] = {}
        self.lines: list[str] = []
        # (text, type, how it is compared: COMPARED's keys, which elements count or None)
        self.outputs: list[tuple[str, str, str, np.ndarray | None]] = []

    def param(self, name: str, value: np.ndarray, dtype: str) -> None:
        self.params.append(f"{name}: {dtype}[{', '.join(map(str, value.shape))}]")
        self.inputs[name] = value

    def out(self, text: str, typ: str, kind: str, mask=None) -> None:
        self.outputs.append((text, typ, kind, mask))

    def text(self) -> str:
        return (f"func f({', '.join(self.params)}) -> ({', '.join(t for _, t, _, _ in self.outputs)}) {{\n"
                + "".join(self.lines) + f"  return {', '.join(e for e, _, _, _ in self.outputs)}\n}}\n")


def kind(form: str) -> str:
    """"exact" where the form computes one correctly rounded op at a time, whatever rules rewrite it
    to, else "rounded"."""
    exact = not any(f"{name}(" in form for name in FROM_LIBM) and not form.startswith(REROUNDED)
    return "exact" if exact else "rounded"


def build() -> Table:
    t = Table()
    rng = np.random.default_rng(52)
    for d in FLOATS:
        v = special(d)
        n = v.size
        a, b = (np.array(x, v.dtype) for x in zip(*itertools.product(v, v)))
        t.param(f"x_{d}", v, d)
        t.param(f"c_{d}", np.arange(n) % 2 == 0, "bool")
        t.param(f"a_{d}", a, d)
        t.param(f"b_{d}", b, d)
        for op in UNARY:
            t.out(f"{op}(x_{d})", f"{d}[{n}]", kind(f"{op}("))
        for to in DTYPES:
            t.out(f"cast(x_{d}, dtype={to})", f"{to}[{n}]", "exact")
        for op in BINARY_FLOAT:
            t.out(f"{op}(a_{d}, b_{d})", f"{d}[{a.size}]", kind(f"{op}("))
        for op in COMPARE:
            t.out(f"{op}(a_{d}, b_{d})", f"bool[{a.size}]", "exact")
        t.out(f"where(less(a_{d}, b_{d}), a_{d}, b_{d})", f"{d}[{a.size}]", "exact")
        for form in RULE_FORMS:
            t.out(form.format(x=f"x_{d}", c=f"c_{d}", d=d), f"{d}[{n}]", kind(form))
        for form in PAIR_FORMS:
            t.out(form.format(a=f"a_{d}", b=f"b_{d}"), f"{d}[{a.size}]", kind(form))
        # rows: every pair, then rows of ordinary values with a few special ones
        mixed = rng.uniform(-3, 3, (60, ROWS)).astype(v.dtype)
        for row in mixed:
            hit = rng.choice(ROWS, rng.integers(1, 4), replace=False)
            row[hit] = rng.choice(v, hit.size)
        for name, r in (("pairs", np.stack([a, b], axis=1)), ("rows", mixed)):
            rows, k = r.shape
            names = {"r": f"{name}_{d}", "t": f"{name}_t_{d}", "s": f"_{name}_{d}", "n": rows}
            t.param(names["r"], r, d)
            t.param(names["t"], np.ascontiguousarray(r.T), d)
            t.lines.append(ROW_PRELUDE.format(**names))
            ok = ~overflowable(r, d)
            for form in ROW_FORMS:
                whole = form.startswith(("sm", "ln"))
                t.out(form.format(**names), f"{d}[{rows}, {k}]" if whole else f"{d}[{rows}]", "summed",
                      ok[:, None] if whole else ok)
        # products: rows of pairs and mixed rows against columns of special values
        w = rng.choice(v, (2, 5)).astype(v.dtype)
        t.param(f"w_{d}", w, d)
        pairs = np.stack([a, b], axis=1)
        t.out(f"matmul(pairs_{d}, w_{d})", f"{d}[{a.size}, 5]", "summed", plain_products(pairs, w, d))
        w = rng.uniform(-3, 3, (ROWS, 5)).astype(v.dtype)
        w[rng.integers(0, ROWS, 4), rng.integers(0, 5, 4)] = rng.choice(v, 4)
        t.param(f"wr_{d}", w, d)
        t.out(f"matmul(rows_{d}, wr_{d})", f"{d}[{mixed.shape[0]}, 5]", "summed", plain_products(mixed, w, d))
    return t


def plain_products(x: np.ndarray, w: np.ndarray, dtype: str) -> np.ndarray:
    """The elements of x @ w whose products neither overflow nor underflow, nor sum past the largest
    finite value in any order: elsewhere a fused multiply-add (BLAS's, the C's) and an unfused one
    differ in infinities and zero signs, which the floating-point page leaves unspecified."""
    acc = np.finfo(np.float32 if dtype == "f16" else np_dtype(dtype))
    p = x.astype(np.longdouble)[:, :, None] * w.astype(np.longdouble)[None, :, :]
    finite = np.isfinite(p)
    magnitude = np.where(finite, np.abs(p), 0)
    under = finite & (p != 0) & (magnitude < float(acc.tiny))
    return (magnitude.sum(axis=1) < float(acc.max) / 4) & ~under.any(axis=1)


with np.errstate(all="ignore"):
    TABLE = build()


def same_class(got: np.ndarray, want: np.ndarray, kind: str, terms: int = 1, scale=None) -> np.ndarray:
    """Elementwise: equal bits ("exact"); else NaN where NaN and `compare`'s rule elsewhere (an
    infinity where the reference has one of its sign or a value rounding could carry past the largest
    finite one; finite values within the tolerance for `terms` terms of magnitude `scale`), and zeros
    of one sign ("rounded": not "summed", where a sum in another order may round a term across zero)."""
    got, want = np.atleast_1d(got), np.atleast_1d(want)
    if want.dtype.kind != "f":
        return got == want
    nan = np.isnan(want)
    if kind == "exact":
        return (np.isnan(got) == nan) & (nan | ((got == want) & (np.signbit(got) == np.signbit(want))))
    g, w = got.astype(np.float64), want.astype(np.float64)
    size = np.abs(w) if scale is None else np.maximum(np.abs(w), np.broadcast_to(scale, w.shape))
    rtol = RTOL[want.dtype.name]
    edge = float(np.finfo(want.dtype).max) * (1 - rtol)
    beyond_g, beyond_w = (np.where(np.abs(v) >= edge, np.sign(v), 0.0) for v in (g, w))
    with np.errstate(all="ignore"):
        close = np.abs(g - w) / (1 + size) <= rtol * np.sqrt(terms)
    finite = np.isfinite(g) & np.isfinite(w)
    signed = (kind == "summed") | (g != 0) | (w != 0) | (np.signbit(g) == np.signbit(w))
    return (np.isnan(got) == nan) & (nan | (finite & close & signed) | ((beyond_g == beyond_w) & (beyond_w != 0)))


@pytest.fixture(scope="module")
def reference():
    """The reference's outputs, and the magnitude of what was summed into each element (tolerance.py)."""
    graph = check_entry(read_program(TABLE.text()))
    with np.errstate(all="ignore"):
        return evaluate(graph, TABLE.inputs), magnitudes(graph, TABLE.inputs)


@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_every_op_on_special_values_lands_where_the_reference_does(target, reference, tmp_path):
    if target == "cpu" and not HAVE_CC:
        pytest.skip("no C compiler on this machine")
    program = stitch.compile(TABLE.text(), target=target, cache_dir=tmp_path)
    got = program(**TABLE.inputs)
    wrong = []
    for (text, _, how, mask), g, w, scale in zip(TABLE.outputs, got, *reference):
        ok = same_class(g, w, how, terms=ROWS, scale=scale)
        if mask is not None:
            ok = ok | ~np.broadcast_to(mask, ok.shape)
        if not ok.all():
            i = tuple(np.argwhere(~ok)[0])
            wrong.append(f"{text}: {int((~ok).sum())} elements, e.g. [{i}] got {g[i]!r} want {w[i]!r}")
    assert not wrong, "\n".join(wrong)


def test_the_table_covers_every_op():
    text = TABLE.text()
    elementwise = {name for name, spec in OPS.items() if spec.elementwise and spec.dtypes != "integer"}
    assert all(f"{name}(" in text for name in elementwise | {"sum", "mean", "max", "min", "matmul"})
    assert all(f"dtype={d})" in text for d in DTYPES)


F16_MEANS = """func f(r: f16[4, 64]) -> (f16[64], f16[4], f16[4]) {
  return mean(r, axes=[0]), mean(r, axes=[1]), sum(r, axes=[1])
}
"""


@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_f16_sums_split_across_tiles_keep_f32_partials(target, tmp_path):
    """The row means are tiled along the columns with the column means (global stitching): each tile's
    partial sum was rounded to f16 and the partials added and divided in f16, so 64 values of 40000,
    whose mean is 40000, gave inf on both targets (and each tile's partial was rounded once more)."""
    if target == "cpu" and not HAVE_CC:
        pytest.skip("no C compiler on this machine")
    program = stitch.compile(F16_MEANS, target=target, cache_dir=tmp_path)
    r = np.full((4, 64), 40000, np.float16)
    r[1] = -3.0
    r[2, ::2] = -40000
    r[3, :3] = [60000, 60000, -65504]
    want = evaluate(program.graph, {"r": r})
    assert np.isfinite(want[1]).all() and want[1][0] == 40000
    for g, w in zip(program(r=r), want):
        assert same_class(g, w, "summed", terms=64).all(), (g, w)
    # (still split across tiles, so this tests the partials)
    assert [b.dtype for b in program.loops.intermediates if "_part" in b.name] == ["f32", "f32"]


def test_an_f16_product_walked_in_chunks_sums_in_f32(tmp_path):
    """A long f16 reduction is walked in chunks (KernelPlan.chunked); the accumulator was f16 between
    chunks, so partial sums past 65504 gave inf (32768 x 100 then 32768 x -99: the product is 32768)
    and every chunk rounded once more. It is f32 now (lowering/widen.py), on every target."""
    if not HAVE_CC:
        pytest.skip("no C compiler on this machine")
    k = 65536
    text = f"func f(a: f16[16, {k}], b: f16[{k}, 16]) -> f16[16, 16] {{\n  return matmul(a, b)\n}}\n"
    program = stitch.compile(text, cache_dir=tmp_path)
    assert "r0o" in str(program.loops.kernels[0].body)  # (still chunked, so this tests the chunks)
    a = np.ones((16, k), np.float16)
    b = np.full((k, 16), 100.0, np.float16)
    b[k // 2:] = -99.0
    (got,) = program(a=a, b=b)
    assert np.all(got == k // 2)
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-2, 2, (16, k)).astype(np.float16), rng.uniform(-2, 2, (k, 16)).astype(np.float16)
    np.testing.assert_array_equal(program(a=a, b=b)[0], np.matmul(a, b))
