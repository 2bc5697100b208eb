"""Programs with symbolic dimensions (issue 44, items 1 and 2): parsed, printed, checked with shape
rules that hold for every value of the symbols, and evaluated by the reference interpreter at the
sizes the inputs give; the CLI compiles and runs them (the later stages: tests/test_symbolic_compile.py)."""

from __future__ import annotations

import numpy as np
import pytest
from stitch.engine.cli import main
from stitch.engine.ir import dims
from stitch.engine.ir.check import check_program
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.parse import parse_program
from stitch.engine.ir.printer import print_program

EXAMPLES = """# n rows of any count from 1 to 4096; the result has the same n
func rows[n: 1..4096](x: f32[n, 768], w: f32[768, 768]) -> f32[n, 768] {
  return matmul(x, w)
}

# a cache of p positions grows by one
func step[p: 1..2047](past: f32[12, p, 64], new: f32[12, 1, 64]) -> f32[12, p + 1, 64] {
  return concat(past, new, axis=1)
}

func heads[n: 1..1024](x: f32[1, n, 768]) -> f32[1, 12, n, 64] {
  return transpose(reshape(x, shape=[1, n, 12, 64]), perm=[0, 2, 1, 3])
}
"""


def graph_of(text: str):
    return next(iter(check_program(parse_program(text, "t.ir")).values()))


def test_the_ir_examples_round_trip_and_check():
    program = parse_program(EXAMPLES)
    assert parse_program(print_program(program)) == program
    assert print_program(parse_program(print_program(program))) == print_program(program)
    graphs = check_program(program)
    assert [str(t) for t in graphs["step"].output_types] == ["f32[12, p + 1, 64]"]
    assert graphs["heads"].symbols == {"n": (1, 1024)}
    assert graphs["step"].signature() == \
        "func step[p: 1..2047](past: f32[12, p, 64], new: f32[12, 1, 64]) -> f32[12, p + 1, 64]"


@pytest.mark.parametrize("body, want", [
    ("add(x, b)", "f32[n, 64]"),                                   # broadcasting a symbol with a number
    ("reshape(x, shape=[-1, 8, 8])", "f32[n, 8, 8]"),             # -1 solved symbolically
    ("reshape(x, shape=[n * 2, 32])", "f32[n * 2, 32]"),
    ("slice(x, axes=[0], starts=[0], ends=[n])", "f32[n, 64]"),   # an end at the axis's end
    ("slice(x, axes=[0], starts=[-1], ends=[n])", "f32[1, 64]"),  # counted from the end
    ("slice(x, axes=[0], starts=[1], ends=[n + 5])", "f32[n - 1, 64]"),  # clamped to n
    ("concat(x, x, axis=0)", "f32[n * 2, 64]"),
    ("sum(x, axes=[0], keepdims=true)", "f32[1, 64]"),
    ("broadcast_to(b, shape=[n, 64])", "f32[n, 64]"),
    ("matmul(transpose(x), x)", "f32[64, 64]"),
])
def test_shape_rules_with_symbols(body, want):
    graph = graph_of(f"func f[n: 2..512](x: f32[n, 64], b: f32[64]) -> f32[1] {{\n  y = {body}\n"
                     "  return reshape(sum(y), shape=[1])\n}\n")
    assert str(next(n.type for n in graph.nodes if n.name == "y")) == want


@pytest.mark.parametrize("text, where, message", [
    ("func f[n: 1..8, p: 1..8](x: f32[n], y: f32[p]) -> f32[n] {\n  return add(x, y)\n}\n", "2:10",
     "shapes do not broadcast: f32[n], f32[p]"),
    ("func f[p: 1..8](x: f32[p]) -> f32[p] {\n  return concat(x, x, axis=0)\n}\n", "2:10",
     "return value 0 has type f32[p * 2] but the signature of 'f' declares f32[p]"),
    ("func f[n: 1..8](x: f32[n, 3]) -> f32[1] {\n  return reshape(x, shape=[-1, 2])\n}\n", "2:21",
     "reshape: cannot reshape f32[n, 3] (n * 3 elements) to [-1, 2]"),
    ("func f[n: 1..8](x: f32[n + 1]) -> f32[1] {\n  return x\n}\n", "1:8",
     "symbol 'n' is no whole dimension of any parameter"),
    ("func f[n: 1..8](x: f32[n], y: f32[n - 1]) -> f32[n] {\n  return x\n}\n", "1:28",
     "dimension n - 1 of f32[n - 1] can be 0, less than 1"),
    ("func f[n: 1..8, m: 1..4](x: f32[n]) -> f32[n] {\n  return x\n}\n", "1:17",
     "symbol 'm' is declared but is no dimension of any parameter"),
    ("func f[n: 1..8, n: 1..4](x: f32[n]) -> f32[n] {\n  return x\n}\n", "1:17", "symbol 'n' is declared twice"),
    ("func f[n: 5..2](x: f32[n]) -> f32[n] {\n  return x\n}\n", "1:11", "the range of symbol 'n' must be"),
    ("func f[n: 1..8](x: f32[n]) -> f32[1] {\n  return reshape(x, shape=[q])\n}\n", "2:21",
     "symbol 'q' is no whole dimension of any parameter of 'f'"),
    ("func f[n: 1..8](x: f32[n]) -> f32[n] {\n  return sum(x, axes=[n])\n}\n", "2:17",
     "attribute 'axes' must be a list of integers, not of dimensions (n)"),
    ("func f[n: 1..8](x: f32[n // n]) -> f32[1] {\n  return x\n}\n", "1:24",
     "a dimension is divided (//) only by a positive integer, not n"),
    ("func f[n: 1..8](x: f32[n, 8]) -> f32[1] {\n  return slice(x, axes=[0], starts=[-4], ends=[n])\n}\n",
     "2:10", "start -4 (at n - 4 from the axis's end n) lies before the axis's start for some values of the symbols"),
])
def test_symbolic_errors_name_the_place_and_both_expressions(text, where, message):
    with pytest.raises(StitchError) as err:
        check_program(parse_program(text, "t.ir"))
    rendered = err.value.render()
    assert rendered.startswith(f"t.ir:{where}: error: ") and message in rendered, rendered


