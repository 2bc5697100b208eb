"""ONNX MaxPool, AveragePool and LpPool (frontends/onnx_nn.py convert_pool): every padding, stride, dilation
and ceil_mode form, imported, run on the reference interpreter against onnx's reference evaluator and
compiled on cpu and accel against onnxruntime (ONNX's own node cases run in test_onnx_conformance.py;
these add what they lack: ties for MaxPool's Indices, column-major indices, f16, int8, ceil_mode with
asymmetric pads and count_include_pad)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import stitch  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from stitch.engine.ir.check import check_program  # noqa: E402
from stitch.engine.ir.interp import evaluate  # noqa: E402
from stitch.frontends.onnx_import import OnnxImportError, import_onnx  # noqa: E402

RNG = np.random.default_rng(7)
ONNX_DTYPE = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int8: TensorProto.INT8,
              np.uint8: TensorProto.UINT8}


def pool_model(op: str, shape, dtype=np.float32, indices: bool = False, made_here: bool = False, **attrs):
    """One pool of a graph input x, or (made_here) of the ReLU of a 1x1 conv of it by the identity: a
    value a conv made channels last, which the import pools channels last too (but where Indices are
    asked for). Integer pools have no conv before them."""
    outputs = ["y", "i"] if indices else ["y"]
    nodes, inits = [], []
    if made_here:
        eye = np.eye(shape[1], dtype=dtype).reshape((shape[1], shape[1]) + (1,) * (len(shape) - 2))
        inits = [numpy_helper.from_array(eye, "eye")]
        nodes = [helper.make_node("Conv", ["x", "eye"], ["c"]), helper.make_node("Relu", ["c"], ["a"])]
    nodes.append(helper.make_node(op, ["a" if made_here else "x"], outputs, **attrs))
    vo = [helper.make_tensor_value_info("y", ONNX_DTYPE[dtype], None)]
    vo += [helper.make_tensor_value_info("i", TensorProto.INT64, None)] if indices else []
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", ONNX_DTYPE[dtype], list(shape))], vo,
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def pool_input(shape, dtype):
    """Half the elements 0 (a ReLU's output): MaxPool's windows hold ties, so Indices must pick the first."""
    if dtype in (np.int8, np.uint8):
        return RNG.integers(-4 if dtype == np.int8 else 0, 4, shape).astype(dtype)
    return np.maximum(RNG.standard_normal(shape), 0).astype(dtype)


# name: (op, input shape, dtype, Indices?, attributes)
POOLS = {
    "max_stem": ("MaxPool", (1, 3, 11, 12), np.float32, False, {"kernel_shape": [3, 3], "strides": [2, 2],
                                                                "pads": [1, 1, 1, 1]}),  # ResNet's
    "max_indices_ceil": ("MaxPool", (2, 3, 9, 10), np.float32, True, {"kernel_shape": [3, 3], "strides": [2, 2],
                                                                      "pads": [1, 0, 1, 2], "ceil_mode": 1}),
    "max_indices_column_major": ("MaxPool", (1, 2, 7, 8), np.float32, True, {"kernel_shape": [2, 3],
                                                                             "storage_order": 1}),
    "max_1d_dilated_ceil": ("MaxPool", (2, 3, 11), np.float16, False, {"kernel_shape": [4], "strides": [3],
                                                                       "dilations": [2], "ceil_mode": 1}),
    "max_int8_same_lower": ("MaxPool", (1, 3, 8, 9), np.int8, False, {"kernel_shape": [3, 2], "strides": [2, 2],
                                                                      "auto_pad": "SAME_LOWER"}),
    "average_ceil_excluding_pads": ("AveragePool", (1, 3, 10, 10), np.float32, False, {
        "kernel_shape": [3, 3], "strides": [3, 3], "pads": [1, 0, 2, 1], "ceil_mode": 1}),
    "average_ceil_including_pads": ("AveragePool", (1, 3, 10, 10), np.float16, False, {
        "kernel_shape": [3, 3], "strides": [3, 3], "pads": [1, 0, 2, 1], "ceil_mode": 1, "count_include_pad": 1}),
    "average_3d_same_upper": ("AveragePool", (1, 2, 5, 6, 7), np.float32, False, {
        "kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "auto_pad": "SAME_UPPER"}),
    "lp3_pads": ("LpPool", (1, 3, 9, 10), np.float32, False, {"kernel_shape": [3, 3], "strides": [2, 2],
                                                              "pads": [1, 1, 1, 1], "p": 3}),
}


def feeds_of(name, made_here=False):
    op, shape, dtype, indices, attrs = POOLS[name]
    if made_here and dtype in (np.int8, np.uint8):
        pytest.skip("no conv of integers to make the pool's input channels last")
    return pool_model(op, shape, dtype, indices, made_here, **attrs), {"x": pool_input(shape, dtype)}


MADE_HERE = pytest.mark.parametrize("made_here", [False, True], ids=["of_an_input", "of_a_value_made_here"])


def assert_same(got, want, dtype):
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = 2e-3 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


# Where onnx's reference evaluator differs from the specification and onnxruntime
REFERENCE_DIFFERS = {"max_int8_same_lower": "onnx 1.23's reference pools 4 of 9 columns at stride 2 with SAME_LOWER; "
                                            "the specification's and onnxruntime's count is ceil(9 / 2) = 5"}


@MADE_HERE
@pytest.mark.parametrize("name", sorted(set(POOLS) - set(REFERENCE_DIFFERS)))
def test_pool_on_the_reference_interpreter_matches_onnx(name, made_here):
    model, feeds = feeds_of(name, made_here)
    imported = import_onnx(model)
    channels_last = f"perm=[0, {', '.join(map(str, range(2, len(feeds['x'].shape))))}, 1]"
    assert (channels_last in imported.text) == (made_here and not POOLS[name][3]), imported.text
    graph = next(iter(check_program(imported.program).values()))
    got = evaluate(graph, {imported.inputs["x"]: feeds["x"]} | imported.weights)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want[:1], strict=False):  # onnx's reference has its own Indices ties; onnxruntime's below
        assert_same(g, w, POOLS[name][2])


@MADE_HERE
@pytest.mark.parametrize("target", ["cpu", "accel"])
@pytest.mark.parametrize("name", sorted(POOLS))
def test_pool_compiled_matches_onnxruntime(name, target, made_here, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model, feeds = feeds_of(name, made_here)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    imported = import_onnx(model)
    program = stitch.compile(imported.text, target=target, weights=imported.weights, cache_dir=tmp_path)
    got = program(**{imported.inputs["x"]: feeds["x"]})
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same(g, w, POOLS[name][2])


def test_a_max_pool_reads_its_producer_through_index_maps(tmp_path):
    """ReLU then ResNet's 3x3 stride-2 max pool: the padded windows are index maps over the ReLU's input,
    one kernel, nothing copied."""
    node = helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 20, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    imported = import_onnx(model)
    program = stitch.compile(imported.text, weights=imported.weights, cache_dir=tmp_path)
    assert len(program.loops.kernels) == 1
    x = RNG.standard_normal((1, 8, 20, 20)).astype(np.float32)
    (got,) = program(**{imported.inputs["x"]: x})
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])


@pytest.mark.parametrize("op,shape,dtype,attrs,kind,why", [
    ("MaxPool", (1, 2, 6, 6), np.float32, {"kernel_shape": [3]}, "invalid", "MaxPool kernel_shape [3] for 2"),
    ("AveragePool", (1, 2, 6, 6), np.float32, {"kernel_shape": [3, 3], "strides": [1]}, "invalid",
     "AveragePool strides [1]"),
    ("MaxPool", (1, 2, 4, 4), np.float32, {"kernel_shape": [6, 6]}, "invalid", "larger than the padded input"),
    ("LpPool", (6, 6), np.float32, {"kernel_shape": [3]}, "invalid", "LpPool of an input of rank 2"),
    ("AveragePool", (1, 2, 6, 6), np.int8, {"kernel_shape": [3, 3]}, "dtype", "needs a float tensor"),
    ("LpPool", (1, 2, 6, 6), np.float32, {"kernel_shape": [3, 3], "p": 0}, "invalid", "LpPool with p=0"),
])
def test_pool_attributes_that_break_the_specification_are_refused(op, shape, dtype, attrs, kind, why):
    model = pool_model(op, shape, dtype, **attrs)
    with pytest.raises(OnnxImportError) as err:
        import_onnx(model)
    assert [p.kind for p in err.value.problems] == [kind] and why in str(err.value)
