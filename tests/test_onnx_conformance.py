"""The onnx package's node test cases, imported, compiled and run on cpu and accel (see frontends/onnx_conformance.py).

A case the importer refuses (an unsupported op, dtype or dynamic shape) is
skipped with its reason; every other case must match ONNX's expected outputs
at the case's tolerance, except the known failures listed below with their
cause. With CI=true every case runs on accel and a deterministic quarter of
them on cpu (the C compiler costs ~0.3 s a program); without it, all on both.
"""

from __future__ import annotations

import os
import zlib

import pytest

pytest.importorskip("onnx")

from stitch.frontends.onnx_conformance import KIND_LABELS, load_cases, run_case  # noqa: E402

CASES = {c.name: c for c in load_cases()}

F16_ORDER = ("f16 results one ulp off: the compiled kernels round differently from op-by-op numpy (fused "
             "intermediates, summation order), and ONNX's default rtol 1e-3 is finer than an f16 ulp (9.8e-4 "
             "relative); stitch's own f16 tolerance is 1e-2")

# (name, target) -> cause: differences from ONNX that are not the importer's. Not strict: a case that
# passes (another compiler, another tile) passes.
KNOWN_FAILURES: dict[tuple[str, str], str] = {
    (name, target): F16_ORDER
    for name in ["test_attention_4d_fp16_expanded", "test_attention_4d_causal_fp16_expanded",
                 "test_attention_4d_gqa_causal_nonpad_decode_fp16_expanded"]
    for target in ("cpu", "accel")
}


def targets_for(name: str) -> tuple[str, ...]:
    if os.environ.get("CI") != "true" or zlib.crc32(name.encode()) % 4 == 0:
        return ("accel", "cpu")
    return ("accel",)


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnx_node_case(name):
    results = run_case(CASES[name], targets_for(name))
    if results[0].status == "skipped":  # only for an unsupported op, dtype or shape
        assert results[0].reason.startswith(tuple(KIND_LABELS.values()))
        pytest.skip(results[0].reason)
    failed = [r for r in results if r.status == "failed"]
    unknown = [f"{r.target}: {r.reason}" for r in failed if (name, r.target) not in KNOWN_FAILURES]
    assert not unknown, "\n".join(unknown)
    if failed:
        pytest.xfail("; ".join(dict.fromkeys(KNOWN_FAILURES[name, r.target] for r in failed)))


def test_the_suite_is_not_empty():
    """The importer must cover the ops the issue names: at least these cases are imported and run."""
    for name in ["test_softmax_axis_0_expanded", "test_layer_normalization_4d_axis1_expanded", "test_gelu_tanh_1",
                 "test_gemm_all_attributes", "test_reduce_sum_keepdims_example", "test_reshape_negative_dim"]:
        results = run_case(CASES[name], ("accel",))
        assert [r.status for r in results] == ["passed"], results
