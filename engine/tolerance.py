"""When a compiled output equals the reference: the one tolerance `run --check` and the tests use.

Floats: |got - want| <= rtol * (1 + |want|) elementwise, with rtol 1e-2 for f16,
1e-4 for f32 and 1e-9 for f64 (reductions are summed in a different order than
numpy's pairwise sums, and transcendental functions come from libm), and
non-finite values where the reference has them. Integers and bools: exact.
"""

from __future__ import annotations

import numpy as np

RTOL = {"float16": 1e-2, "float32": 1e-4, "float64": 1e-9}


def differences(outputs: list[np.ndarray], wants: list[np.ndarray]) -> list[str]:
    """'outK: what differs' for every output not equal to the reference's within tolerance."""
    return [f"out{k}: {problem}" for k, (got, want) in enumerate(zip(outputs, wants)) if (problem := compare(got, want))]


def compare(got: np.ndarray, want: np.ndarray) -> str:
    """'' when `got` equals `want` within tolerance, else what differs."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
    if want.dtype.kind != "f":
        bad = np.count_nonzero(got != want)
        return f"{bad} of {want.size} elements differ" if bad else ""
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    finite = np.isfinite(w)
    if not np.array_equal(np.isfinite(g), finite) or not np.array_equal(g[~finite], w[~finite], equal_nan=True):
        return "non-finite values differ"
    err = np.abs(g[finite] - w[finite]) / (1 + np.abs(w[finite]))
    worst = float(err.max(initial=0.0))
    return f"max relative error {worst:.3g} > {RTOL[want.dtype.name]:g}" if worst > RTOL[want.dtype.name] else ""
