"""Shape arithmetic on symbolic shapes, carried symbolically (as onnxruntime's symbolic shape inference
carries it) instead of folded: the ops on values known as formulas (`onnx_lazy.Lazy`: shape vectors
with symbolic entries, positions, the masks built from them) and the reads of a table at such
positions (`arange(past, past + n)` into a position embedding is a slice of it).

`shape_rule` gives a node's outputs as known values, or None when it has no formula here: its converter
then emits it as program code (a Lazy operand becomes code through `Builder.materialize`).
"""

from __future__ import annotations

import numpy as np

from ..engine.ir import dims
from ..engine.ir.check import broadcast_shapes
from . import onnx_lazy as lz
from .onnx_builder import FOLD_LIMIT, Builder, Known, Lazy, Node, Unsupported, Value, invalid, normal_axis
from .onnx_lazy import NotLazy
from .onnx_math import expand_target, flatten_target, reshape_target, squeeze_target, unsqueeze_target
from .onnx_movement import normal_slice


def shape_rule(b: Builder, node: Node, ins: list[Value | None]) -> list[Value] | None:
    """The node's outputs as known values (Known or Lazy), or None: it has no formula for these inputs."""
    rule = RULES.get(node.op_type)
    lazy = any(isinstance(v, Lazy) for v in ins)
    if rule is None or not (lazy or node.op_type == "Gather"):
        return None
    try:
        outs = rule(b, node, ins)
    except NotLazy:
        return None
    return [known(o, node.out) for o in outs]


def known(x, name: str) -> Value:
    """A rule's result in canonical form: a Known when it turned out static, else the Lazy (or a value)."""
    if not isinstance(x, Lazy):
        return x
    settled = lz.settle(x)
    return Known(settled, name=name) if isinstance(settled, np.ndarray) else settled


def formula(v: Value | None) -> Lazy:
    """A Lazy, or a Known that is no weight read as one; else NotLazy."""
    if isinstance(v, Lazy):
        return v
    if isinstance(v, Known) and not (v.param and v.array.dtype.kind not in "iub" and v.array.size > FOLD_LIMIT):
        return lz.lift(v.array)
    raise NotLazy("a value computed at run time")


def arithmetic(b, node, ins):
    """Add, Sub, Mul, Neg of integers; Div and Mod by positive constants."""
    a, c = formula(ins[0]), formula(ins[1]) if len(ins) > 1 else None
    op = node.op_type
    if a.dtype not in lz.INT_DTYPES:  # float arithmetic rounds at each op: left to the program
        raise NotLazy("arithmetic on floats")
    if op == "Neg":
        return [lz.negate(a)]
    if op == "Mod" and node.attr("fmod", 0):
        raise NotLazy("Mod with fmod")
    if op in ("Div", "Mod"):
        return [lz.floor_div(a, c, b.ranges, mod=op == "Mod")]
    return [lz.add(a, c) if op == "Add" else lz.add(a, c, -1) if op == "Sub" else lz.mul(a, c)]


def comparison(b, node, ins):
    return [lz.compare(node.op_type, formula(ins[0]), formula(ins[1]), b.ranges)]


def logic(b, node, ins):
    """Not, And, Or, Xor; an And or Or with one operand true or false everywhere gives the other (or that
    value) even when the other is computed at run time."""
    if node.op_type == "Not":
        return [lz.logic("Not", formula(ins[0]))]
    decided = [v for v in ins if isinstance(v, Lazy) and lz.is_fill(v)]
    others = [v for v in ins if v not in decided]
    if node.op_type in ("And", "Or") and decided and others and not isinstance(others[0], Lazy):
        value = bool(decided[0].values.flat[0])
        shape = broadcast_shape(b, ins)
        if value == (node.op_type == "And"):  # true and x, false or x: x
            return [broadcast_value(b, others[0], shape, node.out)]
        return [lz.fill("bool", shape, value)]
    return [lz.logic(node.op_type, formula(ins[0]), formula(ins[1]))]


def broadcast_shape(b: Builder, ins) -> tuple:
    shape: tuple | None = ()
    for v in ins:
        shape = broadcast_shapes(shape, b.type_of(v).shape) if shape is not None else None
    if shape is None:
        raise NotLazy("shapes that do not broadcast")
    return shape


