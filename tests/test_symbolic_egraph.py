"""Symbolic dimensions in the e-graph (issue 44, item 3; engine/rewrite/symbols.py): a program with a
symbol saturates with the built-in rules, every e-class's shape reads back as the polynomial it is,
the saturated e-graph is the one a static program of a generic size gives, and what the encoding
cannot carry is refused with the reason."""

from __future__ import annotations

import pytest
from stitch.engine.cli import main
from stitch.engine.ir import dims
from stitch.engine.ir.check import check_program
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.extent import dim_of
from stitch.engine.ir.parse import parse_program
from stitch.engine.pipeline import load_rule_files, saturate_program
from hypothesis import given
from hypothesis import strategies as st
from stitch.engine.rewrite.symbols import HINT, MAX_TERMS, STATIC_LIMIT, VALUE_LIMIT, Encoding, coefficient_limit

ATTENTION = """
func attn[n: 1..1024](x: f32[n, 64], w: f32[64, 64], g: f32[64]) -> f32[n, 64] {
  q = matmul(x, w)
  s = matmul(q, transpose(x, perm=[1, 0]))
  m = max(s, axes=[1], keepdims=true)
  e = exp(sub(s, m))
  p = div(e, sum(e, axes=[1], keepdims=true))
  h = reshape(matmul(p, x), shape=[n, 4, 16])
  return mul(reshape(h, shape=[n, 64]), g)
}
"""
STEP = """
func step[p: 1..2047](past: f32[12, p, 64], new: f32[12, 1, 64], q: f32[12, 1, 64]) -> f32[12, 1, 64] {
  k = concat(past, new, axis=1)
  s = matmul(q, transpose(k, perm=[0, 2, 1]))
  e = exp(sub(s, max(s, axes=[2], keepdims=true)))
  return matmul(div(e, sum(e, axes=[2], keepdims=true)), k)
}
"""
NORM = """
func norm[n: 1..4096](x: f32[1, n, 768], g: f32[768]) -> f32[n, 768] {
  y = reshape(x, shape=[n, 768])
  m = mean(y, axes=[1], keepdims=true)
  d = sub(y, m)
  v = mean(mul(d, d), axes=[1], keepdims=true)
  return mul(mul(d, rsqrt(add(v, 1e-5))), g)
}
"""


def graph_of(text: str):
    return next(iter(check_program(parse_program(text, "t.ir")).values()))


def saturated(graph):
    run, report = saturate_program(graph, load_rule_files([]))
    assert report.stop_reason == "saturated"
    return run.data()


def at(shape, values):
    return tuple(dims.evaluate(d, values) for d in shape)


N = Encoding(((dims.Sym("n"),),))


@pytest.mark.parametrize("d", [0, 1, 768, STATIC_LIMIT - 1, -5, dims.symbol("n"), dims.symbol("n") + 1,
                               dims.mul(dims.symbol("n"), 12), dims.mul(dims.symbol("n"), 768) - 64])
def test_a_dimension_reads_back_as_it_went_in(d):
    assert N.decode(N.encode(d)) == d
    assert N.encode(dims.symbol("n")) == HINT  # (one term: the prime the encoding always gave)


def test_a_value_no_dimension_of_the_terms_gives_is_an_error():
    with pytest.raises(StitchError, match="not a sum of the program's symbolic terms \\(n\\)"):
        N.decode(HINT * HINT)


SYMS = [dims.symbol(name) for name in "bnps"]
MONOMIALS = [SYMS[0], SYMS[1], SYMS[2], dims.mul(SYMS[0], SYMS[1]), dims.floordiv(SYMS[1] + 63, 64),
             dims.mul(SYMS[3], SYMS[3]), SYMS[3]]


@st.composite
def encodings_and_dimensions(draw):
    """An encoding of a few of MONOMIALS, and dimensions over them within its bounds."""
    chosen = draw(st.lists(st.sampled_from(MONOMIALS), min_size=1, max_size=len(MONOMIALS), unique_by=str))
    terms = tuple(sorted({mono for m in chosen for mono, _ in m.terms}, key=lambda m: str(dims.polynomial({m: 1}))))
    limit = coefficient_limit(len(terms))
    coefficient = st.integers(-limit + 1, limit - 1)
    constant = st.integers(-STATIC_LIMIT + 1, STATIC_LIMIT - 1)
    dimension = st.builds(lambda cs, b: dims.polynomial({**dict(zip(terms, cs)), (): b}),
                          st.lists(coefficient, min_size=len(terms), max_size=len(terms)), constant)
    return Encoding(terms), draw(st.lists(dimension, min_size=1, max_size=4))


@given(encodings_and_dimensions())
def test_every_dimension_within_the_bounds_reads_back_and_sums_read_back_as_sums(case):
    """Issue 44: several symbols (and products, quotients) each a term of their own; what the e-graph
    computes from dimensions (a concat's sum, a slice's difference) reads back as the same sum."""
    encoding, ds = case
    for d in ds:
        assert abs(encoding.encode(d)) < VALUE_LIMIT
        assert encoding.decode(encoding.encode(d)) == d
    a, b = ds[0], ds[-1]
    total = dims.add(a, b)
    if isinstance(total, int) or all(abs(c) < (STATIC_LIMIT if not m else encoding.limit) for m, c in total.terms):
        assert encoding.decode(encoding.encode(a) + encoding.encode(b)) == total


