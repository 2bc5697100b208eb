"""Fuzz the ONNX importer with mutated real exports: a clean StitchError or a correct import, never a crash.

Each example takes one committed fixture model (tests/fixtures/models) and
breaks it the ways a damaged or hand-edited file is broken: an initializer's
data_type changed or its raw_data truncated, a node input dropped or renamed,
an attribute replaced by a value of another kind, the op type swapped, a graph
input's dtype or dimension changed, the opset import removed or changed. The
import must either raise a StitchError (exit 1 on the CLI) or succeed, and a
successful import must compute what onnx's reference evaluator computes on the
mutated model (when the evaluator itself accepts it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnx import helper  # noqa: E402
from stitch.engine.ir.check import check_program  # noqa: E402
from stitch.engine.ir.errors import StitchError  # noqa: E402
from stitch.engine.ir.interp import evaluate, np_dtype  # noqa: E402
from stitch.frontends.onnx_import import import_onnx  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "models"
MODELS = ["bert_layer-dynamo", "bert_layer-torchscript", "gpt2_block-torchscript", "llama_layer_rotary_given-dynamo"]
OP_TYPES = ["Add", "Softmax", "Gather", "Slice", "Split", "Concat", "Reshape", "Transpose", "MatMul", "Cast",
            "LayerNormalization", "Unsqueeze", "GatherElements", "Where", "Expand", "Conv"]


def load(name: str):
    return onnx.load(str(FIXTURES / f"{name}.onnx"))


attribute_values = st.one_of(
    st.integers(-(2 ** 40), 2 ** 40), st.integers(-5, 5), st.lists(st.integers(-5, 5), min_size=1, max_size=4),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.lists(st.floats(-2, 2), min_size=1, max_size=3))


@st.composite
def mutations(draw):
    """(fixture name, a function that mutates a ModelProto in place, a description)."""
    name = draw(st.sampled_from(MODELS))
    model = load(name)
    graph = model.graph
    kind = draw(st.sampled_from(["init_dtype", "truncate", "drop_input", "rename_input", "attribute", "op_type",
                                 "input_type", "input_dim", "opset", "no_opset"]))
    if kind in ("init_dtype", "truncate"):
        k = draw(st.integers(0, len(graph.initializer) - 1))
        init = graph.initializer[k]
        if kind == "init_dtype":
            init.data_type = draw(st.integers(-3, 25))
        else:
            init.raw_data = init.raw_data[:draw(st.integers(0, max(len(init.raw_data) - 1, 0)))]
        return name, model, f"{kind} of initializer {init.name}"
    if kind in ("drop_input", "rename_input", "attribute", "op_type"):
        node = graph.node[draw(st.integers(0, len(graph.node) - 1))]
        if kind == "op_type":
            node.op_type = draw(st.sampled_from(OP_TYPES))
        elif kind == "attribute":
            value = draw(attribute_values)
            names = [a.name for a in node.attribute] + ["axis", "perm", "to", "epsilon"]
            attr_name = draw(st.sampled_from(names))
            kept = [a for a in node.attribute if a.name != attr_name]
            del node.attribute[:]
            node.attribute.extend(kept + [helper.make_attribute(attr_name, value)])
        elif node.input:
            k = draw(st.integers(0, len(node.input) - 1))
            node.input[k] = "" if kind == "drop_input" else "nowhere"
        return name, model, f"{kind} of node {node.name} ({node.op_type})"
    if kind in ("input_type", "input_dim"):
        vi = graph.input[0]
        if kind == "input_type":
            vi.type.tensor_type.elem_type = draw(st.integers(-2, 25))
        else:
            dims = vi.type.tensor_type.shape.dim
            dims[draw(st.integers(0, len(dims) - 1))].dim_value = draw(st.integers(-2, 40))
        return name, model, f"{kind} of input {vi.name}"
    if kind == "opset":
        model.opset_import[0].version = draw(st.integers(-1, 30))
        return name, model, f"opset {model.opset_import[0].version}"
    del model.opset_import[:]
    return name, model, "no opset import"


def reference_outputs(model, feeds):
    """onnx's reference evaluator on the mutated model, or None when it refuses or crashes on it."""
    from onnx.reference import ReferenceEvaluator

    try:
        with np.errstate(all="ignore"):
            return ReferenceEvaluator(model).run(None, feeds)
    except Exception:
        return None


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(mutations())
def test_mutated_exports_import_cleanly_or_correctly(mutation):
    name, model, what = mutation
    try:
        imported = import_onnx(model.SerializeToString())
    except StitchError as err:
        assert str(err).strip(), what
        return
    # Imported: it must compute what the mutated model computes.
    with np.load(FIXTURES / f"{name}.npz") as data:
        feeds = {k: data[k] for k in data.files if not k.startswith("output:")}
    graph = next(iter(check_program(imported.program).values()))
    inputs = {imported.inputs[k]: v for k, v in feeds.items() if k in imported.inputs}
    types = dict(zip(graph.param_names, graph.param_types))
    if len(inputs) != len(imported.inputs) or any(
            v.shape != types[k].shape or v.dtype != np_dtype(types[k].dtype) for k, v in inputs.items()):
        return  # a graph input's type or a dimension was changed: the fixture's inputs no longer fit it
    want = reference_outputs(model, feeds)
    if want is None:
        return
    with np.errstate(all="ignore"):
        got = evaluate(graph, inputs | imported.weights)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4, err_msg=what)