def broadcast_value(b: Builder, v: Value, shape: tuple, hint: str) -> Value:
    """v broadcast to `shape` (which covers its own): a formula stays one."""
    if b.type_of(v).shape == tuple(shape):
        return v
    f = formula_or_none(v)
    if f is not None:
        return lz.broadcast(f, shape)
    return b.op("broadcast_to", [b.reshape_to_rank(v, len(shape), hint)], hint, shape=tuple(shape))


def formula_or_none(v):
    try:
        return formula(v)
    except NotLazy:
        return None


def where(b, node, ins):
    """Where with a condition decided everywhere picks a side (computed or not); else formulas only."""
    c = ins[0]
    if isinstance(c, (Lazy, Known)) and formula_or_none(c) is not None and lz.is_fill(formula(c)):
        shape = broadcast_shape(b, ins)
        picked = ins[1] if bool(formula(c).values.flat[0]) else ins[2]
        return [broadcast_value(b, picked, shape, node.out)]
    return [lz.where(formula(c), formula(ins[1]), formula(ins[2]))]


def extreme(b, node, ins):
    acc = formula(ins[0])
    for v in ins[1:]:
        acc = lz.extreme(node.op_type, acc, formula(v), b.ranges)
    return [acc]


def cast(b, node, ins):
    from .onnx_builder import onnx_dtype

    dtype = onnx_dtype(node.attr("to")) if node.op_type == "Cast" else b.type_of(ins[1]).dtype
    return [lz.cast(formula(ins[0]), dtype, b.ranges)]


def layout(target):
    """Squeeze, Unsqueeze, Flatten, Reshape, Expand of a formula: its new shape as the converter computes it."""
    def rule(b, node, ins):
        x = formula(ins[0])
        shape = target(b, node, ins)
        return [lz.broadcast(x, shape) if target is expand_shape else lz.reshape(x, shape)]

    return rule


def expand_shape(b, node, ins):
    return expand_target(b, ins)


def transpose(b, node, ins):
    x = formula(ins[0])
    perm = node.attr("perm") or list(reversed(range(x.rank)))
    return [lz.transpose(x, tuple(perm))]


def concat(b, node, ins):
    parts = [formula(v) for v in ins if v is not None]
    axis = normal_axis(node.attr("axis"), parts[0].rank)
    parts = [p for p in parts if p.shape[axis] != 0]
    if any(p.dtype != parts[0].dtype or p.rank != parts[0].rank for p in parts):
        raise NotLazy("a concat of mixed tensors")
    return [lz.concat(parts, axis)]


def slice_(b, node, ins):
    x = formula(ins[0])
    for axis, start, length, step in normal_slice(b, node, ins, x.shape, empty=True):
        x = lz.slice_axis(x, axis, start, length, step)
    return [x]


def gather(b, node, ins):
    x, idx = ins[0], ins[1]
    t = b.type_of(x)
    axis = normal_axis(node.attr("axis", 0), t.rank)
    if isinstance(x, Lazy) or (isinstance(idx, Lazy) and formula_or_none(x) is not None):
        try:
            return [lz.take(formula(x), formula(idx), axis, b.ranges)]
        except NotLazy:
            if isinstance(x, Lazy):
                raise
    if not isinstance(idx, Lazy) and not (isinstance(idx, Known) and isinstance(t.shape[axis], dims.Expr)):
        raise NotLazy("static positions on a static axis")
    return [read_rows(b, node, x, formula(idx), axis)]


