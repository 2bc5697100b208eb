"""ONNX's quantization operators imported (frontends/onnx_quant.py): DequantizeLinear, QuantizeLinear,
DynamicQuantizeLinear, MatMulInteger, QLinearMatMul and com.microsoft GatherBlockQuantized.

- Every committed fixture of tests/fixtures/models/quantized/ (onnxruntime 1.32's recorded outputs) is
  imported, type-checked and run on the reference interpreter; MatMulNBits' are also here
  (frontends/onnx_quantized.py; compiled in test_onnx_matmul_nbits.py).
- Hand-built cases (onnx.helper) cover what the fixtures do not: blocked and float16 QuantizeLinear with
  ties, NaN and infinities, run-time and int32 data, float16 scales, 4- and 2-bit data of odd sizes, a
  dequantized weight read by MatMul, batched MatMulInteger with a zero point per row, QLinearMatMul with
  run-time scales, DynamicQuantizeLinear of zeros, GatherBlockQuantized of 2 and 8 bits with indices out
  of range. Their expected outputs come from tests/quantized_reference.py's numpy functions (checked
  against onnxruntime there) or a numpy formula; with onnxruntime installed, each is checked against it too.
- The single-operator fixtures and the hand-built cases, merged into one model, are compiled once per
  target (cpu, accel) and compared with the expected outputs.

Tolerance: none. Every output of these operators is an integer computed exactly or one float rounding of
an exact value ((q - zero) * scale: the difference is a small integer; x / scale rounded by the same f32
division; acc * M with acc an exact int32), so stitch and onnxruntime agree to the bit. The exceptions
are float sums: the dequantized weight's MatMul and the GPT-2 models, whose f32 sums run in other orders.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import stitch  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from quantized_reference import (  # noqa: E402
    dequantize_linear,
    dynamic_quantize_linear,
    matmul_integer,
    qlinear_matmul,
    quantize_linear,
)
from stitch.engine.ir.check import check_program  # noqa: E402
from stitch.engine.ir.interp import evaluate  # noqa: E402
from stitch.frontends.onnx_import import OnnxImportError, import_onnx  # noqa: E402
from stitch_testing import QUANTIZED, needs_cc, quantized_fixture  # noqa: E402

STEMS = sorted(p.stem for p in QUANTIZED.glob("*.onnx"))
WHOLE_MODELS = [s for s in STEMS if s.startswith("gpt2")]
SINGLE = [s for s in STEMS if s not in WHOLE_MODELS and not s.startswith("matmul_nbits")]
RTOL, ATOL = 1e-3, 1e-4  # the GPT-2 models' float parts, as tests/test_onnx_models.py
RNG = np.random.default_rng(7)


def interpret(imported, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    assert imported.program == imported.checked  # the text parses back to the program the import checked
    graph = next(iter(check_program(imported.program).values()))
    inputs = {imported.inputs[k]: v for k, v in feeds.items() if k in imported.inputs}
    with np.errstate(all="ignore"):
        return evaluate(graph, inputs | {k: np.asarray(v) for k, v in imported.weights.items()})


def assert_matches(got, want, atol: float = 0.0, what: str = ""):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.dtype, want.shape)
    if atol == 0:
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=atol, err_msg=what)


# -- hand-built cases ----------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    model: object
    feeds: dict
    want: list
    atol: float = 0.0  # absolute, against the largest |output|: a float sum
    ort: bool = True  # onnxruntime runs it (False: it refuses what the ONNX specification allows)
    ort_config: dict = field(default_factory=dict)


def model_of(nodes, inputs, outputs, inits=(), opset=21, tensors=()):
    """inputs/outputs: (name, elem_type, shape); inits: (name, array); tensors: TensorProtos (4- and 2-bit)."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              [numpy_helper.from_array(a, n) for n, a in inits] + list(tensors))
    opsets = [helper.make_opsetid("", opset)]
    if any(n.domain == "com.microsoft" for n in nodes):
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    return helper.make_model(graph, opset_imports=opsets)


def packed_tensor(name: str, elem_type: int, values: np.ndarray):
    """A 4- or 2-bit initializer of these integer values (onnx packs them)."""
    return helper.make_tensor(name, elem_type, list(values.shape), values.reshape(-1).tolist())