def test_an_undeclared_symbol_has_the_default_range():
    graph = graph_of("func f(x: f32[n, 4]) -> f32[n, 4] {\n  return exp(x)\n}\n")
    assert graph.symbols == {"n": dims.DEFAULT_RANGE}


@pytest.mark.parametrize("n", [1, 7, 64, 333])
def test_one_graph_evaluates_at_every_size(n):
    graph = graph_of(EXAMPLES.split("\n\n")[2])  # heads
    (x,) = random_inputs(graph, n, {"n": n}).values()
    (got,) = evaluate(graph, {"x": x})
    np.testing.assert_array_equal(got, x.reshape(1, n, 12, 64).transpose(0, 2, 1, 3))


def test_inputs_that_disagree_or_leave_the_range_are_errors_naming_them():
    graph = graph_of("func f[n: 1..10](x: f32[n], y: f32[n]) -> f32[n] {\n  return add(x, y)\n}\n")
    with pytest.raises(StitchError, match=r"symbol 'n' is 7 in input 'x' \(axis 0\) but 9 in input 'y' \(axis 0\)"):
        evaluate(graph, {"x": np.ones(7, np.float32), "y": np.ones(9, np.float32)})
    with pytest.raises(StitchError, match=r"symbol 'n' is 11 in input 'x' \(axis 0\), outside its range 1..10"):
        evaluate(graph, {"x": np.ones(11, np.float32), "y": np.ones(11, np.float32)})


def test_the_cli_evaluates_compiles_and_runs_at_the_sizes_dim_gives(tmp_path, capsys):
    path = tmp_path / "step.ir"
    path.write_text(EXAMPLES.split("\n\n")[1])
    assert main(["eval", str(path), "--dim", "p=5"]) == 0
    assert "out0: f32[12, 6, 64]" in capsys.readouterr().out
    assert main(["eval", str(path)]) == 1
    assert "need a value for its symbol(s) p" in capsys.readouterr().err
    assert main(["eval", str(path), "--dim", "p=0"]) == 1
    assert "symbol 'p' = 0 is outside its range 1..2047" in capsys.readouterr().err
    assert main(["eval", str(path), "--dim", "p"]) == 2  # bad usage
    assert "--dim expects SYMBOL=N" in capsys.readouterr().err
    assert main(["compile", str(path), "--emit", "egraph"]) == 0  # saturation takes symbols (test_symbolic_egraph)
    assert main(["compile", str(path)]) == 0
    assert "kernel k0 -> out0: f32[12, p + 1, 64]" in capsys.readouterr().out
    for size in (3, 2047):  # one compile (cached) serves both (tests/test_symbolic_compile.py)
        assert main(["run", str(path), "--dim", f"p={size}", "--check"]) == 0
        out = capsys.readouterr().out
        assert f"out0: f32[12, {size + 1}, 64]" in out and "check: outputs equal the reference" in out


def test_inference_types_one_statement_at_a_time_with_the_callers_ranges():
    """check.Inference (the ONNX importer's typing): a symbol of a parameter may stand in attributes, its
    range is the caller's dict, and narrowing that dict later proves what it could not before."""
    from stitch.engine.ir.check import Inference
    from stitch.engine.ir.program import Attr, Call, TensorType, Var

    n = dims.symbol("n")
    ranges = {"n": (1, 100)}
    inference = Inference(ranges)
    inference.param("x", TensorType("f32", (n, 8)))
    last = Call("slice", (Var("x"),), (Attr("axes", (0,)), Attr("starts", (n - 1,)), Attr("ends", (n,))))
    assert inference.assign("a", last) == TensorType("f32", (1, 8))
    head = Call("slice", (Var("x"),), (Attr("axes", (0,)), Attr("starts", (0,)), Attr("ends", (50,))))
    with pytest.raises(StitchError, match="past the axis's end"):
        inference.assign("b", head)  # n may be less than 50
    ranges["n"] = (50, 100)
    assert inference.assign("c", head) == TensorType("f32", (50, 8))
    with pytest.raises(StitchError, match="symbol 'm' is no whole dimension"):
        inference.assign("d", Call("reshape", (Var("x"),), (Attr("shape", (dims.symbol("m"), 8)),)))