def test_the_terms_share_the_i64_and_too_many_are_refused():
    assert coefficient_limit(1) == STATIC_LIMIT and coefficient_limit(2) >= 2**16 and coefficient_limit(3) >= 2**10
    names = ", ".join(f"s{i}: 1..9" for i in range(MAX_TERMS + 1))
    shape = ", ".join(f"s{i}" for i in range(MAX_TERMS + 1))
    text = f"func f[{names}](x: f32[{shape}]) -> f32[{shape}] {{ return exp(x) }}"
    with pytest.raises(StitchError, match=f"13 symbolic terms .* at most {MAX_TERMS}"):
        saturate_program(graph_of(text), load_rule_files([]))


@pytest.mark.parametrize("text, symbol", [(ATTENTION, "n"), (STEP, "p"), (NORM, "n")])
def test_every_class_reads_back_symbolic_and_matches_a_static_program_of_a_generic_size(text, symbol):
    """The symbolic e-graph and the static one at size 37 (which no rule condition singles out):
    the same classes, shapes equal once the symbol is 37, the roots' and parameters' types the program's."""
    graph = graph_of(text)
    data = saturated(graph)  # (its dimensions are Extents at the planning value: dim_of reads the dimension)
    shapes = [plain(t.shape) for t in data.types.values()]
    assert any(dims.symbols_of(s) == {symbol} for s in shapes)
    static = saturated(graph_of(_static(text, symbol, 37)))
    assert sorted(at(s, {symbol: 37}) for s in shapes) == sorted(t.shape for t in static.types.values())
    assert len(data.classes) == len(static.classes)
    roots = [plain(data.types[r].shape) for r in data.roots]
    assert roots == [t.shape for t in graph.output_types]
    params = {n.attr("name"): plain(data.types[cid].shape) for cid, ns in data.classes.items() for n in ns
              if n.op == "param"}
    assert params == {n.attr("name"): n.type.shape for n in graph.nodes if n.op == "param"}


def plain(shape):
    return tuple(dim_of(d) for d in shape)


def _static(text: str, symbol: str, size: int) -> str:
    """The program at one size: its symbol's declaration dropped, the symbol written as the number."""
    import re

    head, rest = text.split("(", 1)
    head = re.sub(r"\[[^]]*\]", "", head)
    return head + "(" + re.sub(rf"\b{symbol}\b", str(size), rest)


@pytest.mark.parametrize("text, why", [
    (f"func f[n: 1..9](x: f32[n, {STATIC_LIMIT}]) -> f32[n, {STATIC_LIMIT}] {{ return exp(x) }}",
     "a static dimension of"),
    ("func f[n: 1..9, m: 1..9](x: f32[n, m]) -> f32[n * 131072, m] { return reshape(broadcast_to(reshape(x, "
     "shape=[n, 1, m]), shape=[n, 131072, m]), shape=[n * 131072, m]) }",
     "coefficient of 131072 or more beside 1 other symbolic term"),
])
def test_what_the_encoding_cannot_carry_is_refused_with_the_reason(text, why):
    with pytest.raises(StitchError, match=why):
        saturate_program(graph_of(text), load_rule_files([]))


def test_the_cli_saturates_a_symbolic_program_and_schedules_it(tmp_path, capsys):
    path = tmp_path / "attn.ir"
    path.write_text(ATTENTION)
    assert main(["compile", str(path), "--emit", "egraph"]) == 0
    assert "stopped: saturated" in capsys.readouterr().out
    assert main(["compile", str(path)]) == 0
    assert "-> out0: f32[n, 64]" in capsys.readouterr().out


def test_the_dynamic_gpt2_export_saturates_once_and_its_weights_fold_where_static(tmp_path, capsys):
    """The dynamic-sequence GPT-2 fixture, imported with its weights: the e-graph takes it as it is,
    and binding the weights (fold_bound) folds only values of static size (a slice of the positions
    by `seq` is made per call); it compiles once and runs at two lengths from the CLI."""
    pytest.importorskip("onnx")
    from pathlib import Path

    model = Path(__file__).resolve().parent / "fixtures" / "models" / "dynamic" / "gpt2_model_dynamic_seq-dynamo.onnx"
    ir, npz = tmp_path / "g.ir", tmp_path / "g.npz"
    assert main(["import", str(model), "-o", str(ir), "--weights", str(npz)]) == 0
    assert main(["compile", str(ir), "--emit", "egraph", "--weights", str(npz)]) == 0
    assert "stopped: saturated" in capsys.readouterr().out
    for seq in (5, 64):
        assert main(["run", str(ir), "--weights", str(npz), "--dim", f"seq={seq}", "--check"]) == 0
        assert "check: outputs equal the reference" in capsys.readouterr().out