def ties_and_edges(shape, scale: float) -> np.ndarray:
    """x / scale: exact ties k + 1/2, values far beyond every range, NaN, +-inf, -0.0, and normal values."""
    x = (RNG.standard_normal(shape) * 60 * scale).astype(np.float32)
    flat = x.reshape(-1)
    flat[: 2 * 150:2] = (np.arange(-75, 75) + 0.5) * scale
    flat[-7:] = [np.nan, np.inf, -np.inf, -0.0, 3e38, -3e38, 1e9]
    return x


def with_nan_as_minimum(want: np.ndarray, x: np.ndarray) -> np.ndarray:
    """onnxruntime quantizes NaN to the type's minimum (the reference leaves NaN out)."""
    want = want.copy()
    want[np.isnan(x)] = np.iinfo(want.dtype).min
    return want


def case_quantize_blocked():
    x = ties_and_edges((8, 48), 0.25)
    scale = np.array([0.25, 0.5, 0.125], np.float32)[RNG.integers(0, 3, (8, 3))]
    zero = RNG.integers(-20, 20, (8, 3)).astype(np.int8)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=16)
    model = model_of([node], [("x", TensorProto.FLOAT, [8, 48])], [("y", TensorProto.INT8)], [("s", scale), ("z", zero)])
    want = with_nan_as_minimum(quantize_linear(x, scale, zero, axis=1, block_size=16), x)
    return Case("quantize_blocked_i8", model, {"x": x}, [want])


def case_quantize_f16():
    """onnxruntime divides float16 in float32 (checked here: in float16 some quotients round otherwise)."""
    x = (RNG.standard_normal((6, 40)) * 4).astype(np.float16)
    x.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, 0.75, -0.25, 1.25]
    scale = (RNG.random(40) * 0.1 + 0.01).astype(np.float16)
    scale[:3] = 0.5
    zero = RNG.integers(0, 256, 40).astype(np.uint8)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)
    model = model_of([node], [("x", TensorProto.FLOAT16, [6, 40])], [("y", TensorProto.UINT8)], [("s", scale), ("z", zero)])
    want = with_nan_as_minimum(quantize_linear(x.astype(np.float32), scale.astype(np.float32), zero, axis=1), x)
    return Case("quantize_f16_per_axis_u8", model, {"x": x}, [want])


def case_dequantize_runtime():
    x = RNG.integers(0, 256, (6, 40)).astype(np.uint8)
    scale, zero = (RNG.random(6) * 0.1).astype(np.float32), RNG.integers(0, 256, 6).astype(np.uint8)
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=0)
    model = model_of([node], [("x", TensorProto.UINT8, [6, 40])], [("y", TensorProto.FLOAT)], [("s", scale), ("z", zero)])
    return Case("dequantize_runtime_u8", model, {"x": x}, [dequantize_linear(x, scale, zero, axis=0)])


def case_dequantize_i32():
    """A quantized bias: int32 levels beyond 2**24, subtracted as int32 and rounded once by the cast."""
    x = RNG.integers(-(2 ** 30), 2 ** 30, 72).astype(np.int32)
    scale = np.float32(3.1e-5)
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"])
    model = model_of([node], [], [("y", TensorProto.FLOAT)], [("x", x), ("s", np.array(scale))])
    return Case("dequantize_i32", model, {}, [(x.astype(np.float32) * scale).astype(np.float32)])


def case_dequantize_f16_scale():
    x = RNG.integers(-128, 128, (6, 40)).astype(np.int8)
    scale, zero = (RNG.random(40) * 0.1).astype(np.float16), RNG.integers(-128, 128, 40).astype(np.int8)
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)
    model = model_of([node], [], [("y", TensorProto.FLOAT16)], [("x", x), ("s", scale), ("z", zero)])
    want = ((x.astype(np.float32) - zero) * scale.astype(np.float32)).astype(np.float16)  # exact, then one rounding
    return Case("dequantize_f16_scale", model, {}, [want])


