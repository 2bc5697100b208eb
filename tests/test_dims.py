"""Symbolic dimensions (engine/ir/dims.py): the canonical form is integer arithmetic, prints as
text the parser reads back to the same form, and bounds every value the symbols' ranges allow."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from stitch.engine.ir import dims
from stitch.engine.ir.parse import parse_program

SYMBOLS = ("a", "b", "n")


@st.composite
def trees(draw, depth: int = 3):
    """(a Python function of the symbols' values, the canonical expression built alike)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()):
            c = draw(st.integers(-20, 20))
            return (lambda v, c=c: c), c
        s = draw(st.sampled_from(SYMBOLS))
        return (lambda v, s=s: v[s]), dims.symbol(s)
    op = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
    f, x = draw(trees(depth - 1))
    if op in ("//", "%"):
        c = draw(st.integers(1, 9))
        if op == "//":
            return (lambda v: f(v) // c), dims.floordiv(x, c)
        return (lambda v: f(v) % c), dims.mod(x, c)
    g, y = draw(trees(depth - 1))
    if op == "+":
        return (lambda v: f(v) + g(v)), dims.add(x, y)
    if op == "-":
        return (lambda v: f(v) - g(v)), dims.add(x, dims.mul(y, -1))
    return (lambda v: f(v) * g(v)), dims.mul(x, y)


VALUES = st.fixed_dictionaries({s: st.integers(1, 50) for s in SYMBOLS})


@given(tree=trees(), values=VALUES)
def test_the_canonical_form_computes_what_the_expression_does(tree, values):
    f, d = tree
    assert dims.evaluate(d, values) == f(values)


@given(tree=trees(), values=VALUES)
def test_the_bounds_hold_every_value_in_the_ranges(tree, values):
    f, d = tree
    low, high = dims.bounds(d, {s: (1, 50) for s in SYMBOLS})
    assert low <= f(values) <= high


@given(tree=trees())
def test_printed_dimensions_parse_back_to_the_same_form(tree):
    _, d = tree
    text = f"func f(x: f32[1]) -> f32[1] {{\n  return reshape(x, shape=[{d}])\n}}\n"
    (got,) = parse_program(text).funcs[0].returns[0].attr("shape").value
    assert got == d


@given(x=trees(), y=trees(), values=VALUES)
def test_equal_expressions_are_equal_objects(x, y, values):
    """Expressions built two ways that agree as polynomials are one object (sum in either order)."""
    (_, a), (_, b) = x, y
    assert dims.add(a, b) == dims.add(b, a) and dims.mul(a, b) == dims.mul(b, a)
    assert dims.add(dims.add(a, b), dims.mul(b, -1)) == a


@pytest.mark.parametrize("text, want", [
    ("(12 * n) // 4", "n * 3"), ("(4 * n + 3) // 4", "n"), ("n * 768 // 768", "n"), ("p + 1 - 1", "p"),
    ("(n + 63) // 64", "(n + 63) // 64"), ("n % 4", "n - (n // 4) * 4"), ("-n + 2 * n", "n"), ("2 * (n + 1)", "n * 2 + 2"),
])
def test_simplified_forms(text, want):
    (got,) = parse_program(f"func f(x: f32[{text}]) -> f32[1] {{\n  return x\n}}\n").funcs[0].params[0].type.shape
    assert str(got) == want


def test_exact_division_solves_what_a_reshape_needs():
    n, m = dims.symbol("n"), dims.symbol("m")
    assert dims.exact_div(dims.mul(n, 768), 64) == dims.mul(n, 12)
    assert dims.exact_div(dims.mul(dims.mul(n, m), 12), dims.mul(n, 4)) == dims.mul(m, 3)
    assert dims.exact_div(dims.add(n, 1), 2) is None and dims.exact_div(dims.mul(n, 6), dims.mul(m, 2)) is None


def test_exact_division_by_a_dimension_of_several_terms():
    n = dims.symbol("n")
    assert dims.exact_div(64 * n + 64, n + 1) == 64
    assert dims.exact_div(n + 1, n + 1) == 1  # (it once gave n + 1 back)
    assert dims.exact_div(n * n + n, n + 1) == n
    assert dims.exact_div(3 * n + 3, -n - 1) == -3
    assert dims.exact_div(n + 2, n + 1) is None
