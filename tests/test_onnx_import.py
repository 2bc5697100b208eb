"""ONNX import: each translated op against onnx's reference evaluator, the errors, the CLI, a model-level example."""

from __future__ import annotations

import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import stitch  # noqa: E402
import stitch_testing  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from stitch.engine.cli import main  # noqa: E402
from stitch.engine.ir.check import check_program  # noqa: E402
from stitch.engine.ir.errors import StitchError  # noqa: E402
from stitch.engine.ir.interp import evaluate  # noqa: E402
from stitch.engine.ir.parse import parse_program  # noqa: E402
from stitch.engine.ir.printer import print_program  # noqa: E402
from stitch.frontends.onnx_import import OnnxImportError, import_onnx  # noqa: E402

F32 = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def model_of(nodes, inputs, outputs, initializers=(), opset=21):
    """A model from (name, elem_type, shape) inputs and outputs (shape None: left to inference)."""
    vi = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    vo = [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs]
    graph = helper.make_graph(nodes, "g", vi, vo, [numpy_helper.from_array(a, n) for n, a in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_imported(model, feeds: dict[str, np.ndarray], **kwargs) -> list[np.ndarray]:
    """Import, then evaluate the program with the reference interpreter."""
    imported = import_onnx(model, **kwargs)
    assert imported.program == imported.checked  # the text parses back to the program the import checked
    graph = next(iter(check_program(imported.program).values()))
    inputs = {imported.inputs[k]: v for k, v in feeds.items() if k in imported.inputs}
    inputs.update(imported.weights)
    with np.errstate(all="ignore"):
        return evaluate(graph, inputs)


def assert_matches_onnx(model, feeds, rtol=1e-5, atol=1e-6, **kwargs):
    want = ReferenceEvaluator(model).run(None, feeds)
    got = run_imported(model, feeds, **kwargs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def x_of(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def assert_close_to_sums(got, want):
    """Compare f32 sums of many products: both sides round each partial sum, in different orders,
    so an element near zero amid sums of magnitude ~100 may differ by ~1e-4 (seen in CI on 3,072
    products). The absolute tolerance scales with the largest sum; the relative one stays tight."""
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()))


def single(op, shape=(3, 4, 5), opset=21, extra_inputs=(), **attrs):
    """A one-node model on a float input x (and extra (name, array) inputs given as graph inputs)."""
    names = ["x"] + [n for n, _ in extra_inputs]
    node = helper.make_node(op, names, ["y"], **attrs)
    inputs = [("x", F32, list(shape))] + [(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
                                          for n, a in extra_inputs]
    return model_of([node], inputs, [("y", F32, None)], opset=opset)


@pytest.mark.parametrize("op,attrs,opset", [
    ("Softmax", {}, 13), ("Softmax", {"axis": 0}, 13), ("LogSoftmax", {"axis": 1}, 13),
    ("Gelu", {}, 21), ("Gelu", {"approximate": "tanh"}, 21),
    ("Relu", {}, 21), ("Sigmoid", {}, 21), ("Tanh", {}, 21), ("Erf", {}, 21), ("Neg", {}, 21), ("Abs", {}, 21),
    ("Reciprocal", {}, 21), ("LeakyRelu", {"alpha": 0.2}, 21), ("Elu", {}, 21), ("Selu", {}, 21),
    ("Celu", {"alpha": 2.0}, 21), ("HardSigmoid", {}, 21), ("HardSwish", {}, 21), ("Softsign", {}, 21),
    ("Softplus", {}, 21), ("Mish", {}, 21), ("ThresholdedRelu", {"alpha": 0.5}, 21),
    ("ReduceMean", {"axes": [1]}, 13), ("ReduceMax", {"axes": [-1], "keepdims": 0}, 13), ("ReduceMin", {}, 13),
    ("ReduceSum", {"axes": [0, 2]}, 11), ("ReduceL2", {"axes": [1]}, 13), ("ReduceSumSquare", {}, 13),
    ("ReduceLogSumExp", {"axes": [2], "keepdims": 0}, 13), ("ReduceL1", {"keepdims": 0}, 13),
    ("Transpose", {}, 21), ("Transpose", {"perm": [1, 0, 2]}, 21), ("Flatten", {"axis": -1}, 21),
    ("Flatten", {"axis": 0}, 21), ("Squeeze", {}, 11), ("Unsqueeze", {"axes": [0, -1]}, 11),
    ("Identity", {}, 21), ("Clip", {"min": -0.5, "max": 0.5}, 6),
])
def test_single_op_matches_onnx(op, attrs, opset):
    shape = (3, 1, 5) if op == "Squeeze" else (3, 4, 5)
    assert_matches_onnx(single(op, shape, opset, **attrs), {"x": x_of(*shape)})


@pytest.mark.parametrize("op,axis", [("Softmax", None), ("Softmax", 2), ("LogSoftmax", 0)])
def test_softmax_before_opset_13_normalizes_the_coerced_2d_rows(op, axis):
    """Opsets < 13 flatten the axes from `axis` (default 1) on (onnx's reference evaluator does not)."""
    x = x_of(3, 4, 5)
    attrs = {} if axis is None else {"axis": axis}
    k = 1 if axis is None else axis
    rows = x.reshape(int(np.prod(x.shape[:k])), -1).astype(np.float64)
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    want = (np.log(want) if op == "LogSoftmax" else want).reshape(x.shape)
    (got,) = run_imported(single(op, x.shape, 11, **attrs), {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis,stash,with_bias", [(-1, 1, True), (1, 1, False), (0, 1, True)])
def test_layer_normalization_matches_onnx(axis, stash, with_bias):
    shape = (2, 3, 8)
    norm = shape[axis % 3:]
    extra = [("scale", x_of(*norm))] + ([("bias", x_of(*norm))] if with_bias else [])
    model = single("LayerNormalization", shape, 17, extra, axis=axis, epsilon=1e-3, stash_type=stash)
    assert_matches_onnx(model, {"x": x_of(*shape), **dict(extra)})


def test_layer_normalization_f16_computes_in_f32():
    """Y keeps x's dtype; Mean and InvStdDev have the stash type (the spec's U; onnx's evaluator gives f16)."""
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean", "inv"], axis=-1)
    model = model_of([node], [("x", TensorProto.FLOAT16, [4, 8]), ("s", TensorProto.FLOAT16, [8])],
                     [("y", TensorProto.FLOAT16, None), ("mean", F32, None), ("inv", F32, None)], opset=17)
    x, s = x_of(4, 8, dtype=np.float16), x_of(8, dtype=np.float16)
    y, mean, inv = run_imported(model, {"x": x, "s": s})
    assert (y.dtype, mean.dtype, inv.dtype) == (np.float16, np.float32, np.float32)
    (want,) = ReferenceEvaluator(model).run(["y"], {"x": x, "s": s})
    np.testing.assert_allclose(y, want, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(mean[:, 0], x.astype(np.float32).mean(axis=1), rtol=1e-5, atol=1e-6)


NCHW = (2, 4, 3, 6)


@pytest.mark.parametrize("op,opset,extra,attrs", [
    ("RMSNormalization", 23, [("scale", (3, 6))], {"axis": 2}),
    ("BatchNormalization", 15, [("s", (4,)), ("b", (4,)), ("m", (4,)), ("v", (4,))], {"epsilon": 1e-3}),
    ("InstanceNormalization", 6, [("s", (4,)), ("b", (4,))], {}),
    ("GroupNormalization", 21, [("s", (4,)), ("b", (4,))], {"num_groups": 2}),
    ("MeanVarianceNormalization", 13, [], {}),
    ("LpNormalization", 1, [], {"axis": 1}),
    ("GlobalAveragePool", 1, [], {}), ("GlobalMaxPool", 1, [], {}),
    ("DepthToSpace", 13, [], {"blocksize": 2, "mode": "CRD"}), ("DepthToSpace", 13, [], {"blocksize": 2}),
    ("SpaceToDepth", 13, [], {"blocksize": 3}), ("Shrink", 9, [], {"lambd": 0.3, "bias": 0.1}),
    ("Sign", 13, [], {}), ("Swish", 24, [], {"alpha": 0.5}),
])
def test_normalizations_and_layout_ops_match_onnx(op, opset, extra, attrs):
    arrays = [(n, np.abs(x_of(*shape)) + 0.5 if n == "v" else x_of(*shape)) for n, shape in extra]
    assert_matches_onnx(single(op, NCHW, opset, arrays, **attrs), {"x": x_of(*NCHW), **dict(arrays)},
                        rtol=1e-4, atol=1e-5)


def test_l1_normalization_divides_by_the_sum_of_magnitudes():
    """The spec's L1 norm (onnx's reference evaluator sums x without abs)."""
    x = x_of(3, 4)
    (got,) = run_imported(single("LpNormalization", (3, 4), 1, axis=0, p=1), {"x": x})
    np.testing.assert_allclose(got, x / np.abs(x).sum(axis=0, keepdims=True), rtol=1e-5)


def test_isnan_isinf_and_inference_dropout():
    x = np.array([1.0, np.nan, np.inf, -np.inf, -2.0], np.float32)
    nodes = [helper.make_node("IsNaN", ["x"], ["nan"]), helper.make_node("IsInf", ["x"], ["inf"]),
             helper.make_node("IsInf", ["x"], ["neg"], detect_positive=0),
             helper.make_node("Dropout", ["x"], ["y", "mask"])]
    bools = [(n, TensorProto.BOOL, None) for n in ("nan", "inf", "neg")]
    model = model_of(nodes, [("x", F32, [5])], bools + [("y", F32, None), ("mask", TensorProto.BOOL, None)])
    nan, inf, neg, y, mask = run_imported(model, {"x": x})
    assert nan.tolist() == [False, True, False, False, False]
    assert inf.tolist() == [False, False, True, True, False] and neg.tolist() == [False, False, False, True, False]
    np.testing.assert_array_equal(y, x)
    assert mask.all()


@pytest.mark.parametrize("attrs,c_shape", [({}, None), ({"transA": 1, "transB": 1}, (5,)),
                                           ({"alpha": 0.5, "beta": 2.0}, (3, 5)), ({"beta": 0.5}, (1,))])
def test_gemm_matches_onnx(attrs, c_shape):
    a_shape = (4, 3) if attrs.get("transA") else (3, 4)
    b_shape = (5, 4) if attrs.get("transB") else (4, 5)
    extra = [("b", x_of(*b_shape))] + ([("c", x_of(*c_shape))] if c_shape else [])
    assert_matches_onnx(single("Gemm", a_shape, 13, extra, **attrs), {"x": x_of(*a_shape), **dict(extra)})


def conv_model(x_shape, w, bias=None, dtype=F32, made_here=False, made_first=False, **attrs):
    """One Conv by the initializer w (and bias b) of a graph input x, or (made_here) of the ReLU of a
    1x1 conv of it by the identity: a value a conv made channels last, which the import convolves
    channels last too, or (made_first) of x times 2: a value the program makes channels first."""
    names = ["a" if made_here or made_first else "x", "w"] + (["b"] if bias is not None else [])
    inits = [("w", w)] + ([("b", bias)] if bias is not None else [])
    nodes = []
    if made_first:
        inits.append(("two", np.array(2, dtype=helper.tensor_dtype_to_np_dtype(dtype))))
        nodes = [helper.make_node("Mul", ["x", "two"], ["a"])]
    if made_here:
        eye = np.eye(x_shape[1], dtype=helper.tensor_dtype_to_np_dtype(dtype)).reshape(
            (x_shape[1], x_shape[1]) + (1,) * (len(x_shape) - 2))
        inits.append(("eye", eye))
        nodes = [helper.make_node("Conv", ["x", "eye"], ["i"]), helper.make_node("Relu", ["i"], ["a"])]
    return model_of(nodes + [helper.make_node("Conv", names, ["y"], **attrs)], [("x", dtype, list(x_shape))],
                    [("y", dtype, None)], inits)


CONVS = {  # name: (input shape, weight shape, bias?, attributes)
    "patches": ((2, 3, 32, 32), (8, 3, 16, 16), True, {"strides": [16, 16]}),  # ViT's patch embedding
    "patches_cut": ((1, 3, 35, 33), (4, 3, 8, 8), False, {"strides": [8, 8]}),  # rows and columns left over
    "k3_pad1": ((1, 6, 20), (5, 6, 3), True, {"pads": [1, 1]}),  # Whisper's first
    "k3_pad1_stride2": ((1, 5, 20), (5, 5, 3), True, {"pads": [1, 1], "strides": [2]}),  # and second
    "asymmetric_dilated": ((1, 2, 9, 11), (3, 2, 3, 2), False, {"pads": [2, 0, 1, 3], "dilations": [2, 1],
                                                              "strides": [1, 2]}),
    "same_lower": ((1, 2, 7, 8), (4, 2, 4, 3), True, {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    "same_upper_1x1": ((2, 4, 5, 5), (3, 4, 1, 1), False, {"auto_pad": "SAME_UPPER"}),
    "valid_3d": ((1, 2, 5, 6, 4), (2, 2, 2, 3, 2), True, {"auto_pad": "VALID"}),
    "depthwise": ((2, 6, 12), (6, 1, 4), True, {"group": 6, "pads": [3, 0]}),  # a causal depthwise conv
    "grouped": ((2, 8, 20), (12, 2, 5), True, {"group": 4, "pads": [2, 2]}),  # wav2vec2's positional conv
    "grouped_patches": ((1, 4, 8, 8), (6, 2, 2, 2), False, {"group": 2, "strides": [2, 2]}),
    "depth_multiplier": ((1, 3, 10), (6, 1, 3), True, {"group": 3}),  # two output channels per input channel
}


@pytest.mark.parametrize("made", ["input", "here", "first"],
                         ids=["of_an_input", "of_a_value_made_here", "of_a_value_made_channels_first"])
@pytest.mark.parametrize("name", sorted(CONVS))
def test_conv_matches_onnx(name, made):
    made_here = made == "here"
    x_shape, w_shape, with_bias, attrs = CONVS[name]
    bias = x_of(w_shape[0]) if with_bias else None
    model = conv_model(x_shape, x_of(*w_shape), bias, made_here=made_here, made_first=made == "first", **attrs)
    assert_matches_onnx(model, {"x": x_of(*x_shape)}, rtol=1e-4, atol=1e-5)
    imported = import_onnx(model)
    program = imported.text
    rank = len(x_shape)
    last = f"perm=[0, {', '.join(map(str, range(2, rank)))}, 1]"  # [N, C, S...] read as [N, S..., C]
    grouped = 1 < attrs.get("group", 1) and not (attrs["group"] == x_shape[1] == w_shape[0])
    source = "x" if made == "input" else "a"
    assert (f"transpose({source}, {last})" in program) == (made_here and not grouped), program  # channels last
    # a dense conv of a value made channels first, its last axis's taps at stride 1: the weight on the left
    inner = attrs.get("strides", [1])[-1] == 1 and attrs.get("dilations", [1])[-1] == 1
    dense = attrs.get("group", 1) == 1
    assert (" = matmul(w" in program) == (made == "first" and dense and inner), program
    padded = {"k3_pad1", "k3_pad1_stride2", "asymmetric_dilated", "same_lower", "depthwise", "grouped"}
    assert bool(set(imported.weights) - {"w", "b", "eye", "two"}) == (name in padded), program  # zeros beside the input
    assert (program.count("matmul(") > made_here) == (name != "depthwise"), program  # a depthwise conv is no product
    # tiling patches: a reshape and a transpose; a 1x1 kernel: the input itself
    assert ("slice" in program) == (name not in ("patches", "grouped_patches", "same_upper_1x1")), program


@st.composite
def windows_2d(draw):
    """A 2-D Conv's geometry: per spatial axis a kernel of 1-4 taps, stride 1-3, dilation 1-2 and pads of
    0-2 a side, the input long enough for one window at least."""
    kernel = [draw(st.integers(1, 4)) for _ in range(2)]
    strides = [draw(st.integers(1, 3)) for _ in range(2)]
    dilations = [draw(st.integers(1, 2)) for _ in range(2)]
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    spatial = [max(draw(st.integers(3, 12)), (k - 1) * d + 1 - pads[a] - pads[a + 2])
               for a, (k, d) in enumerate(zip(kernel, dilations))]
    return kernel, strides, dilations, pads, spatial, draw(st.integers(2, 6)), draw(st.integers(2, 7))


@settings(max_examples=100 if stitch_testing.LONG else 8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(windows_2d())
def test_a_conv_of_a_conv_compiles_to_what_onnx_computes_for_any_window(geometry):
    """The second of two convs reads the first's channels-last output through its windows: the outer
    spatial axis's taps as rows laid over it, the inner axis's as slices (up to SLICED_TAPS), k walked in
    chunks that keep its digits whole. Compiled for the cpu, it computes what onnx's reference does."""
    kernel, strides, dilations, pads, spatial, c, m = geometry
    inits = [("eye", np.eye(c, dtype=np.float32).reshape(c, c, 1, 1)), ("w", x_of(m, c, *kernel)), ("b", x_of(m))]
    nodes = [helper.make_node("Conv", ["x", "eye"], ["i"]), helper.make_node("Relu", ["i"], ["a"]),
             helper.make_node("Conv", ["a", "w", "b"], ["y"], kernel_shape=kernel, strides=strides,
                              dilations=dilations, pads=pads)]
    model = model_of(nodes, [("x", F32, [1, c, *spatial])], [("y", F32, None)], inits)
    imported = import_onnx(model)
    assert "transpose(a, perm=[0, 2, 3, 1])" in imported.text  # the second conv reads a channels last
    x = x_of(1, c, *spatial)
    (got,) = stitch.compile(imported.text, weights=imported.weights)(**{imported.inputs["x"]: x})
    assert_close_to_sums(got, ReferenceEvaluator(model).run(None, {"x": x})[0])


@settings(max_examples=100 if stitch_testing.LONG else 8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(windows_2d())
def test_a_conv_of_a_value_made_channels_first_compiles_to_what_onnx_computes_for_any_window(geometry):
    """A conv of a value the program makes channels first (a GroupNorm's output, here an InstanceNorm's):
    where its inner axis's taps are read at stride 1 the weight is the product's left operand and the
    windows its columns, the output channels first where it is; elsewhere rows of positions. Compiled
    for the cpu, it computes what onnx's reference does."""
    kernel, strides, dilations, pads, spatial, c, m = geometry
    inits = [("s", x_of(c)), ("t", x_of(c)), ("w", x_of(m, c, *kernel)), ("b", x_of(m))]
    nodes = [helper.make_node("InstanceNormalization", ["x", "s", "t"], ["a"]),
             helper.make_node("Conv", ["a", "w", "b"], ["y"], kernel_shape=kernel, strides=strides,
                              dilations=dilations, pads=pads)]
    model = model_of(nodes, [("x", F32, [2, c, *spatial])], [("y", F32, None)], inits)
    imported = import_onnx(model)
    assert (" = matmul(w" in imported.text) == (strides[1] == dilations[1] == 1), imported.text
    x = x_of(2, c, *spatial)
    (got,) = stitch.compile(imported.text, weights=imported.weights)(**{imported.inputs["x"]: x})
    assert_close_to_sums(got, ReferenceEvaluator(model).run(None, {"x": x})[0])


@st.composite
def winograd_windows(draw):
    """A 3x3 Conv at stride 1 of a value made channels first: pads of 0-2 a side, 1-9 outputs along each
    axis (odd counts leave half a tile of F(2x2, 3x3)), 16 channels in and out, a bias or none."""
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    spatial = [draw(st.integers(1, 9)) + 2 - pads[a] - pads[a + 2] for a in range(2)]
    spatial = [max(n, 1) for n in spatial]
    return pads, spatial, draw(st.booleans())


@settings(max_examples=50 if stitch_testing.LONG else 3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(winograd_windows())
def test_a_3x3_conv_of_a_value_made_channels_first_is_winograds_and_computes_what_onnx_does(geometry):
    """Such a conv of 16 channels or more is F(2x2, 3x3) (onnx_nn.winograd): four products of the weight
    transformed at import ([4, M, C] each), the input and output tiles transformed by adds. Compiled for
    the cpu it computes what onnx's reference does, as the direct form (`winograd=False`) does."""
    from stitch.frontends import onnx_nn

    pads, spatial, with_bias = geometry
    c = m = onnx_nn.WINOGRAD_CHANNELS
    inits = [("s", x_of(c)), ("t", x_of(c)), ("w", x_of(m, c, 3, 3))] + ([("b", x_of(m))] if with_bias else [])
    nodes = [helper.make_node("InstanceNormalization", ["x", "s", "t"], ["a"]),
             helper.make_node("Conv", ["a", "w"] + (["b"] if with_bias else []), ["y"], kernel_shape=[3, 3],
                              pads=pads)]
    model = model_of(nodes, [("x", F32, [2, c, *spatial])], [("y", F32, None)], inits)
    x = x_of(2, c, *spatial)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    imported = import_onnx(model)
    assert sorted(v.shape for k, v in imported.weights.items() if k.startswith("w")) == [(4, m, c)] * 4
    assert imported.text.count(" = matmul(w") == 4, imported.text
    (got,) = stitch.compile(imported.text, weights=imported.weights)(**{imported.inputs["x"]: x})
    assert_close_to_sums(got, want)
    direct = import_onnx(model, winograd=False)
    assert direct.text.count(" = matmul(w") == 1, direct.text
    (plain,) = stitch.compile(direct.text, weights=direct.weights)(**{direct.inputs["x"]: x})
    assert_close_to_sums(plain, want)


def test_stitch_import_no_winograd_imports_the_direct_conv(tmp_path, capsys):
    """`stitch import --no-winograd`: the 3x3 conv of a value made channels first is one product again."""
    c = 16
    nodes = [helper.make_node("InstanceNormalization", ["x", "s", "t"], ["a"]),
             helper.make_node("Conv", ["a", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    model = model_of(nodes, [("x", F32, [1, c, 6, 6])], [("y", F32, None)],
                     [("s", x_of(c)), ("t", x_of(c)), ("w", x_of(c, c, 3, 3))])
    path = tmp_path / "conv.onnx"
    path.write_bytes(model.SerializeToString())
    for flags, products in (([], 4), (["--no-winograd"], 1)):
        assert main(["import", str(path), *flags]) == 0
        assert capsys.readouterr().out.count(" = matmul(w") == products


def test_a_depthwise_conv_reads_each_tap_with_a_plain_load(tmp_path):
    """SegFormer's 3x3 depthwise conv, unpadded: every tap of a window reads the input at one index
    whatever the concats of taps choose, so the select between equal sides is gone; the 3-tap sum
    is left to the C compiler (as a masked vector reduction of 3 trips it took 10x as long: 4.3 ms
    against 0.45 at 3,072 channels)."""
    from stitch.lowering.loops import leaves

    model = conv_model((1, 64, 16, 16), x_of(64, 1, 3, 3), x_of(64), group=64)
    imported = import_onnx(model)
    f = stitch.compile(imported.text, cache_dir=tmp_path, weights=imported.weights)
    assert len(f.loops.kernels) == 1
    assert not any(_selects(leaf.value) for leaf in leaves(f.loops.kernels[0].body))
    assert "simd reduction" not in f.native.source_path.read_text()
    x = x_of(1, 64, 16, 16)
    (got,) = f(**{imported.inputs["x"]: x})
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def _selects(e) -> bool:
    from stitch.lowering.loops import Op, Select

    return isinstance(e, Select) or (isinstance(e, Op) and any(_selects(a) for a in e.args))


def test_a_strided_conv_reads_its_windows_at_affine_indices_a_tap_at_a_time(tmp_path):
    """wav2vec2's feature-extractor Conv1d (3 taps, stride 2), small. The rows of the product put
    the taps first (k = tap * C + channel), so each tap's side of the windows' concat is narrowed to
    its own C values of k and reads x at an affine index (channel-major, `k % 3` selected the tap
    and every read kept div/mod: 230 -> 158 ms at 512 channels and 8,207 positions). A, computed,
    is gathered a k at a time for all 8 rows of a block (neighbouring positions of one channel's
    line), not a row at a time across channels 32 KB apart (-> 115 ms). The product walks k in
    chunks, all columns in a tile, so each row's A is computed once (-> 75 ms; onnxruntime 67)."""
    from stitch.engine.schedule.index import affine
    from stitch.lowering.loops import leaves, loads

    model = conv_model((1, 256, 8207), x_of(512, 256, 3), None, strides=[2])
    imported = import_onnx(model)
    f = stitch.compile(imported.text, cache_dir=tmp_path, weights=imported.weights)
    reads = [ld for k in f.loops.kernels for leaf in leaves(k.body) for ld in loads(leaf.value) if ld.buffer == "x"]
    assert reads and all(affine(ix) for ld in reads for ix in ld.index)
    source = f.native.source_path.read_text()
    assert "{ const int64_t st_row = p2 + 1; { const int64_t p2 = st_row; a_pre[1][r0] =" in source
    (plan,) = f.compiled.cost.plans
    assert plan.chunked and plan.tile["p1"] == 512  # k in chunks: each row's A computed once
    x = x_of(1, 256, 8207)
    (got,) = f(**{imported.inputs["x"]: x})
    assert_close_to_sums(got, ReferenceEvaluator(model).run(None, {"x": x})[0])


def test_a_grouped_conv_of_a_weight_given_at_run_time_matches_onnx():
    """The weight a graph input: laid out as [G, C/G*K, M/G] in the program, not at import."""
    x, w = x_of(1, 6, 9), x_of(4, 3, 3)
    model = model_of([helper.make_node("Conv", ["x", "w"], ["y"], group=2, pads=[1, 1])],
                     [("x", F32, list(x.shape)), ("w", F32, list(w.shape))], [("y", F32, None)])
    assert_matches_onnx(model, {"x": x, "w": w}, rtol=1e-4, atol=1e-5)


def test_conv_f16_depthwise_rounds_once():
    """Each output sums its K products in f32 and is rounded to f16 once, as ONNX's reference does."""
    x = x_of(1, 4, 16, dtype=np.float16)
    model = conv_model(x.shape, x_of(4, 1, 5, dtype=np.float16), dtype=TensorProto.FLOAT16, group=4)
    assert_matches_onnx(model, {"x": x}, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("w_shape,attrs,why", [
    ((3, 2, 5, 5), {"strides": [2]}, "Conv strides [2]"),
    ((3, 2, 5, 5), {"kernel_shape": [3, 3]}, "Conv weight [3, 2, 5, 5]"),
    ((3, 1, 5, 5), {"group": 2}, "Conv weight [3, 1, 5, 5] in 2 group(s)"),  # 3 outputs in 2 groups
    ((4, 1, 5, 5), {"group": 3}, "Conv weight [4, 1, 5, 5] in 3 group(s)"),  # 2 inputs in 3 groups
])
def test_conv_attributes_that_break_the_specification_are_invalid(w_shape, attrs, why):
    model = conv_model((1, 2, 6, 6), x_of(*w_shape), **attrs)
    with pytest.raises(OnnxImportError) as err:
        import_onnx(model)
    assert [p.kind for p in err.value.problems] == ["invalid"] and why in str(err.value)


def test_values_between_convs_are_stored_channels_last(tmp_path):
    """ResNet's pieces, small: a conv of the input, a residual block (conv, ReLU, conv, the residual
    added, ReLU), its max pool, a 1x1 conv and the global average pool. Each conv and pool of a value
    the program makes works channels last inside, and the ReLUs and the residual between are index
    maps over that: every value a kernel stores between them is channels last (no kernel transposes a
    plane, and each window's row of A is C consecutive values). The result matches onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    ch = 16
    inits = [("w0", x_of(ch, 8, 3, 3)), ("w1", x_of(ch, ch, 3, 3)), ("w2", x_of(ch, ch, 3, 3)), ("w3", x_of(8, ch, 1, 1)),
             ("b1", x_of(ch)), ("b3", x_of(8))]
    pad = {"pads": [1, 1, 1, 1]}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], **pad), helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], **pad), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], **pad), helper.make_node("Add", ["c2", "r0"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[3, 3], strides=[2, 2], **pad),
             helper.make_node("Conv", ["p", "w3", "b3"], ["c3"]), helper.make_node("GlobalAveragePool", ["c3"], ["y"])]
    model = model_of(nodes, [("x", F32, [1, 8, 12, 12])], [("y", F32, None)], inits)
    imported = import_onnx(model)
    f = stitch.compile(imported.text, cache_dir=tmp_path, weights=imported.weights)
    schedule = f.compiled.schedule
    stored = [schedule.types[cid].shape for k in schedule.kernels for cid in k.roots if cid not in schedule.outputs]
    assert stored and all(shape[-1] in (8, ch) for shape in stored), stored
    x = x_of(1, 8, 12, 12)
    (got,) = f(**{imported.inputs["x"]: x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert_close_to_sums(got, want)


def test_a_residual_read_by_the_next_block_is_stored_channels_last(tmp_path, monkeypatch):
    """ResNet-18's first stage at its size, on a machine of 512 KiB of L2 (the Zen 3 its figures come
    from): the max pool's output is read by the block's conv and by its residual add, and the block's
    output (ReLU of the conv plus the pool) by the next conv and its add. Both are stored channels last
    only once rules/algebra.rules's transpose-out rules give an add and a ReLU of transposed operands a
    channels-last value: without them the block's kernel stored its output channels first
    ([1, 64, 56, 56]). Each 3x3 conv reads its padded input ([1, 58, 58, 64]) at its row taps through
    index maps, not a copy of its rows stacked per row tap ([1, 56, 3, 58, 64], three times the bytes,
    when the row taps were a concat of slices), and walks k (576) in chunks of whole row taps (192:
    a chunk of 288 divides every element's k by 192). Matches onnxruntime."""
    from stitch.engine.schedule import target

    ort = pytest.importorskip("onnxruntime")
    caches = {1: 32 * 1024, 2: 512 * 1024, 3: 32 * 1024 * 1024}
    monkeypatch.setattr(target, "machine_cache_bytes", lambda level, root=None: caches.get(level))
    ch, pad = 64, {"pads": [1, 1, 1, 1]}
    inits = [(f"w{i}", x_of(ch, ch, 3, 3) * 0.05) for i in range(3)] + [("eye", np.eye(ch, dtype=np.float32)[..., None, None])]
    nodes = [helper.make_node("Conv", ["x", "eye"], ["i"]), helper.make_node("Relu", ["i"], ["a"]),
             helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[3, 3], strides=[2, 2], **pad),
             helper.make_node("Conv", ["p", "w0"], ["c0"], **pad), helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], **pad), helper.make_node("Add", ["c1", "p"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["r1"]), helper.make_node("Conv", ["r1", "w2"], ["c2"], **pad),
             helper.make_node("Add", ["c2", "r1"], ["y"])]
    model = model_of(nodes, [("x", F32, [1, ch, 112, 112])], [("y", F32, None)], inits)
    imported = import_onnx(model)
    f = stitch.compile(imported.text, cache_dir=tmp_path, weights=imported.weights)
    schedule = f.compiled.schedule
    stored = [schedule.types[cid].shape for k in schedule.kernels for cid in k.roots if cid not in schedule.outputs]
    assert stored and all(shape[-1] == ch for shape in stored), stored
    assert (1, 58, 58, ch) in stored and all(len(shape) <= 4 for shape in stored), stored
    chunks = [p.tile[p.chunked] for p in f.compiled.cost.plans if p.chunked]
    assert chunks and all(c % (3 * ch) == 0 for c in chunks), chunks
    x = x_of(1, ch, 112, 112)
    (got,) = f(**{imported.inputs["x"]: x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert_close_to_sums(got, want)


def test_a_grouped_conv_runs_the_micro_kernel_one_group_per_tile():
    """wav2vec2's positional Conv, small: 4 groups of 48 channels over a transposed input, padded.
    The product's columns are the output channels modulo 48: its accumulator keeps them innermost
    and its tiles stay within a group (A, the windows, is one group's), so the register-blocked
    micro-kernel runs it. The windows' padding (a concat) counts as an index map for chunking, so
    the plan walks k (3,072) in chunks and the micro-kernel computes each chunk's windows for 8 rows
    (wav2vec2's positional conv: 48 -> 14.8 ms, onnxruntime 18; before, A for all of k per tile of
    16 columns)."""
    w = x_of(192, 48, 64)
    model = model_of([helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
                      helper.make_node("Conv", ["xt", "w"], ["y"], group=4, pads=[32, 32])],
                     [("x", F32, [1, 64, 192])], [("y", F32, None)], [("w", w)])
    x = x_of(1, 64, 192)
    imported = import_onnx(model)
    f = stitch.compile(imported.text, target="cpu", weights=imported.weights)
    source = f.native.source_path.read_text()
    assert "c0_0 = st_fma_f32" in source and f.compiled.cost.plans[0].chunked
    (got,) = f(**{imported.inputs["x"]: x})
    assert_close_to_sums(got, ReferenceEvaluator(model).run(None, {"x": x})[0])


def test_a_patch_embedding_compiles_to_one_product_of_the_bound_weight():
    """ViT's patch embedding on the CPU: the reshaped input times the weight bound at compile time.
    (16 output channels: with 8, the output's channels, tiled for 4 tiles, left the product 1
    column a tile, which runs a lane at a time, and a separate transpose is the cheaper plan.)"""
    x_shape, _, _, attrs = CONVS["patches"]
    w_shape = (16, 3, 16, 16)
    model = conv_model(x_shape, x_of(*w_shape), x_of(w_shape[0]), **attrs)
    x = x_of(*x_shape)
    imported = import_onnx(model)
    f = stitch.compile(imported.text, target="cpu", weights=imported.weights)
    assert len(f.compiled.schedule.kernels) == 1
    (got,) = f(**{imported.inputs["x"]: x})
    assert_close_to_sums(got, ReferenceEvaluator(model).run(None, {"x": x})[0])


@pytest.mark.parametrize("target,want", [([0, -1], (3, 20)), ([-1], (60,)), ([5, 0, 3], (5, 4, 3))])
def test_reshape_target_from_an_initializer(target, want):
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    model = model_of([node], [("x", F32, [3, 4, 5])], [("y", F32, None)], [("shape", np.array(target, np.int64))])
    imported = import_onnx(model)
    assert imported.program.funcs[0].results[0].shape == want
    assert imported.weights == {}  # read as a shape, never a parameter
    assert_matches_onnx(model, {"x": x_of(3, 4, 5)})


def test_axes_given_as_a_graph_input_need_a_constant():
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)
    model = model_of([node], [("x", F32, [3, 4]), ("axes", TensorProto.INT64, [1])], [("y", F32, None)])
    with pytest.raises(OnnxImportError) as err:
        import_onnx(model)
    assert err.value.fixable_inputs == ["axes"]
    assert "known only at run time" in str(err.value)
    axes = np.array([1], np.int64)
    x = x_of(3, 4)
    (got,) = run_imported(model, {"x": x}, constant_inputs={"axes": axes})
    np.testing.assert_allclose(got, x.sum(axis=1), rtol=1e-6)


def test_noop_with_empty_axes_is_the_identity():
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], noop_with_empty_axes=1)
    model = model_of([node], [("x", F32, [3, 4])], [("y", F32, None)], [("axes", np.array([], np.int64))])
    x = x_of(3, 4)
    np.testing.assert_array_equal(run_imported(model, {"x": x})[0], x)


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic_ops(op):
    node = helper.make_node(op, ["a", "b", "c"], ["y"])
    model = model_of([node], [("a", F32, [3, 4]), ("b", F32, [4]), ("c", F32, [1, 4])], [("y", F32, None)])
    assert_matches_onnx(model, {"a": x_of(3, 4), "b": x_of(4), "c": x_of(1, 4)})


@pytest.mark.parametrize("op", ["Less", "Greater", "Equal", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons_and_where(op):
    cmp = helper.make_node(op, ["a", "b"], ["c"])
    sel = helper.make_node("Where", ["c", "a", "b"], ["y"])
    model = model_of([cmp, sel], [("a", F32, [3, 4]), ("b", F32, [4])],
                     [("y", F32, None), ("c", TensorProto.BOOL, None)])
    a = np.round(x_of(3, 4))
    b = np.round(x_of(4))
    b[0] = np.nan  # NaN compares false, also in LessOrEqual
    assert_matches_onnx(model, {"a": a, "b": b})


@pytest.mark.parametrize("x_type,y_type", [(np.float32, np.int64), (np.int64, np.int64), (np.int32, np.float32)])
def test_pow_keeps_the_base_dtype(x_type, y_type):
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    xt, yt = (helper.np_dtype_to_tensor_dtype(np.dtype(t)) for t in (x_type, y_type))
    model = model_of([node], [("x", xt, [4]), ("y", yt, [4])], [("z", xt, None)])
    assert_matches_onnx(model, {"x": np.array([1, 2, 3, 4], x_type), "y": np.array([2, 3, 1, 0], y_type)})


def test_expand_unsqueeze_cast_castlike():
    nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["u"]), helper.make_node("Expand", ["u", "shape"], ["e"]),
             helper.make_node("Cast", ["e"], ["c"], to=TensorProto.DOUBLE),
             helper.make_node("CastLike", ["c", "x"], ["y"])]
    inits = [("ax", np.array([0], np.int64)), ("shape", np.array([2, 1, 4], np.int64))]
    model = model_of(nodes, [("x", F32, [3, 4])], [("y", F32, None)], inits)
    assert_matches_onnx(model, {"x": x_of(3, 4)})


def test_constants_become_literals_or_weights():
    """A scalar Constant is a literal; a tensor Constant is a parameter whose value comes with the import."""
    nodes = [helper.make_node("Constant", [], ["half"], value=numpy_helper.from_array(np.array(0.5, np.float32))),
             helper.make_node("Constant", [], ["row"], value=numpy_helper.from_array(np.arange(4, dtype=np.float32))),
             helper.make_node("Mul", ["x", "half"], ["m"]), helper.make_node("Add", ["m", "row"], ["y"])]
    model = model_of(nodes, [("x", F32, [3, 4])], [("y", F32, None)])
    imported = import_onnx(model)
    assert "mul(x, 0.5)" in imported.text
    assert list(imported.weights) == ["row"]
    assert_matches_onnx(model, {"x": x_of(3, 4)})


def test_fold_constants_turns_small_initializers_into_literals():
    node = helper.make_node("Mul", ["x", "s"], ["y"])
    model = model_of([node], [("x", F32, [2])], [("y", F32, None)], [("s", np.array([2.0, 3.0], np.float32))])
    assert "s: f32[2]" in import_onnx(model).text
    folded = import_onnx(model, fold_constants=True)
    assert "s: f32[2]" not in folded.text and "s" not in folded.weights


def test_a_scalar_initializer_is_a_literal_unless_constants_are_kept():
    """The exporters keep every Python scalar of a model as an initializer (GELU's 3.0): by default a
    one-element float initializer is a literal, so the algebra rules see it; --keep-constants keeps it a
    parameter a user may replace."""
    node = helper.make_node("Pow", ["x", "s"], ["y"])
    model = model_of([node], [("x", F32, [3])], [("y", F32, None)], [("s", np.array(3.0, np.float32))])
    imported = import_onnx(model)
    assert imported.weights == {} and "pow(x, 3.0)" in imported.text
    kept = import_onnx(model, fold_constants=False)
    assert list(kept.weights) == ["s"] and "pow(x, s)" in kept.text
    assert_matches_onnx(model, {"x": x_of(3)})


def test_shape_arithmetic_is_evaluated_at_import_time():
    """Shape -> Concat -> Reshape (the pattern of expanded function bodies) needs no run-time shape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], end=1),
             helper.make_node("Constant", [], ["minus1"], value=numpy_helper.from_array(np.array([-1], np.int64))),
             helper.make_node("Concat", ["s", "minus1"], ["t"], axis=0), helper.make_node("Reshape", ["x", "t"], ["y"])]
    model = model_of(nodes, [("x", F32, [3, 4, 5])], [("y", F32, None)])
    assert import_onnx(model).program.funcs[0].results[0].shape == (3, 20)


def test_outputs_select_a_subgraph():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Cos", ["r"], ["y"])]
    model = model_of(nodes, [("x", F32, [3])], [("y", F32, None)])
    imported = import_onnx(model, outputs=["r"], entry="part")
    assert imported.text.startswith("func part(x: f32[3]) -> f32[3]")


def test_names_are_sanitized_and_round_trip():
    nodes = [helper.make_node("Relu", ["in.put:0"], ["1st out"])]
    model = model_of(nodes, [("in.put:0", F32, [2])], [("1st out", F32, None)])
    imported = import_onnx(model)
    assert imported.inputs == {"in.put:0": "in_put_0"}
    assert print_program(parse_program(imported.text)) == imported.text


def test_a_checker_error_at_the_end_of_an_import_shows_its_line(monkeypatch):
    """(An importer bug: the func it built fails the checker.) The import checks the func it built, and
    raises the error again from its text, at its line, as it did when it parsed every import back."""
    from stitch.engine.ir.program import Assign, Call, Var
    from stitch.frontends.onnx_builder import Builder

    named = Builder.func_name

    def broken(self, name):
        self.body.append(Assign("bad", Call("relu", (Var("nowhere"),))))
        return named(self, name)

    monkeypatch.setattr(Builder, "func_name", broken)
    model = model_of([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [2])], [("y", F32, None)])
    with pytest.raises(StitchError, match="nowhere") as err:
        import_onnx(model, entry="f")
    assert err.value.pos.line == 3 and err.value.pos.file == "<import of f>"
    assert "bad = relu(nowhere)" in str(err.value)


# -- errors -------------------------------------------------------------------


def test_every_unsupported_node_is_listed_at_once():
    nodes = [helper.make_node("Cos", ["x"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("ConvTranspose", ["b", "b"], ["c"], name="second"), helper.make_node("Relu", ["x"], ["d"])]
    model = model_of(nodes, [("x", F32, [3])], [("c", F32, None), ("d", F32, None)])
    with pytest.raises(OnnxImportError) as err:
        import_onnx(model)
    problems = [(p.node, p.op_type, p.kind) for p in err.value.problems]
    assert problems == [("first", "Cos", "op"), ("second", "ConvTranspose", "op")]
    assert "Cos 'first'" in str(err.value) and "ConvTranspose 'second'" in str(err.value)


def test_unnamed_dynamic_shapes_and_unsupported_dtypes_are_listed():
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Add", ["u", "u"], ["b"]),
             helper.make_node("Cast", ["a"], ["c"], to=TensorProto.UINT16, name="narrow")]
    model = model_of(nodes, [("x", F32, [None, 4]), ("u", TensorProto.UINT16, [4])],
                     [("b", TensorProto.UINT16, None), ("c", TensorProto.UINT16, None)])
    with pytest.raises(OnnxImportError) as err:
        import_onnx(model)
    kinds = {(p.node, p.op_type, p.kind) for p in err.value.problems}
    assert kinds == {("a", "Add", "shape"), ("b", "Add", "dtype")}  # Cast is not reached: its input already failed
    assert "input 'x' has a dynamic dimension with no name (no dim_param)" in str(err.value)
    assert "UINT16 (stitch has float, float16, double, int8, uint8, int32, int64, bool)" in str(err.value)


def test_integer_div_is_an_unsupported_dtype():
    node = helper.make_node("Div", ["a", "b"], ["y"], name="idiv")
    model = model_of([node], [("a", TensorProto.INT32, [3]), ("b", TensorProto.INT32, [3])],
                     [("y", TensorProto.INT32, None)])
    with pytest.raises(OnnxImportError) as err:
        import_onnx(model)
    assert [(p.node, p.kind) for p in err.value.problems] == [("idiv", "dtype")]


def test_zero_size_dimension_is_an_unsupported_shape():
    model = single("Relu", (3, 0))
    with pytest.raises(OnnxImportError, match="zero-size"):
        import_onnx(model)


# -- the command line ---------------------------------------------------------


def test_cli_import_writes_program_and_weights(tmp_path, capsys):
    w = x_of(8, 4)
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    path = tmp_path / "m.onnx"
    onnx.save(model_of([node], [("x", F32, [2, 8])], [("y", F32, None)], [("w", w)]), path)
    out, weights = tmp_path / "m.ir", tmp_path / "w.npz"
    assert main(["import", str(path), "-o", str(out), "--weights", str(weights), "--entry", "mm"]) == 0
    assert out.read_text().startswith("func mm(x: f32[2, 8], w: f32[8, 4])")
    with np.load(weights) as data:
        np.testing.assert_array_equal(data["w"], w)
    assert main(["check", str(out)]) == 0


def test_cli_import_constant_input(tmp_path, capsys):
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    path = tmp_path / "m.onnx"
    onnx.save(model_of([node], [("x", F32, [2, 6]), ("shape", TensorProto.INT64, [2])], [("y", F32, None)]), path)
    assert main(["import", str(path)]) == 1
    assert "graph input 'shape', known only at run time" in capsys.readouterr().err
    np.save(tmp_path / "s.npy", np.array([3, 4], np.int64))
    assert main(["import", str(path), "--constant", f"shape={tmp_path / 's.npy'}"]) == 0
    assert "reshape(x, shape=[3, 4])" in capsys.readouterr().out


@pytest.mark.parametrize("content,message", [(b"\x01\x02garbage", "not a readable ONNX model"),
                                             (None, "no such file")])
def test_cli_import_bad_files(tmp_path, capsys, content, message):
    path = tmp_path / "m.onnx"
    if content is not None:
        path.write_bytes(content)
    assert main(["import", str(path)]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_import_without_onnx_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx raises ImportError
    assert main(["import", "model.onnx"]) == 1
    assert "pip install 'stitch[onnx]'" in capsys.readouterr().err


def test_a_constant_for_no_graph_input_is_an_error_naming_it(tmp_path, capsys):
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    path = tmp_path / "m.onnx"
    onnx.save(model_of([node], [("x", F32, [2, 6]), ("shape", TensorProto.INT64, [2])], [("y", F32, None)]), path)
    np.save(tmp_path / "s.npy", np.array([3, 4], np.int64))
    assert main(["import", str(path), "--constant", f"shape={tmp_path / 's.npy'}", "--constant",
                 f"shap={tmp_path / 's.npy'}"]) == 1
    err = capsys.readouterr().err
    assert "names 'shap', no graph input" in err and "its graph inputs: x, shape" in err


def test_cli_import_bad_constant_option(tmp_path, capsys):
    assert main(["import", "m.onnx", "--constant", "shape"]) == 1
    assert "--constant expects NAME=VALUES.npy" in capsys.readouterr().err


def test_cli_import_unsupported_op(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    nodes = [helper.make_node("Cos", ["x"], ["a"], name="c1"), helper.make_node("Sin", ["x"], ["b"], name="s1")]
    onnx.save(model_of(nodes, [("x", F32, [3])], [("a", F32, None), ("b", F32, None)]), path)
    assert main(["import", str(path)]) == 1
    err = capsys.readouterr().err
    assert "2 node(s)" in err and "Cos 'c1'" in err and "Sin 's1'" in err


# -- a model: a transformer block's layer norm and MLP ---------------------------


def transformer_mlp_model(d=32, hidden=64, tokens=8):
    """LayerNorm -> MatMul + bias -> Gelu -> Gemm -> residual add, with weights as initializers."""
    weights = [("gamma", x_of(d)), ("beta", x_of(d)), ("w1", x_of(d, hidden) * 0.2), ("b1", x_of(hidden)),
               ("w2", x_of(hidden, d) * 0.2), ("b2", x_of(d))]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["ln", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Gelu", ["hb"], ["g"], approximate="tanh"),
        helper.make_node("Gemm", ["g", "w2", "b2"], ["o"]),
        helper.make_node("Add", ["x", "o"], ["y"]),
    ]
    return model_of(nodes, [("x", F32, [tokens, d])], [("y", F32, [tokens, d])], weights, opset=21)


@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_transformer_block_mlp_compiles_and_matches_onnx(target):
    model = transformer_mlp_model()
    x = x_of(8, 32)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    imported = import_onnx(model, entry="block")
    program = stitch.compile(imported.text, target=target)
    (got,) = program(x=x, **imported.weights)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(program.compiled.schedule.kernels) < len(imported.program.funcs[0].body)  # something fused


# -- invalid models and the importer's own defects (issues 15 and 18) ----------------------------------------


@pytest.mark.parametrize("node,shape,message", [
    (helper.make_node("Softmax", ["x"], ["y"], axis=3, name="n"), [2, 3], "axis 3 is out of range for a tensor of rank 2"),
    (helper.make_node("Softmax", ["x"], ["y"], axis=[1, 2], name="n"), [2, 3], "attribute 'axis' is INTS"),
    (helper.make_node("Cast", ["x"], ["y"], to=-3, name="n"), [2, 3], "-3 is not an ONNX data type"),
    (helper.make_node("ReduceMean", ["x"], ["y"], axes=[1, -1], name="n"), [2, 3], "axis 1 is given twice"),
    (helper.make_node("Squeeze", ["x"], ["y"], axes=[0], name="n"), [2, 3], "not all of length 1"),
])
def test_invalid_nodes_are_errors_naming_the_node(node, shape, message):
    model = model_of([node], [("x", F32, shape)], [("y", F32, None)], opset=13 if node.op_type != "Squeeze" else 11)
    with pytest.raises(OnnxImportError) as err:
        import_onnx(model)
    assert [p.kind for p in err.value.problems] == ["invalid"]
    assert f"{node.op_type} 'n': invalid model" in str(err.value) and message in str(err.value)


def test_unreadable_initializers_are_errors_naming_them():
    model = model_of([helper.make_node("Add", ["x", "w"], ["y"])], [("x", F32, [6])], [("y", F32, None)],
                     [("w", x_of(6))])
    model.graph.initializer[0].data_type = TensorProto.DOUBLE  # 24 bytes: 3 doubles, not 6
    with pytest.raises(OnnxImportError, match="initializer 'w': invalid model: the initializer cannot be read"):
        import_onnx(model)
    model.graph.initializer[0].data_type = F32
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:5]
    with pytest.raises(OnnxImportError, match="initializer 'w'"):
        import_onnx(model)


def test_a_model_without_an_opset_import_is_an_error(tmp_path, capsys):
    model = single("Relu", (2,))
    del model.opset_import[:]
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert main(["import", str(path)]) == 1
    assert "imports no version of the default ONNX domain" in capsys.readouterr().err


def test_valid_models_once_refused_now_import():
    """Gemm with beta != 1 and an initializer C, LeakyRelu(alpha=nan), a graph named like an IR keyword."""
    gemm = single("Gemm", (3, 4), 13, [("b", x_of(4, 5))], beta=0.5)
    gemm.graph.input.pop()  # b an initializer...
    c = x_of(5)
    gemm.graph.initializer.extend([numpy_helper.from_array(x_of(4, 5), "b"), numpy_helper.from_array(c, "c")])
    gemm.graph.node[0].input.append("c")  # ...and C too
    assert_matches_onnx(gemm, {"x": x_of(3, 4)})
    x = x_of(3, 4)
    (got,) = run_imported(single("LeakyRelu", (3, 4), alpha=float("nan")), {"x": x})
    np.testing.assert_array_equal(np.isnan(got), x < 0)
    named = single("Relu", (3,))
    named.graph.name = "func"
    imported = import_onnx(named)
    assert imported.text.startswith("func func_(x: f32[3])")
    assert print_program(parse_program(imported.text)) == imported.text


# -- models onnxruntime refuses are refused too (issue 52, item 6) ----------------------------------


def test_an_initializer_with_a_negative_dimension_is_invalid():
    w = numpy_helper.from_array(np.ones(6, np.float32), "w")
    w.dims[:] = [-6]
    node = helper.make_node("Add", ["x", "w"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F32, [6])],
                              [helper.make_tensor_value_info("y", F32, None)], [w])
    with pytest.raises(OnnxImportError, match=r"initializer 'w'.*negative dimension in its shape \[-6\]"):
        import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))


def test_an_op_of_a_later_opset_is_invalid_naming_both_opsets():
    node = helper.make_node("Gelu", ["x"], ["y"], name="g1")
    with pytest.raises(OnnxImportError, match=r"Gelu 'g1'.*does not exist at the model's opset 11 \(ONNX added it "
                                              r"in opset 20\)"):
        import_onnx(model_of([node], [("x", F32, [4])], [("y", F32, None)], opset=11))


@pytest.mark.parametrize("opset", [0, -1, 99])
def test_an_opset_onnx_does_not_have_is_an_error(opset):
    node = helper.make_node("Relu", ["x"], ["y"])
    with pytest.raises(StitchError, match=f"the model's opset {opset} is not an ONNX opset"):
        import_onnx(model_of([node], [("x", F32, [4])], [("y", F32, None)], opset=opset))


def test_an_input_the_opset_does_not_have_is_invalid():
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="r")  # axes became an input at opset 18
    model = model_of([node], [("x", F32, [3, 4])], [("y", F32, None)], [("axes", np.array([1], np.int64))], opset=13)
    with pytest.raises(OnnxImportError, match=r"ReduceMean 'r'.*takes at most 1 input\(s\) at opset 13, got 2"):
        import_onnx(model)


def test_axes_that_are_no_list_are_invalid():
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="r")
    model = model_of([node], [("x", F32, [3, 4])], [("y", F32, None)], [("axes", np.array(1, np.int64))])
    with pytest.raises(OnnxImportError, match=r"ReduceSum 'r'.*axes must be a 1-D tensor, got 0-D"):
        import_onnx(model)


def test_a_dynamic_dimension_is_a_symbol_or_fixed_by_dim(tmp_path, capsys):
    """A dim_param becomes a symbol of the func (its range from --dim-range); --dim imports at a fixed size."""
    node = helper.make_node("Transpose", ["src"], ["y"], perm=[1, 0], name="t")
    path = tmp_path / "m.onnx"
    onnx.save(model_of([node], [("src", F32, ["seq", 4])], [("y", F32, [4, "seq"])]), path)
    assert main(["import", str(path)]) == 0
    assert "func g[seq: 1..2147483647](src: f32[seq, 4]) -> f32[4, seq]" in capsys.readouterr().out
    assert main(["import", str(path), "--dim-range", "seq=1..1024"]) == 0
    assert "func g[seq: 1..1024](src: f32[seq, 4]) -> f32[4, seq]" in capsys.readouterr().out
    assert main(["import", str(path), "--dim", "seq=64"]) == 0
    assert "func g(src: f32[64, 4]) -> f32[4, 64]" in capsys.readouterr().out
    assert main(["import", str(path), "--dim", "sq=64"]) == 1
    assert "names 'sq', no dynamic dimension" in capsys.readouterr().err
    x = RNG.standard_normal((7, 4)).astype(np.float32)
    (got,) = run_imported(onnx.load(path), {"src": x}, dims={"seq": 7})
    np.testing.assert_array_equal(got, x.T)