def case_dequantize_packed(elem_type: int, shape, axis: int, block: int, opset: int, name: str):
    """4- or 2-bit data and zero points, elements packed over the whole tensor (rows of odd length too)."""
    bits, signed = {TensorProto.INT4: (4, True), TensorProto.UINT4: (4, False), TensorProto.INT2: (2, True),
                    TensorProto.UINT2: (2, False)}[elem_type]
    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
    x = RNG.integers(lo, hi, shape)
    pshape = (shape[axis],) if not block else tuple(-(-d // block) if k == axis else d for k, d in enumerate(shape))
    scale, zero = (RNG.random(pshape) * 0.1).astype(np.float32), RNG.integers(lo, hi, pshape)
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], **attrs)
    model = model_of([node], [], [("y", TensorProto.FLOAT)], [("s", scale)], opset=opset,
                     tensors=[packed_tensor("x", elem_type, x), packed_tensor("z", elem_type, zero)])
    return Case(name, model, {}, [dequantize_linear(x, scale, zero, axis=axis, block_size=block)])


def case_dequantize_scalar_int4():
    x = RNG.integers(-8, 8, (5, 7))
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])
    model = model_of([node], [], [("y", TensorProto.FLOAT)], [("s", np.array(0.37, np.float32))],
                     tensors=[packed_tensor("x", TensorProto.INT4, x),
                              helper.make_tensor("z", TensorProto.INT4, [], [-3])])
    return Case("dequantize_int4_odd_per_tensor", model, {}, [dequantize_linear(x, np.float32(0.37), np.int32(-3))])


def dequantized_matmul():
    """x @ DequantizeLinear(int4 [64, 48] in blocks of 32 along K, int4 zero points): the product reads the
    packed bytes. onnxruntime fuses the pair into MatMulNBits at accuracy_level 4 by default
    (`session.qdq_matmulnbits_accuracy_level`), which rounds x to int8 per block; at 0 it computes in f32."""
    w, zero = RNG.integers(-8, 8, (64, 48)), RNG.integers(-8, 8, (2, 48))
    scale = (RNG.random((2, 48)) * 0.05 + 0.01).astype(np.float32)
    x = RNG.standard_normal((4, 64)).astype(np.float32)
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"], axis=0, block_size=32),
             helper.make_node("MatMul", ["x", "wd"], ["y"])]
    model = model_of(nodes, [("x", TensorProto.FLOAT, [4, 64])], [("y", TensorProto.FLOAT)], [("s", scale)],
                     tensors=[packed_tensor("w", TensorProto.INT4, w), packed_tensor("z", TensorProto.INT4, zero)])
    weight = dequantize_linear(w, scale, zero, axis=0, block_size=32)
    return model, x, (x.astype(np.float64) @ weight.astype(np.float64)).astype(np.float32)


def case_dequantized_matmul():
    """f32 sums of 64 products in different orders: within 1e-6 of the largest output (measured 0 against
    onnxruntime at accuracy level 0, up to 4e-7 against the float64 product)."""
    model, x, want = dequantized_matmul()
    return Case("dequantize_int4_matmul", model, {"x": x}, [want], atol=1e-6 * float(np.abs(want).max()),
                ort_config={"session.qdq_matmulnbits_accuracy_level": "0"})


def case_matmul_integer_batched():
    """a i8 [2, 3, 40] with a zero point per row (the specification allows it; onnxruntime refuses it)."""
    a = RNG.integers(-128, 128, (2, 3, 40)).astype(np.int8)
    b, za, zb = (RNG.integers(0, 256, (40, 24)).astype(np.uint8), RNG.integers(-128, 128, 3).astype(np.int8),
                 RNG.integers(0, 256, 24).astype(np.uint8))
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    model = model_of([node], [("a", TensorProto.INT8, [2, 3, 40])], [("y", TensorProto.INT32)],
                     [("b", b), ("za", za), ("zb", zb)])
    return Case("matmul_integer_i8_u8_per_row", model, {"a": a}, [matmul_integer(a, b, za, zb)], ort=False)


