"""The numpy references of tests/quantized_reference.py against onnxruntime's recorded outputs.

The fixtures (tests/fixtures/models/quantized/NAME.onnx, .npz; tools/export_models.py --quantized) hold
the inputs, onnxruntime's outputs (`output:NAME`) and the values of the quantized operators' other inputs
and outputs (`value:NAME`), per stored size for a dynamic model (`past=7/...`):

- a model of a few nodes (one operator, or quantize_dynamic's five for one MatMul) is evaluated whole with
  the references, from the graph inputs and initializers, against every recorded output and value;
- a whole model (GPT-2 quantized by MatMulNBitsQuantizer or quantize_dynamic) has each quantized node
  evaluated alone from recorded values, against the recorded values of its outputs.

Needs numpy and onnx only; a fixture that is not there is skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper, numpy_helper  # noqa: E402
from quantized_reference import evaluate_node  # noqa: E402
from stitch_testing import QUANTIZED, quantized_fixture  # noqa: E402

FIXTURES = QUANTIZED
NAMES = sorted(p.stem for p in FIXTURES.glob("*.onnx"))
QUANTIZED_OPS = {"DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul",
                 "MatMulNBits", "GatherBlockQuantized"}
EVALUATED = QUANTIZED_OPS | {"Cast", "Mul"}
WHOLE_MODELS = {"gpt2_step_2layers-matmul_nbits-dynamo", "gpt2_model-quantize_dynamic_qint8-dynamo",
                "gpt2_model-quantize_dynamic_quint8-dynamo"}
# (rtol, atol) of a float output against onnxruntime's, by operator; integer outputs must be equal. The
# differences measured on these fixtures are in docs/reference/quantized-onnx.md.
TOLERANCE = {"DequantizeLinear": (0, 0), "GatherBlockQuantized": (0, 0), "MatMulNBits": (1e-5, 1e-5),
             "Mul": (1e-6, 1e-6), "Cast": (0, 0), "DynamicQuantizeLinear": (0, 0)}

needs_fixtures = pytest.mark.skipif(not NAMES, reason=f"no quantized fixtures in {FIXTURES}")


def load(name: str):
    """(the model, its initializers, {key prefix: the npz's arrays of that prefix, the prefix removed})."""
    if not (FIXTURES / f"{name}.npz").exists():
        pytest.skip(f"{name}.npz is not there")
    model, runs = quantized_fixture(name)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return model, inits, runs


def attributes(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def recorded(arrays: dict, name: str):
    for key in (f"output:{name}", f"value:{name}"):
        if key in arrays:
            return arrays[key]
    return None


def check(got: np.ndarray, want: np.ndarray, node, what: str) -> None:
    got = np.asarray(got)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    if np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        rtol, atol = TOLERANCE[node.op_type]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


@needs_fixtures
def test_every_quantized_operator_and_whole_model_is_there():
    ops = {n.op_type for name in NAMES for n in onnx.load(FIXTURES / f"{name}.onnx").graph.node}
    missing = sorted(QUANTIZED_OPS - ops) + sorted(WHOLE_MODELS - set(NAMES))
    if missing:
        pytest.skip(f"not in the fixtures: {', '.join(missing)} (tools/export_models.py --quantized)")


@needs_fixtures
@pytest.mark.parametrize("name", NAMES)
def test_npz_holds_the_graph_inputs_and_outputs(name):
    model, inits, runs = load(name)
    inputs = {v.name for v in model.graph.input} - set(inits)
    for prefix, arrays in runs.items():
        assert inputs <= set(arrays), (prefix, inputs - set(arrays))
        assert {f"output:{o.name}" for o in model.graph.output} <= set(arrays), prefix


@needs_fixtures
@pytest.mark.parametrize("name", NAMES)
def test_reference_matches_onnxruntime(name):
    model, inits, runs = load(name)
    whole = not all(n.op_type in EVALUATED for n in model.graph.node)
    assert whole == (name in WHOLE_MODELS)
    for prefix, arrays in runs.items():
        values = dict(inits) | {k: v for k, v in arrays.items() if ":" not in k}
        checked = 0
        for node in model.graph.node:
            if whole and node.op_type not in QUANTIZED_OPS:
                continue
            if whole:  # each node alone, from the recorded values
                values |= {t: recorded(arrays, t) for t in node.input if t and t not in values}
            assert all(t in values and values[t] is not None for t in node.input if t), (prefix, node.name)
            got = evaluate_node(node.op_type, [values[t] if t else None for t in node.input], attributes(node))
            for out, g in zip(node.output, got, strict=True):
                want = recorded(arrays, out)
                if want is not None:
                    check(g, want, node, f"{name} {prefix} {node.op_type} {out}")
                    checked += 1
                values[out] = want if whole and want is not None else g
        assert checked >= 1 + whole, (name, prefix)  # a whole model has several quantized nodes