def read_rows(b: Builder, node: Node, x: Value, idx: Lazy, axis: int) -> Value:
    """Gather of a tensor at positions start, start + step, ... along one axis of the positions (or at one
    position): a slice of it (`cut_rows`), reshaped and broadcast to Gather's result."""
    t = b.type_of(x)
    idx = lz.nonnegative(lz.fold(idx), t.shape[axis], b.ranges)
    if len(idx.coefs) > 1 or idx.values.size != 1 or any(c.size != 1 or c.flat[0] <= 0 for _, c in idx.coefs):
        raise NotLazy("positions that are no single run")
    k, step = (idx.coefs[0][0], int(idx.coefs[0][1].flat[0])) if idx.coefs else (None, 1)
    count = idx.shape[k] if k is not None else 1
    rows = cut_rows(b, node, x, axis, idx.values.flat[0], step, count)
    lead = tuple(count if j == k else 1 for j in range(idx.rank))
    rows = b.op("reshape", [rows], node.out, shape=t.shape[:axis] + lead + t.shape[axis + 1:])
    return broadcast_value(b, rows, t.shape[:axis] + idx.shape + t.shape[axis + 1:], node.out)


def gather_elements(b, node, ins):
    x = formula(ins[0])
    axis = normal_axis(node.attr("axis", 0), x.rank)
    return [lz.take_elements(x, formula(ins[1]), axis, b.ranges)]


def gather_nd(b, node, ins):
    if node.attr("batch_dims", 0):
        raise NotLazy("GatherND with batch_dims")
    if formula_or_none(ins[0]) is not None:
        return [lz.take_nd(formula(ins[0]), formula(ins[1]), b.ranges)]
    return [read_nd(b, node, ins[0], formula(ins[1]))]


def read_nd(b: Builder, node: Node, x: Value, idx: Lazy) -> Value:
    """GatherND of a tensor at index tuples whose each component is one position, or a run along one
    axis of the result (HuggingFace's mask code reads the attention mask at (batch, key position)):
    a slice per indexed axis, a transpose into the result's order, a reshape and a broadcast."""
    t = b.type_of(x)
    idx = lz.fold(idx)
    m, lead = idx.shape[-1], idx.shape[:-1]
    if not isinstance(m, int) or not 1 <= m <= t.rank:
        raise NotLazy("GatherND of a symbolic number of indexed axes")
    picks = []  # per indexed axis: (the result's axis it runs along or None, first position, step)
    for k in range(m):
        part = lz.reshape(lz.slice_axis(idx, idx.rank - 1, k, 1, 1), lead)
        for a, d in enumerate(lead):
            if isinstance(d, int) and d > 1 and lz.varies(part, a):
                part = lz.progression(part, a)
        part = lz.nonnegative(part, t.shape[k], b.ranges)  # (not folded: its runs along static axes stay)
        if part.values.size != 1 or len(part.coefs) > 1 or any(c.size != 1 or c.flat[0] <= 0 for _, c in part.coefs):
            raise NotLazy("GatherND positions that are no run along one axis")
        a, step = (part.coefs[0][0], int(part.coefs[0][1].flat[0])) if part.coefs else (None, 1)
        picks.append((a, part.values.flat[0], step))
    runs = [a for a, _, _ in picks if a is not None]
    if len(set(runs)) != len(runs):
        raise NotLazy("GatherND along a diagonal")
    rows = x
    for k, (a, start, step) in enumerate(picks):
        rows = cut_rows(b, node, rows, k, start, step, lead[a] if a is not None else 1)
    order = sorted(range(m), key=lambda k: (picks[k][0] is None, picks[k][0] or 0))
    if order != list(range(m)):
        rows = b.op("transpose", [rows], node.out, perm=tuple(order) + tuple(range(m, t.rank)))
    rest = t.shape[m:]
    rows = b.op("reshape", [rows], node.out, shape=tuple(d if a in runs else 1 for a, d in enumerate(lead)) + rest)
    return broadcast_value(b, rows, lead + rest, node.out)


