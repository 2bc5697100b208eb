"""A committed convolutional network: ResNet-18's layers at width 4 (tools/vision_models.py `resnet18_narrow`:
the 7x7 stride-2 stem, the 3x3 stride-2 max pool, four stages of two BasicBlocks, 4 to 32 channels, 10
classes), BatchNorm statistics randomised, on two 32x32 images, exported by both torch.onnx exporters
(tests/fixtures/models/vision/, with onnxruntime's logits; `python3 tools/export_models.py` writes them).

Each imports and its logits on the reference interpreter match onnxruntime's; compiled on cpu and accel
under `pytest --long` only (20 convolutions: 10-25 s a target on this 2-core machine, against a few seconds
for every default test). The full-size ResNet-18 is compiled and timed by bench/survey.py and
bench/compile_speed.py --models.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import stitch  # noqa: E402
import stitch_testing  # noqa: E402
from stitch.engine.ir.check import check_program  # noqa: E402
from stitch.engine.ir.interp import evaluate  # noqa: E402
from stitch.frontends.onnx_import import import_onnx  # noqa: E402

VISION = Path(__file__).resolve().parent / "fixtures" / "models" / "vision"
NAMES = sorted(p.stem for p in VISION.glob("*.onnx"))
RTOL, ATOL = 1e-3, 1e-4  # as tests/test_onnx_models.py


def load(name: str):
    imported = import_onnx(VISION / f"{name}.onnx")
    with np.load(VISION / f"{name}.npz") as data:
        feeds = {imported.inputs[k]: data[k] for k in data.files if k in imported.inputs}
        want = [data[f"output:{o}"] for o in imported.outputs]
    return imported, feeds | imported.weights, want


def test_both_exports_are_there_and_hold_a_max_pool():
    assert NAMES == ["resnet18_narrow-dynamo", "resnet18_narrow-torchscript"]
    for name in NAMES:
        ops = [n.op_type for n in onnx.load(VISION / f"{name}.onnx").graph.node]
        assert ops.count("Conv") == 20 and ops.count("MaxPool") == 1, (name, ops)


@pytest.mark.parametrize("name", NAMES)
def test_resnet_imports_and_matches_onnxruntime_on_the_interpreter(name):
    imported, inputs, want = load(name)
    assert imported.program == imported.checked  # the text parses back to the program the import checked
    graph = next(iter(check_program(imported.program).values()))
    (got,) = evaluate(graph, inputs)
    (logits,) = want
    assert got.dtype == logits.dtype and got.shape == logits.shape == (2, 10)
    np.testing.assert_allclose(got, logits, rtol=RTOL, atol=ATOL)


@pytest.mark.skipif(not stitch_testing.LONG, reason="compiling 20 convolutions takes 10-25 s a target: pytest --long")
@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_resnet_compiles_and_matches_onnxruntime(target, tmp_path):
    imported, inputs, want = load("resnet18_narrow-dynamo")
    program = stitch.compile(imported.text, target=target, weights=imported.weights, cache_dir=tmp_path)
    (got,) = program(**{k: v for k, v in inputs.items() if k not in imported.weights})
    np.testing.assert_allclose(got, want[0], rtol=RTOL, atol=ATOL)