def case_matmul_integer_runtime_zero():
    a, b = RNG.integers(-128, 128, (5, 40)).astype(np.int8), RNG.integers(-128, 128, (40, 24)).astype(np.int8)
    za = np.array(-7, np.int8)
    node = helper.make_node("MatMulInteger", ["a", "b", "za"], ["y"])
    model = model_of([node], [("a", TensorProto.INT8, [5, 40]), ("za", TensorProto.INT8, [])],
                     [("y", TensorProto.INT32)], [("b", b)])
    return Case("matmul_integer_i8_i8_runtime_zero", model, {"a": a, "za": za}, [matmul_integer(a, b, za)])


def case_qlinear_runtime_scales():
    """The multiplier (a_scale * b_scale) / y_scale computed by the program (scales given at run time).
    B within [-64, 64): onnxruntime's u8 x s8 kernel on AVX2 without VNNI adds two products in 16 bits
    (vpmaddubsw), which saturates past 32767 (255 * 128 * 2 does): its results then leave the formula."""
    a, b = RNG.integers(0, 256, (5, 40)).astype(np.uint8), RNG.integers(-64, 64, (40, 24)).astype(np.int8)
    za, zb, zy = np.array(121, np.uint8), RNG.integers(-5, 5, 24).astype(np.int8), np.array(128, np.uint8)
    sa, sb, sy = np.array(0.02, np.float32), (RNG.random(24) * 0.02).astype(np.float32), np.array(0.7, np.float32)
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    model = model_of([node], [("a", TensorProto.UINT8, [5, 40]), ("sa", TensorProto.FLOAT, []),
                              ("sy", TensorProto.FLOAT, [])], [("y", TensorProto.UINT8)],
                     [("za", za), ("b", b), ("sb", sb), ("zb", zb), ("zy", zy)])
    return Case("qlinear_matmul_runtime_scales", model, {"a": a, "sa": sa, "sy": sy},
                [qlinear_matmul(a, sa, za, b, sb, zb, sy, zy)])


def case_dynamic(name: str, x: np.ndarray):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "ys", "yz"])
    model = model_of([node], [("x", TensorProto.FLOAT, list(x.shape))],
                     [("y", TensorProto.UINT8), ("ys", TensorProto.FLOAT), ("yz", TensorProto.UINT8)])
    return Case(name, model, {"x": x}, list(dynamic_quantize_linear(x)))