def cut_rows(b: Builder, node: Node, x: Value, axis: int, start, step: int, count) -> Value:
    """x at positions start, start + step, ... (count of them) along `axis`: a slice (none when that is
    all of it). The positions must lie in the axis for every value of the symbols; a symbol whose range
    the caller did not give is narrowed to make them (onnxruntime fails beyond)."""
    d = b.type_of(x).shape[axis]
    if dims.bounds(start, b.ranges)[0] < 0:
        raise NotLazy("positions that may be negative")
    last = dims.add(start, dims.mul(step, dims.add(count, -1)))
    name = node.proto.input[0]
    if isinstance(d, int):
        if not b.at_most(last, d - 1, f"the positions {node.op_type} '{node.out}' reads in '{name}' ({d} rows)"):
            raise Unsupported("shape", f"{node.op_type} reads '{name}' ({d} rows) at positions up to {last}, beyond "
                                       "its rows for some values of the symbols: declare their ranges with --dim-range",
                              dim=",".join(sorted(dims.symbols_of((last,)))))
    elif not dims.provably(0, dims.add(dims.add(d, -1), dims.mul(last, -1)), b.ranges):
        raise NotLazy("positions that may lie past the axis")
    if start == 0 and step == 1 and count == d:
        return x
    attrs = {"axes": (axis,), "starts": (start,), "ends": (dims.add(last, 1),)}
    if step != 1 and count != 1:
        attrs["steps"] = (step,)
    return b.emit("slice", [x], node.out, **attrs)


def cumsum(b, node, ins):
    x = formula(ins[0])
    (axis,) = b.static_ints(ins[1], "axis", one_d=False)[:1] or [None]
    axis = normal_axis(axis, x.rank, "CumSum axis")
    return [lz.cumsum(x, axis, bool(node.attr("exclusive", 0)), bool(node.attr("reverse", 0)))]


def range_(b, node, ins):
    """start, start + delta, ... below limit: its length ceil((limit - start) / delta), symbolic."""
    start, limit, delta = (formula(v) for v in ins[:3])
    if any(v.rank or v.coefs for v in (start, limit, delta)):
        raise invalid("Range takes scalars")
    s, lim, step = start.values.flat[0], limit.values.flat[0], delta.values.flat[0]
    if isinstance(step, dims.Expr) or step == 0 or not float(step).is_integer():
        raise NotLazy("a Range whose step is not a nonzero integer")
    if any(isinstance(v, float) and not v.is_integer() for v in (s, lim)):
        raise NotLazy("a Range of fractional bounds")
    step = int(step)
    s, lim = (int(v) if isinstance(v, float) else v for v in (s, lim))
    span = dims.add(lim, dims.mul(s, -1)) if step > 0 else dims.add(s, dims.mul(lim, -1))
    length = dims.floordiv(dims.add(span, abs(step) - 1), abs(step))
    if not dims.provably(1, length, b.ranges):
        raise Unsupported("shape", f"Range of length {length}, which may be 0 for some values of the symbols "
                                   "(stitch tensors are never empty)")
    value = (lambda v: float(v) if isinstance(v, int) else v) if start.dtype not in lz.INT_DTYPES else (lambda v: v)
    return [Lazy(start.dtype, (length,), lz.obj(np.array([value(s)], dtype=object)),
                 ((0, lz.obj(np.array([step]))),))]


def constant_of_shape(b, node, ins):
    from onnx import numpy_helper

    from ..engine.ir.interp import DTYPE_OF_NP

    shape = b.static_dims(ins[0], "shape")
    given = node.attrs.get("value")
    array = numpy_helper.to_array(given) if given is not None else np.zeros(1, np.float32)
    if array.dtype not in DTYPE_OF_NP:
        raise NotLazy("a fill of a dtype stitch lacks")
    return [lz.fill(DTYPE_OF_NP[array.dtype], shape, array.reshape(-1)[0].item())]


RULES = {
    **{op: arithmetic for op in ("Add", "Sub", "Mul", "Div", "Mod", "Neg")},
    **{op: comparison for op in lz.COMPARISONS},
    **{op: logic for op in ("Not", "And", "Or", "Xor")},
    "Where": where,
    "Max": extreme,
    "Min": extreme,
    "Cast": cast,
    "CastLike": cast,
    "Squeeze": layout(squeeze_target),
    "Unsqueeze": layout(unsqueeze_target),
    "Flatten": layout(flatten_target),
    "Reshape": layout(reshape_target),
    "Expand": layout(expand_shape),
    "Transpose": transpose,
    "Concat": concat,
    "Slice": slice_,
    "Gather": gather,
    "GatherElements": gather_elements,
    "GatherND": gather_nd,
    "CumSum": cumsum,
    "Range": range_,
    "ConstantOfShape": constant_of_shape,
}
