"""com.microsoft MatMulNBits imported (frontends/onnx_quantized.py): every committed fixture (4 and 8
bits, blocks of 16, 32 and 128, K a whole number of blocks or not, with and without zero points, one
row and five) and the 2-layer GPT-2 decoder step quantized by onnxruntime's MatMulNBitsQuantizer,
compiled and run on both targets against onnxruntime's recorded outputs; the weight stays packed."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate
from stitch_testing import QUANTIZED, needs_cc, quantized_fixture

onnx = pytest.importorskip("onnx")
from quantized_reference import matmul_nbits  # noqa: E402
from stitch.frontends.onnx_import import import_onnx  # noqa: E402

CASES = sorted(p.stem for p in QUANTIZED.glob("matmul_nbits-*.onnx"))
STEP = "gpt2_step_2layers-matmul_nbits-dynamo"


def accuracy_level(model) -> int:
    return next((a.i for n in model.graph.node for a in n.attribute if a.name == "accuracy_level"), 0)


def test_the_fixtures_are_there():
    assert len(CASES) >= 17 and (QUANTIZED / f"{STEP}.onnx").exists()


@needs_cc
@pytest.mark.parametrize("target", ["cpu", "accel"])
@pytest.mark.parametrize("stem", CASES + [STEP])
def test_matmul_nbits_matches_onnxruntime(stem, target, tmp_path):
    """At accuracy_level 0 within 2e-6 of the output's scale (onnxruntime sums in f32 in its own order);
    at 4 onnxruntime quantizes the activations and stitch does not: there stitch matches the reference
    computed with f32 activations, and onnxruntime within 1.5% of the scale."""
    model, runs = quantized_fixture(stem)
    imported = import_onnx(model)
    weights = {name: np.asarray(w) for name, w in imported.weights.items()}
    nbits = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    if stem != STEP:  # no float weight of the dequantized weight's size: it is read from the bytes
        k, n = (next(a.i for a in nbits[0].attribute if a.name == name) for name in ("K", "N"))
        assert all(w.size < k * n for w in weights.values() if w.dtype == np.float32), stem
    program = stitch.compile(imported.text, weights=imported.weights, target=target, cache_dir=tmp_path)
    level = accuracy_level(model)
    for run, arrays in runs.items():
        feeds = {imported.inputs[k]: v for k, v in arrays.items() if k in imported.inputs}
        outs = program(**feeds)
        for out, spec in zip(outs, model.graph.output):
            want = arrays[f"output:{spec.name}"]
            scale = float(np.max(np.abs(want)))
            if level == 4:
                assert np.max(np.abs(out - want)) <= 0.015 * scale, (stem, run)
                node = nbits[0]
                attrs = {a.name: a.i for a in node.attribute if a.name in ("K", "N", "bits", "block_size")}
                inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
                zero = inits.get(node.input[3]) if len(node.input) > 3 and node.input[3] else None
                reference = matmul_nbits(arrays[node.input[0]], inits[node.input[1]], inits[node.input[2]], zero,
                                         **attrs)
                np.testing.assert_allclose(out, reference, atol=2e-6 * scale, rtol=0)
            else:
                np.testing.assert_allclose(out, want, atol=2e-6 * scale, rtol=0, err_msg=f"{stem} {run}")


def test_the_four_bit_weight_is_imported_packed():
    """The program's weights are B's bytes as stored (half a byte an element) and the scales: no
    unpacked or dequantized copy, and the reference interpreter computes onnxruntime's outputs from them."""
    model, runs = quantized_fixture("matmul_nbits-4bit-k128-block32-acc0-m1")
    imported = import_onnx(model)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    dtypes = sorted(str(np.asarray(w).dtype) for w in imported.weights.values())
    assert dtypes == ["float32", "uint8"], dtypes
    b = next(np.asarray(w) for w in imported.weights.values() if np.asarray(w).dtype == np.uint8)
    assert b.size == inits[model.graph.node[0].input[1]].size == 96 * 128 // 2
    from stitch.engine.programs import check_entry, read_program

    graph = check_entry(read_program(imported.text))
    (arrays,) = runs.values()
    feeds = {imported.inputs[k]: v for k, v in arrays.items() if k in imported.inputs}
    (got,) = evaluate(graph, feeds | {k: np.asarray(v) for k, v in imported.weights.items()})
    want = arrays[f"output:{model.graph.output[0].name}"]
    np.testing.assert_allclose(got, want, atol=2e-6 * float(np.max(np.abs(want))), rtol=0)


def test_g_idx_and_two_bits_are_refused_by_name():
    from onnx import TensorProto, helper, numpy_helper

    def model(bits: int, g_idx: bool):
        inputs = ["A", "B", "S", "", "G"] if g_idx else ["A", "B", "S"]
        node = helper.make_node("MatMulNBits", inputs, ["Y"], domain="com.microsoft", K=32, N=4, bits=bits,
                                block_size=32)
        inits = [numpy_helper.from_array(np.zeros((4, 1, 32 * bits // 8), np.uint8), "B"),
                 numpy_helper.from_array(np.ones(4, np.float32), "S")]
        if g_idx:
            inits.append(numpy_helper.from_array(np.zeros(32, np.int32), "G"))
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, 32])],
                                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4])], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                       helper.make_opsetid("com.microsoft", 1)])

    with pytest.raises(Exception, match="MatMulNBits of 2 bits"):
        import_onnx(model(2, False))
    with pytest.raises(Exception, match="g_idx"):
        import_onnx(model(4, True))