def case_gather_block(bits: int, zero_points: bool):
    """uint8 rows of `bits`-bit levels (low bits first), blocks of 32 of 96 columns (3 blocks: packed zero
    points leave a partial byte), int32 ids with some out of range: onnxruntime's rows of zeros there."""
    per, rows = 8 // bits, 16
    data = RNG.integers(0, 256, (rows, 96 // per)).astype(np.uint8)
    scale = (RNG.random((rows, 3)) * 0.1).astype(np.float32)
    levels = np.stack([(data >> (k * bits)) & ((1 << bits) - 1) for k in range(per)], -1).reshape(rows, 96)
    zeros = RNG.integers(0, 1 << bits, (rows, 3))
    inits = [("data", data), ("s", scale)]
    if zero_points:
        padded = np.concatenate([zeros, np.zeros((rows, -3 % per), np.int64)], axis=1)
        packed = sum(padded[:, k::per] << (k * bits) for k in range(per)).astype(np.uint8)
        inits.append(("z", packed))
    ids = np.array([[0, -1, 15, 16], [-17, 3, 40, -16]], np.int32)
    zero = zeros if zero_points else np.full((rows, 3), 1 << (bits - 1))
    table = ((levels - np.repeat(zero, 32, axis=1)).astype(np.float32) * np.repeat(scale, 32, axis=1))
    inside = (ids >= -rows) & (ids < rows)
    want = np.where(inside[..., None], table[np.where(inside, ids, 0)], np.float32(0)).astype(np.float32)
    node = helper.make_node("GatherBlockQuantized", ["data", "ids", "s"] + ["z"] * zero_points, ["y"],
                            domain="com.microsoft", bits=bits, block_size=32, gather_axis=0, quantize_axis=1)
    model = model_of([node], [("ids", TensorProto.INT32, [2, 4])], [("y", TensorProto.FLOAT)], inits)
    return Case(f"gather_block_quantized_u8_bits{bits}{'_zp' * zero_points}", model, {"ids": ids}, [want])


def hand_built() -> list[Case]:
    return [
        case_quantize_blocked(), case_quantize_f16(), case_dequantize_runtime(), case_dequantize_i32(),
        case_dequantize_f16_scale(), case_dequantize_scalar_int4(),
        case_dequantize_packed(TensorProto.UINT4, (5, 7), 0, 0, 21, "dequantize_uint4_odd_per_axis"),
        case_dequantize_packed(TensorProto.INT4, (6, 40), 1, 16, 21, "dequantize_int4_blocked_partial_block"),
        case_dequantize_packed(TensorProto.INT2, (5, 7), 0, 0, 25, "dequantize_int2_per_axis"),
        case_dequantize_packed(TensorProto.UINT2, (6, 40), 1, 16, 25, "dequantize_uint2_blocked"),
        case_dequantized_matmul(), case_matmul_integer_batched(), case_matmul_integer_runtime_zero(),
        case_qlinear_runtime_scales(),
        case_dynamic("dynamic_quantize_zeros", np.zeros((3, 8), np.float32)),
        case_dynamic("dynamic_quantize_negative", -np.abs(RNG.standard_normal((3, 8))).astype(np.float32) - 0.1),
        case_gather_block(2, True), case_gather_block(8, False), case_gather_block(4, True),
    ]


CASES = hand_built()


# -- the fixtures ------------------------------------------------------------------------------------------------


def test_the_fixtures_are_there():
    ops = {n.op_type for s in SINGLE for n in quantized_fixture(s)[0].graph.node}
    assert ops >= {"DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul",
                   "GatherBlockQuantized"}, ops
    assert len(SINGLE) >= 43 and len(WHOLE_MODELS) == 3


@pytest.mark.parametrize("stem", STEMS)
def test_every_fixture_matches_onnxruntime_on_the_interpreter(stem):
    """Bit for bit but for float sums: the GPT-2 models at tests/test_onnx_models.py's tolerance (measured
    7.2e-7; their integer products are exact on both sides), MatMulNBits within 2e-6 of the output's scale
    at accuracy_level 0 and 1.5% at 4 (onnxruntime rounds the activations to int8 there, stitch does not)."""
    model, runs = quantized_fixture(stem)
    imported = import_onnx(model)
    level = max((a.i for n in model.graph.node for a in n.attribute if a.name == "accuracy_level"), default=0)
    for run, arrays in runs.items():
        got = interpret(imported, arrays)
        for g, name in zip(got, imported.outputs, strict=True):
            want = arrays[f"output:{name}"]
            what = f"{stem} {run} {name}"
            if stem in WHOLE_MODELS:
                assert g.dtype == want.dtype and g.shape == want.shape
                np.testing.assert_allclose(g, want, rtol=RTOL, atol=ATOL, err_msg=what)
            elif stem.startswith("matmul_nbits"):
                assert_matches(g, want, (0.015 if level == 4 else 2e-6) * float(np.abs(want).max()), what)
            else:
                assert_matches(g, want, 0, what)


# -- hand-built cases -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hand_built_case_on_the_interpreter(case):
    got = interpret(import_onnx(case.model), case.feeds)
    for g, w in zip(got, case.want, strict=True):
        assert_matches(g, w, case.atol, case.name)


@pytest.mark.parametrize("case", [c for c in CASES if c.ort], ids=lambda c: c.name)
def test_hand_built_expectations_are_onnxruntimes(case):
    """The numpy formulas above are what onnxruntime computes (one thread, its default optimizations)."""
    ort = pytest.importorskip("onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    for key, value in case.ort_config.items():
        options.add_session_config_entry(key, value)
    session = ort.InferenceSession(case.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    for g, w in zip(session.run(None, case.feeds), case.want, strict=True):
        assert_matches(g, w, case.atol, case.name)


# -- compiled ------------------------------------------------------------------------------------------------------


def merged(parts: list[tuple[str, object, dict, list]]):
    """One model of several, each value prefixed with its part's name: (model, feeds, {output: want}).
    One compile per target for all of them (each alone costs about as much as all together)."""
    nodes, inputs, outputs, inits, feeds, wants = [], [], [], [], {}, {}
    opsets: dict[str, int] = {}
    for k, (name, model, part_feeds, part_wants) in enumerate(parts):
        def renamed(n: str, k=k) -> str:
            return f"p{k}_{n}" if n else n

        for n in model.graph.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            copy.ClearField("input")
            copy.input.extend(map(renamed, n.input))
            copy.ClearField("output")
            copy.output.extend(map(renamed, n.output))
            copy.name = renamed(n.name or n.output[0])
            nodes.append(copy)
        for t in model.graph.initializer:
            copy = onnx.TensorProto()
            copy.CopyFrom(t)
            copy.name = renamed(t.name)
            inits.append(copy)
        for group, values in ((inputs, model.graph.input), (outputs, model.graph.output)):
            for vi in values:
                copy = onnx.ValueInfoProto()
                copy.CopyFrom(vi)
                copy.name = renamed(vi.name)
                group.append(copy)
        feeds |= {renamed(n): v for n, v in part_feeds.items()}
        wants |= {renamed(o.name): (w, name) for o, w in zip(model.graph.output, part_wants, strict=True)}
        for o in model.opset_import:  # the later opsets change none of these operators' defaults
            opsets[o.domain] = max(opsets.get(o.domain, 0), o.version)
    graph = helper.make_graph(nodes, "merged", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    return model, feeds, wants


def parts() -> list[tuple[str, object, dict, list, float]]:
    out = []
    for stem in SINGLE:
        model, runs = quantized_fixture(stem)
        (arrays,) = runs.values()
        feeds = {i.name: arrays[i.name] for i in model.graph.input}
        out.append((stem, model, feeds, [arrays[f"output:{o.name}"] for o in model.graph.output], 0.0))
    return out + [(c.name, c.model, c.feeds, c.want, c.atol) for c in CASES]


@needs_cc
@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_every_form_compiles_and_matches(target, tmp_path):
    """All single-operator fixtures and hand-built cases, one program: bit for bit (the dequantized
    weight's product within its own tolerance)."""
    every = parts()
    model, feeds, wants = merged([p[:4] for p in every])
    tolerance = {name: atol for name, *_, atol in every}
    imported = import_onnx(model)
    program = stitch.compile(imported.text, weights=imported.weights, target=target, cache_dir=tmp_path)
    with np.errstate(all="ignore"):
        got = program(**{imported.inputs[k]: v for k, v in feeds.items()})
    assert len(got) == len(wants) == len(imported.outputs)
    for g, name in zip(got, imported.outputs):
        want, part = wants[name]
        assert_matches(g, want, tolerance[part], f"{target} {part} {name}")


@needs_cc
@pytest.mark.parametrize("stem", [s for s in WHOLE_MODELS if "quantize_dynamic" in s])
def test_quantize_dynamic_gpt2_compiles(stem, request, tmp_path):
    """GPT2Model through onnxruntime's quantize_dynamic (DynamicQuantizeLinear, MatMulInteger, a uint8
    embedding's Gather and DequantizeLinear) on cpu: 10 s each, so with --long only."""
    if not request.config.getoption("long"):
        pytest.skip("compiles a whole model (--long)")
    model, runs = quantized_fixture(stem)
    imported = import_onnx(model)
    program = stitch.compile(imported.text, weights=imported.weights, target="cpu", cache_dir=tmp_path)
    for arrays in runs.values():
        got = program(**{imported.inputs[k]: v for k, v in arrays.items() if k in imported.inputs})
        for g, name in zip(got, imported.outputs, strict=True):
            np.testing.assert_allclose(g, arrays[f"output:{name}"], rtol=RTOL, atol=ATOL)


# -- what the program holds ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stem", [s for s in SINGLE if s.startswith(("dequantize", "gather_block"))])
def test_the_weights_are_the_stored_bytes(stem):
    """No float weight of the data's size (the dequantized tensor is computed where it is read, never at
    import), and a 4-bit initializer is one u8 weight holding its raw bytes as stored."""
    model, _ = quantized_fixture(stem)
    imported = import_onnx(model)
    data = next(t for t in model.graph.initializer if t.name == model.graph.node[0].input[0])
    size = int(np.prod(data.dims))
    weights = {k: np.asarray(v) for k, v in imported.weights.items()}
    assert all(w.size < size for w in weights.values() if w.dtype.kind == "f"), stem
    if data.data_type in (TensorProto.INT4, TensorProto.UINT4):
        stored = np.frombuffer(data.raw_data, np.uint8)
        assert stored.size == (size + 1) // 2
        assert any(w.dtype == np.uint8 and np.array_equal(w.reshape(-1), stored) for w in weights.values())
        assert not any(w.dtype.kind in "iu" and w.size >= size for w in weights.values()), "an unpacked copy"


@needs_cc
@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_a_dequantized_weight_fuses_into_its_product(target, tmp_path):
    """x @ DequantizeLinear(int4 weight): one kernel, the product reading the packed bytes and the scales;
    the weights are those bytes (u8, half a byte an element), the scales and the zero points."""
    model, x, want = dequantized_matmul()
    imported = import_onnx(model)
    assert sorted((str(np.asarray(w).dtype), np.asarray(w).size) for w in imported.weights.values()) == [
        ("float32", 96), ("uint8", 48), ("uint8", 1536)]
    program = stitch.compile(imported.text, weights=imported.weights, target=target, cache_dir=tmp_path)
    assert len(program.compiled.schedule.kernels) == 1
    (got,) = program(x=x)
    assert_matches(got, want, 1e-6 * float(np.abs(want).max()))


def test_rounding_is_the_magic_constant_pair():
    """round_half_even as add and subtract 1.5 * 2**23 after a clamp to +-1024 (NaN to the low end)."""
    text = import_onnx(case_quantize_blocked().model).text
    assert "greater(" in text and "12582912.0" in text and "minimum(" in text and "-1024.0" in text


# -- refusals ------------------------------------------------------------------------------------------------


def refusal(nodes, inputs, inits, opset=21, tensors=()):
    model = model_of(nodes, inputs, [("y", TensorProto.FLOAT)], inits, opset=opset, tensors=tensors)
    with pytest.raises(OnnxImportError) as err:
        import_onnx(model)
    return str(err.value)


def test_what_stitch_refuses_is_named():
    x = [("x", TensorProto.FLOAT, [4, 32])]
    scale = ("s", np.array(0.5, np.float32))
    assert "QuantizeLinear to int4" in refusal([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], x,
                                               [scale], tensors=[helper.make_tensor("z", TensorProto.INT4, [], [1])])
    assert "uint16" in refusal([helper.make_node("DequantizeLinear", ["q", "s"], ["y"])], [],
                               [("q", np.zeros((4, 32), np.uint16)), scale])
    assert "output_dtype" in refusal([helper.make_node("DequantizeLinear", ["q", "s"], ["y"],
                                                       output_dtype=TensorProto.FLOAT16)], [],
                                     [("q", np.zeros((4, 32), np.uint8)), scale], opset=23)
    a = [("a", TensorProto.UINT8, [4, 32])]
    assert "zero point of shape [2, 4]" in refusal(
        [helper.make_node("MatMulInteger", ["a", "b", "za"], ["y"])], a,
        [("b", np.zeros((32, 8), np.uint8)), ("za", np.zeros((2, 4), np.uint8))])
    assert "a_scale of shape [4]" in refusal(
        [helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])], a,
        [("sa", np.ones(4, np.float32)), ("za", np.array(0, np.uint8)), ("b", np.zeros((32, 8), np.uint8)),
         ("sb", np.array(1.0, np.float32)), ("zb", np.array(0, np.uint8)), ("sy", np.array(1.0, np.float32)),
         ("zy", np.array(0, np.uint8))])
    assert "gather_axis 1" in refusal(
        [helper.make_node("GatherBlockQuantized", ["t", "i", "s"], ["y"], domain="com.microsoft", gather_axis=1,
                          quantize_axis=0, block_size=16)], [("i", TensorProto.INT64, [3])],
        [("t", np.zeros((32, 8), np.uint8)), ("s", np.ones((2, 8), np.float32))])
