"""When a compiled output equals the reference: the one tolerance `run --check` and the tests use.

Floats, elementwise:

    |got - want| <= rtol * sqrt(n) * (1 + max(|want|, M))

with rtol 1e-2 for f16, 1e-4 for f32 and 1e-9 for f64 (transcendental functions
come from libm, and a few ops' roundings differ), and n the terms summed into
one element of that output: over every `sum`, `mean` and `matmul` the output
depends on, the terms each folds into one element (the product of its reduced
extents, a matmul's k), added up; 1 without any. Why: compiled code sums in a
different order than numpy's pairwise sums, and the difference between two
orders of an n-term sum grows as sqrt(n) roundings (round-to-nearest errors
are as often up as down); errors of separate sums feeding one value add. So a
GPT-2 attention block (K=768 projections, 12 heads of 64, softmax over 1024:
n = 5,184) is checked at 72 * rtol, while one missing term of its 768-term
sums still fails. (`stitch rules check` uses the worst-case bound, linear in
n, on its small instances; at real sizes that would accept such bugs.)
`max` and `min` round nothing and add no terms. M is the magnitude of what was
summed into the element, given the inputs (`magnitudes`): a sum's error is
bounded by its terms' magnitudes, not by its result, so a sum that cancels
(1e8 + 1 - 1e8 + ...) is checked against the size of its terms, as any order of
summation would round it; where nothing cancels M is |want|. Non-finite values must be
where the reference has them: NaN where it has NaN, and an infinity where it
has one of that sign or a finite value within rtol of the largest finite one
(the same value rounded past it: libm and numpy round exp(88.72) either way).
Integers and bools: exact.
"""

from __future__ import annotations

import math

import numpy as np

from . import dims
from .graph import Graph
from .interp import apply_op, bind_call, gather
from .ops import OPS, SUMMING, OpGroup

RTOL = {"float16": 1e-2, "float32": 1e-4, "float64": 1e-9}


def differences(outputs: list[np.ndarray], wants: list[np.ndarray], graph: Graph | None = None,
                inputs: dict[str, np.ndarray] | None = None) -> list[str]:
    """'outK: what differs' for every output not equal to the reference's within tolerance.

    With the program's graph the tolerance of each output grows with the terms summed into it; with
    its inputs too, with the magnitude of what was summed (a sum that cancels)."""
    sizes = bind_call(graph, inputs)[1] if graph is not None and graph.symbols and inputs is not None else None
    terms = summed_terms(graph, sizes) if graph is not None else [1] * len(wants)
    scales = magnitudes(graph, inputs) if graph is not None and inputs is not None else [None] * len(wants)
    return [f"out{k}: {problem}" for k, (got, want, n, scale) in enumerate(zip(outputs, wants, terms, scales))
            if (problem := compare(got, want, n, scale))]


