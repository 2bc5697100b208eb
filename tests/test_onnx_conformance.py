"""The onnx package's node test cases, imported, compiled and run on cpu and accel (see frontends/onnx_conformance.py).

A case the importer refuses (an unsupported op, dtype or dynamic shape) is
skipped with its reason; every other case must match ONNX's expected outputs
at the case's tolerance. Every case runs on accel and a deterministic quarter of them on cpu (the C
compiler costs ~0.3 s a program); with `pytest --long`, all on both.
"""

from __future__ import annotations

import zlib

import pytest

pytest.importorskip("onnx")

import stitch_testing  # noqa: E402
from stitch.frontends.onnx_conformance import KIND_LABELS, load_cases, run_case  # noqa: E402

CASES = {c.name: c for c in load_cases()}


def targets_for(name: str) -> tuple[str, ...]:
    if stitch_testing.LONG or zlib.crc32(name.encode()) % 4 == 0:
        return ("accel", "cpu")
    return ("accel",)


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnx_node_case(name):
    results = run_case(CASES[name], targets_for(name))
    if results[0].status == "skipped" and results[0].target == "-":  # an unsupported op, dtype or shape
        assert results[0].reason.startswith(tuple(KIND_LABELS.values()))
        pytest.skip(results[0].reason)
    failed = [f"{r.target}: {r.reason}" for r in results if r.status == "failed"]
    assert not failed, "\n".join(failed)
    skipped = [f"{r.target}: {r.reason}" for r in results if r.status == "skipped"]
    if skipped:  # imported and checked on the reference interpreter; a target cannot compile it yet
        assert all(r.reason.startswith(KIND_LABELS["lowering"]) for r in results if r.status == "skipped")
        pytest.skip("; ".join(skipped))


def test_the_suite_is_not_empty():
    """The importer must cover the ops the issue names: at least these cases are imported and run."""
    for name in ["test_softmax_axis_0_expanded", "test_layer_normalization_4d_axis1_expanded", "test_gelu_tanh_1",
                 "test_gemm_all_attributes", "test_reduce_sum_keepdims_example", "test_reshape_negative_dim"]:
        results = run_case(CASES[name], ("accel",))
        assert [r.status for r in results] == ["passed"], results
