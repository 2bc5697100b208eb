"""A computed left operand whose k is read through div and mod by a chain of divisors (a 7x7 stem's k
over (channel, row, column) of its windows) is made with k walked digit by digit
(targets/c/micro_kernel.py `_k_by_digits`, lowering/delinearize.py `digits`): no div or mod of k per
element, the same bits as making it through them."""

from __future__ import annotations

import numpy as np
import pytest
import stitch
from stitch.engine.ir.interp import evaluate
from stitch.engine.ir.tolerance import compare
from stitch.targets.c import micro_kernel
from stitch_testing import needs_cc

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from stitch.frontends.onnx_import import import_onnx  # noqa: E402


def _stem():
    """ResNet's stem, small: a 7x7 stride-2 conv padded by 3 of a 3-channel graph input (its rows
    channel by channel: k = channel * 49 + row * 7 + column)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 3, 7, 7)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[3, 3, 3, 3])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 24])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    imported = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    return imported, rng.standard_normal((1, 3, 24, 24)).astype(np.float32)


def _a_lines(source: str) -> list[str]:
    return [ln for ln in source.splitlines() if "a_pre[0][" in ln and "] = " in ln and "float a0" not in ln]


@needs_cc
def test_a_stems_k_is_walked_by_its_digits_to_the_same_bits(tmp_path, monkeypatch):
    imported, x = _stem()
    digits = stitch.compile(imported.text, weights=imported.weights, cache_dir=tmp_path / "digits")
    source = digits.native.source_path.read_text()
    made = _a_lines(source)
    assert made and "for (int64_t r0_hi = 0; r0_hi < 3; ++r0_hi)" in source, made
    assert all("/ 49" not in ln and "% 7" not in ln for ln in made), made
    monkeypatch.setattr(micro_kernel, "_k_by_digits", lambda a, k: (a, []))
    flat = stitch.compile(imported.text, weights=imported.weights, cache_dir=tmp_path / "flat")
    assert all("/ 49" in ln for ln in _a_lines(flat.native.source_path.read_text()))
    feed = {imported.inputs["x"]: x}
    (got,), (want,) = digits(**feed), flat(**feed)
    assert got.tobytes() == want.tobytes()
    assert compare(got, evaluate(digits.graph, feed | imported.weights)[0]) == ""