def compare(got: np.ndarray, want: np.ndarray, terms: int = 1, scale: np.ndarray | None = None) -> str:
    """'' when `got` equals `want` within tolerance (for `terms` summed terms, and `scale` the
    magnitude of what was summed into each element, when known), else what differs."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
    if want.dtype.kind != "f":
        bad = np.count_nonzero(got != want)
        return f"{bad} of {want.size} elements differ" if bad else ""
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    rtol = RTOL[want.dtype.name]
    finite = np.isfinite(w) & np.isfinite(g)
    # an infinity agrees with itself, and with a value of its sign rounding could have carried past
    # the largest finite one (libm and numpy round exp(88.72) either way)
    edge = float(np.finfo(want.dtype).max) * (1 - rtol)
    beyond_g, beyond_w = (np.where(np.abs(v) >= edge, np.sign(v), 0.0) for v in (g, w))
    nan = np.isnan(g) & np.isnan(w)
    infinite = ~np.isnan(g) & ~np.isnan(w) & (beyond_g == beyond_w) & (beyond_w != 0)
    if not np.all(finite | nan | infinite):
        return "non-finite values differ"
    size = np.abs(w) if scale is None else np.maximum(np.abs(w), np.broadcast_to(scale, w.shape))
    err = np.abs(g[finite] - w[finite]) / (1 + size[finite])
    worst = float(err.max(initial=0.0))
    tol = rtol * math.sqrt(max(terms, 1))
    if worst <= tol:
        return ""
    scaled = f" (rtol {rtol:g} x sqrt({terms}) terms summed)" if terms > 1 else ""
    return f"max relative error {worst:.3g} > {tol:.3g}{scaled}"


def summed_terms(graph: Graph, sizes: dict[str, int] | None = None) -> list[int]:
    """n of the tolerance for each output: the terms of every sum, mean and matmul it depends on (a
    symbolic program's at the symbols' `sizes`, else at the top of their ranges)."""
    values = sizes or {name: hi for name, (_, hi) in graph.symbols.items()}
    own = {}
    for node in graph.nodes:
        if node.op in SUMMING:
            operand = graph.nodes[node.inputs[0]].type.shape
            n = operand[-1] if node.op == "matmul" else math.prod(operand[a] for a in node.attr("axes"))
            own[node.id] = dims.evaluate(n, values) if graph.symbols else n
    terms = []
    for out in graph.outputs:
        n, stack, seen = 0, [out], {out}
        while stack:  # the output's cone, without recursion (programs can be thousands of ops deep)
            node = graph.nodes[stack.pop()]
            n += own.get(node.id, 0)
            for i in node.inputs:
                if i not in seen:
                    seen.add(i)
                    stack.append(i)
        terms.append(max(n, 1))
    return terms


def magnitudes(graph: Graph, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """For each output, elementwise, a bound on the magnitude of what was added up into it: the
    reference evaluated once more on absolute values through the ops that add, multiply and move
    (|a| + |b|, |a| * |b|, sums and products of absolute values), and |value| after any other op
    (its rounding is relative to its result)."""
    args, sizes = bind_call(graph, inputs)
    value: dict[int, np.ndarray] = {}
    size: dict[int, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for n in graph.nodes:
            ins = [value[i] for i in n.inputs]
            value[n.id] = args[n.attr("name")] if n.op == "param" else apply_op(n, ins, sizes)
            size[n.id] = _magnitude(n, ins, [size[i] for i in n.inputs], value[n.id], sizes)
    return [size[o] for o in graph.outputs]


_ADDING = {"add", "sub"}
_KEEPING = {"neg", "abs", "relu", "cast"}  # |result| <= |operand|, and its error no larger


def _magnitude(n, values: list[np.ndarray], sizes: list[np.ndarray], result: np.ndarray, symbols) -> np.ndarray:
    plain = np.abs(np.asarray(result, dtype=np.float64)) if np.asarray(result).dtype.kind == "f" else \
        np.zeros(np.shape(result))
    if not n.inputs or np.asarray(result).dtype.kind != "f":
        return plain
    if n.op in _ADDING:
        out = sizes[0] + sizes[1]
    elif n.op == "mul":
        out = sizes[0] * sizes[1]
    elif n.op in _KEEPING:
        out = sizes[0]
    elif n.op in ("maximum", "minimum"):
        out = np.maximum(sizes[0], sizes[1])
    elif n.op == "where":
        out = np.where(values[0], sizes[1], sizes[2])
    elif n.op in ("sum", "mean"):
        out = getattr(np, n.op)(sizes[0], axis=n.attr("axes"), keepdims=n.attr("keepdims"))
    elif n.op in ("max", "min"):
        out = np.max(sizes[0], axis=n.attr("axes"), keepdims=n.attr("keepdims"), initial=0.0)
    elif n.op == "matmul":
        out = np.matmul(sizes[0], sizes[1])
    elif n.op == "gather":
        out = gather(n, sizes[0], values[1])
    elif OPS[n.op].group in (OpGroup.LAYOUT, OpGroup.MOVEMENT):
        out = apply_op(n, sizes[:1] if n.op != "concat" else sizes, symbols)
    else:
        return plain
    return np.maximum(np.asarray(out, dtype=np.float64), plain)
