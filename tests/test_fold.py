"""Values of bound weights alone (engine/ir/fold.py): made parameters of their own and computed once,
at binding, by the reference interpreter; what a kernel would only move is left to the kernels."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import stitch
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from stitch.engine.cli import main
from stitch.engine.ir.check import check_func
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.fold import fold_bound, fold_values
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.parse import parse_program
from stitch.engine.ir.printer import print_func
from stitch.engine.ir.tolerance import compare
from stitch.frontends.onnx_import import import_onnx
from stitch_testing import needs_cc, programs

# DeBERTa's relative positions: layer_norm(e) @ wk + bk, the same on every call, read by x's product
POS = """
func pos(x: f32[64, 96], e: f32[32, 96], g: f32[96], wk: f32[96, 96], bk: f32[96]) -> f32[64, 32] {
  m = mean(e, axes=[1], keepdims=true)
  d = sub(e, m)
  v = mean(mul(d, d), axes=[1], keepdims=true)
  n = mul(mul(d, rsqrt(add(v, 1e-5))), g)
  k = add(matmul(n, wk), bk)
  return matmul(x, transpose(k, perm=[1, 0]))
}
"""


def graph_of(text: str):
    return check_func(parse_program(text).funcs[0])


def split(graph, bound: list[str], seed: int = 0) -> tuple[dict, dict]:
    inputs = random_inputs(graph, seed)
    return {k: v for k, v in inputs.items() if k not in bound}, {k: inputs[k] for k in bound}


def test_a_weights_layer_norm_and_product_are_one_parameter_computed_at_binding():
    graph = graph_of(POS)
    folded = fold_bound(graph, ["e", "g", "wk", "bk"])
    ops = [n.op for n in folded.graph.nodes if n.op != "param"]
    assert ops == ["matmul"] and len(folded.names) == 1  # k transposed: the whole cone, layout too
    (name,) = folded.names
    assert folded.graph.nodes[folded.graph.params[-1]].type.shape == (96, 32)
    inputs, weights = split(graph, ["e", "g", "wk", "bk"])
    values = fold_values(folded, weights)
    assert set(values) == {name}
    (want,) = evaluate(graph, inputs | weights)
    (got,) = evaluate(folded.graph, inputs | weights | values)
    np.testing.assert_array_equal(got, want)


@needs_cc
def test_a_compiled_program_computes_the_weights_value_once_and_takes_the_same_inputs(tmp_path):
    graph = graph_of(POS)
    inputs, weights = split(graph, ["e", "g", "wk", "bk"], 3)
    compiled = stitch.compile(POS, cache_dir=tmp_path, weights=weights)
    assert compiled.graph.param_names == ["x", "e", "g", "wk", "bk"]  # the program as written
    assert [n.op for n in compiled.compiled.graph.nodes if n.op != "param"] == ["matmul"]
    assert len(compiled.loops.kernels) == 1
    (got,) = compiled(**inputs)
    assert compare(got, evaluate(graph, inputs | weights)[0]) == ""
    with pytest.raises(StitchError, match="were bound at compile time"):
        compiled(**inputs, e=weights["e"])


def test_nothing_bound_or_nothing_computed_folds_nothing():
    graph = graph_of(POS)
    assert fold_bound(graph, []).graph is graph and fold_bound(graph, []).values is None
    assert fold_bound(graph, ["wk", "bk"]).values is None  # read only by the product of a run-time value
    moved = graph_of("func f(x: f32[8, 8], w: f32[8, 4]) -> f32[8, 4] {\n"
                     "  return matmul(x, transpose(reshape(w, shape=[4, 8]), perm=[1, 0]))\n}\n")
    assert fold_bound(moved, ["w"]).values is None  # only moved: the kernels read it in place


def test_a_broadcast_of_a_weights_value_is_not_materialised_but_the_value_under_it_is():
    graph = graph_of("func f(x: f32[64, 96], b: f32[96], c: f32[96]) -> f32[64, 96] {\n"
                     "  return mul(x, broadcast_to(reshape(add(b, c), shape=[1, 96]), shape=[64, 96]))\n}\n")
    folded = fold_bound(graph, ["b", "c"])
    assert [folded.graph.nodes[i].type.shape for i in folded.graph.params[-len(folded.names):]] == [(1, 96)]
    assert [n.op for n in folded.graph.nodes if n.op != "param"] == ["broadcast_to", "mul"]


def test_an_output_of_weights_alone_is_not_a_parameter_but_its_inputs_may_be():
    text = ("func f(x: f32[4, 4], w: f32[4, 4]) -> (f32[4, 4], f32[4, 4]) {\n"
            "  e = exp(w)\n  return add(x, e), neg(e)\n}\n")
    graph = graph_of(text)
    folded = fold_bound(graph, ["w"])
    assert [n.op for n in folded.graph.nodes if n.op != "param"] == ["add", "neg"]
    assert all(folded.graph.nodes[o].op != "param" for o in folded.graph.outputs)
    inputs, weights = split(graph, ["w"])
    values = fold_values(folded, weights)
    for got, want in zip(evaluate(folded.graph, inputs | weights | values), evaluate(graph, inputs | weights)):
        np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(program=programs(dtypes=("f32", "f64", "i32", "bool"), max_ops=8, max_rank=3, max_dim=5, movement=True),
       data=st.data())
def test_folding_computes_what_the_program_computes(program, data):
    """On the reference interpreter, exactly: the folded values are the same numpy ops on the same arrays."""
    graph = check_func(program.funcs[0])
    inputs = random_inputs(graph, data.draw(st.integers(0, 99), label="seed"))
    names = sorted(inputs)
    bound = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)), label="bound") if names else []
    weights = {k: inputs.pop(k) for k in bound}
    folded = fold_bound(graph, bound)
    assert folded.graph.param_names[:len(graph.params)] == graph.param_names
    assert all(folded.graph.nodes[o].op != "param" or o in folded.graph.params[:len(graph.params)]
               for o in folded.graph.outputs)
    with np.errstate(all="ignore"):
        values = fold_values(folded, weights)
        got = evaluate(folded.graph, inputs | weights | values)
        want = evaluate(graph, inputs | weights)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w, err_msg=print_func(program.funcs[0]))


@needs_cc
def test_the_command_line_shows_the_schedule_run_compiles(tmp_path, capsys):
    ir = tmp_path / "pos.ir"
    ir.write_text(POS)
    graph = graph_of(POS)
    _, weights = split(graph, ["e", "g", "wk", "bk"])
    np.savez(tmp_path / "w.npz", **weights)
    assert main(["compile", str(ir), "--weights", str(tmp_path / "w.npz"), "--emit", "loops"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\n  bound v\d+_of_weights\n", out)  # e, g, wk, bk are read only through it
    assert main(["run", str(ir), "--weights", str(tmp_path / "w.npz"), "--seed", "2", "--check",
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "check: outputs equal the reference" in capsys.readouterr().out


@needs_cc
def test_an_onnx_layer_norm_of_an_initializer_is_computed_at_binding(tmp_path):
    rng = np.random.default_rng(4)
    e, g, b, wk = (rng.standard_normal(s).astype(np.float32) for s in ((32, 96), (96,), (96,), (96, 96)))
    f32 = TensorProto.FLOAT
    nodes = [helper.make_node("LayerNormalization", ["e", "g", "b"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("MatMul", ["n", "wk"], ["k"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "kt"], ["y"])]
    inits = [helper.make_tensor(name, f32, a.shape, a.flatten()) for name, a in
             (("e", e), ("g", g), ("b", b), ("wk", wk))]
    model = helper.make_model(helper.make_graph(nodes, "pos", [helper.make_tensor_value_info("x", f32, [64, 96])],
                                                [helper.make_tensor_value_info("y", f32, None)], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    imported = import_onnx(model)
    compiled = stitch.compile(imported.text, cache_dir=tmp_path, weights=imported.weights)
    assert [n.op for n in compiled.compiled.graph.nodes if n.op != "param"] == ["matmul"]
    x = rng.standard_normal((64, 96)).astype(np.float32)
    (got,) = compiled(**{imported.inputs["x"]: x})
    mean = e.mean(1, keepdims=True)
    n = (e - mean) / np.sqrt(((e - mean) ** 2).mean(1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(got, x @ (n @ wk).T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["transformer_encoder_layer-dynamo", "transformer_encoder_layer-torchscript",
                                  "gpt2_block-dynamo", "llama_layer_rotary_inside-dynamo"])
def test_no_kernel_of_an_imported_model_with_its_weights_bound_reads_only_weights(name):
    """A value of the weights alone is made once, at binding (or read in place by its kernels): no
    kernel of a call reads nothing but weights (issue 48: a transpose of out_proj's weight ran on
    every call)."""
    import onnx

    fixtures = Path(__file__).resolve().parent / "fixtures" / "models"
    imported = import_onnx(onnx.load(fixtures / f"{name}.onnx"), entry="m")
    program = stitch.compile(imported.text, weights=imported.weights)
    schedule = program.compiled.schedule
    bound = set(program.weights)
    only_weights = [k.roots for k in schedule.kernels
                    if all(schedule.params.get(cid) in bound for cid in k.read_values)]
    assert only_weights == []
