"""Comparing the two sides of a rule instance, and showing a counterexample.

The float tolerance and why it is what it is are in `verdicts.py`'s docstring.
"""

from __future__ import annotations

import dataclasses
from math import prod

import numpy as np

from ...ir.graph import Graph
from ...ir.interp import apply_op, np_dtype
from ...ir.ops import BINARY_INTEGER, OPS, REDUCE
from ...ir.printer import print_expr
from ...ir.program import FLOAT_DTYPES, INT_DTYPES, Expr, TensorType
from .draw import Instance

ULPS = 64
TOLERANCE = f"|left - right| <= {ULPS}*eps*(max(|left|, |right|) + n*M)"


def overflows(graph: Graph, values: list[np.ndarray]) -> bool:
    """Did an integer op wrap around? Recompute each one in float64 from its operands. (The bit
    operations are exact by definition: a shift out of the top is what shl means.)"""
    for n in graph.nodes:
        if (n.type.dtype not in INT_DTYPES or n.op in ("param", "const", "cast") + BINARY_INTEGER
                or OPS[n.op].group in ("layout", "movement")):
            continue
        wide = dataclasses.replace(n, type=TensorType("f64", n.type.shape))
        args = [v if v.dtype == np.bool_ else v.astype(np.float64) for v in (values[i] for i in n.inputs)]
        with np.errstate(all="ignore"):
            if not np.array_equal(apply_op(wide, args), values[n.id].astype(np.float64)):
                return True
    return False


def compare(graph: Graph, values: list[np.ndarray], edge: bool = False) -> str:
    """'' if the two results agree (see the module docstring), else how they differ."""
    left, right = values[graph.outputs[0]], values[graph.outputs[1]]
    dtype = graph.nodes[graph.outputs[0]].type.dtype
    if dtype not in FLOAT_DTYPES:
        bad = left != right
        if not np.any(bad):
            return ""
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        return f"they differ at index {list(at)}: {left[at].item()!r} vs {right[at].item()!r}"
    eps = float(np.finfo(np_dtype(dtype)).eps)
    magnitude = max((float(np.max(np.abs(v[np.isfinite(v)]), initial=0.0))
                     for v in values if v.dtype != np.bool_ and v.size), default=0.0)
    terms = _terms_per_element(graph)
    l64, r64 = left.astype(np.float64), right.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # an infinite tolerance at the edge of the range is fine
        tol = ULPS * eps * (np.maximum(np.abs(l64), np.abs(r64)) + terms * magnitude)
        bad = np.abs(l64 - r64) > tol
        if edge:
            bad = _edge_mismatches(l64, r64, tol, float(np.finfo(np_dtype(dtype)).max), eps)
    if not np.any(bad):
        return ""
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"they differ at index {list(at)}: {l64[at].item()!r} vs {r64[at].item()!r} "
            f"(by {abs(l64[at] - r64[at]):.3g}; "
            f"tolerance {tol[at]:.3g} with eps={eps:.3g}, n={terms}, M={magnitude:.3g})")


def _edge_mismatches(left: np.ndarray, right: np.ndarray, tol: np.ndarray, big: float, eps: float) -> np.ndarray:
    """Where two results disagree when NaN, inf and signed zeros count: NaN only against NaN; an
    infinity only against one of its sign or a finite value rounding could have carried past the
    largest finite one; finite values within `tol`, and two zeros only of one sign."""
    nan_l, nan_r = np.isnan(left), np.isnan(right)
    finite = np.isfinite(left) & np.isfinite(right)
    band = big * (1 - ULPS * eps)
    overflowed = lambda v: np.where(np.abs(v) >= band, np.sign(v), 0.0)  # noqa: E731
    infinite = ~finite & ~nan_l & ~nan_r
    zeros = (left == 0) & (right == 0) & (np.signbit(left) != np.signbit(right))
    return ((nan_l != nan_r) | (infinite & ((overflowed(left) != overflowed(right)) | (overflowed(left) == 0)))
            | (finite & ((np.abs(left - right) > tol) | zeros)))


def _terms_per_element(graph: Graph) -> int:
    """n of the tolerance: per side, the product of its reductions' and matmuls' extents."""
    sides = []
    for out in graph.outputs:
        n, stack, seen = 1, [out], set()
        while stack:
            node = graph.nodes[stack.pop()]
            if node.id in seen:
                continue
            seen.add(node.id)
            operand = graph.nodes[node.inputs[0]].type.shape if node.inputs else ()
            if node.op in REDUCE:
                n *= prod(operand[a] for a in node.attr("axes"))
            elif node.op == "matmul":
                n *= operand[-1]
            stack.extend(node.inputs)
        sides.append(n)
    return max(sides)


# ---------------------------------------------------------------------------
# Showing a counterexample.


def explain(inst: Instance, lhs: Expr, rhs: Expr, why: str, left_type=None, right_type=None,
             inputs=None, left=None, right=None) -> str:
    lines = ["  counterexample:", *inst.describe()]
    if inputs:
        lines.append("  inputs:")
        lines += [f"    {name} = {_show_array(v, len(name) + 7)}" for name, v in inputs.items()]
    for side, e, t, v in (("left: ", lhs, left_type, left), ("right:", rhs, right_type, right)):
        text = f"  {side} {print_expr(e)}"
        if t is not None:
            text += f" : {t}"
        if v is not None:
            text += f" = {_show_array(v, len(text) + 3)}"
        lines.append(text)
    lines.append(f"  {why}")
    return "\n".join(lines)


def _show_array(v: np.ndarray, indent: int) -> str:
    if v.ndim == 0:
        return repr(v.item())
    text = np.array2string(v, separator=", ", threshold=40, max_line_width=100, precision=8)
    return text.replace("\n", "\n" + " " * indent)
