"""ONNX's arithmetic, comparison, logic, matmul, reduction and activation ops as stitch ops: each
converter a function from (builder, node, inputs) to its output values. Ops stitch has map onto one
op; the others (Softmax, LayerNormalization, Gelu, Gemm, the activations, the compound reductions)
expand following the formulas of the ONNX operator specification. A converter raises `Unsupported`
for an attribute value or dtype it cannot express.
"""

from __future__ import annotations

import math

import numpy as np

from ..engine.ir import dims
from ..engine.ir.program import FLOAT_DTYPES
from .onnx_builder import (
    Builder,
    Known,
    Lazy,
    Node,
    Sym,
    Unsupported,
    Value,
    check_dims,
    invalid,
    normal_axes,
    normal_axis,
    onnx_dtype,
)


def unary(op: str):
    return lambda b, node, ins: [b.op(op, [ins[0]], node.out)]


def binary(op: str):
    return lambda b, node, ins: [b.op(op, [ins[0], ins[1]], node.out)]


def variadic(op: str):
    def convert(b, node, ins):
        acc = ins[0]
        for x in ins[1:]:
            acc = b.op(op, [acc, x], node.out)
        return [acc]

    return convert


def float_of(b: Builder, x: Value) -> str:
    dt = b.type_of(x).dtype
    if dt not in FLOAT_DTYPES:
        raise Unsupported("dtype", f"needs a float tensor, got {dt}")
    return dt


def cast(b: Builder, x: Value, dtype: str, hint: str) -> Value:
    from ..engine.ir.interp import np_dtype

    if b.type_of(x).dtype == dtype:
        return x
    if isinstance(x, Known) and not x.param:
        return Known(x.array.astype(np_dtype(dtype)))
    return b.op("cast", [x], hint, dtype=dtype)


def rank_of(b: Builder, x: Value) -> int:
    return b.type_of(x).rank


def const(value) -> Known:
    """A scalar known value (written as a literal of its operands' dtype)."""
    return Known(np.asarray(value))


def convert_identity(b, node, ins):
    return [ins[0]]


def convert_reciprocal(b, node, ins):
    float_of(b, ins[0])
    return [b.op("div", [const(1.0), ins[0]], node.out)]


def convert_pow(b, node, ins):
    """ONNX Pow keeps the base's dtype; an integer base is raised in f64 and cast back."""
    x, y = ins
    dt = b.type_of(x).dtype
    if dt in FLOAT_DTYPES:
        return [b.op("pow", [x, cast(b, y, dt, node.out)], node.out)]
    if dt == "bool" or b.type_of(y).dtype == "bool":
        raise Unsupported("dtype", "Pow of bool")
    p = b.op("pow", [cast(b, x, "f64", node.out), cast(b, y, "f64", node.out)], node.out)
    return [b.op("cast", [p], node.out, dtype=dt)]


def convert_div(b, node, ins):
    if b.type_of(ins[0]).dtype not in FLOAT_DTYPES:
        raise Unsupported("dtype", f"integer Div truncates, stitch's div takes floats only, got "
                                   f"{b.type_of(ins[0]).dtype}")
    return [b.op("div", ins[:2], node.out)]


def convert_or_equal(cmp: str):
    """LessOrEqual / GreaterOrEqual as `cmp or equal` (so that NaN compares false, as in ONNX)."""
    def convert(b, node, ins):
        strict = b.op(cmp, ins[:2], node.out)
        return [b.op("where", [strict, const(True), b.op("equal", ins[:2], node.out)], node.out)]

    return convert


def convert_not(b, node, ins):
    return [b.op("equal", [ins[0], const(False)], node.out)]


def convert_and(b, node, ins):
    return [b.op("where", [ins[0], ins[1], const(False)], node.out)]


def convert_or(b, node, ins):
    return [b.op("where", [ins[0], const(True), ins[1]], node.out)]


def convert_xor(b, node, ins):
    return [b.op("equal", [b.op("equal", ins[:2], node.out), const(False)], node.out)]


def convert_where(b, node, ins):
    return [b.op("where", ins[:3], node.out)]


def convert_cast(b, node, ins):
    return [cast(b, ins[0], onnx_dtype(node.attr("to")), node.out)]


def convert_castlike(b, node, ins):
    return [cast(b, ins[0], b.type_of(ins[1]).dtype, node.out)]


def convert_constant(b, node, ins):
    from onnx import numpy_helper

    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in node.attrs:
            v = node.attrs[key]
            array = numpy_helper.to_array(v) if key == "value" else np.asarray(
                v, np.float32 if "float" in key else np.int64)
            return [Known(array, name=node.out)]
    raise Unsupported("dtype", f"a Constant given as {', '.join(node.attrs)}")


def known_dims(values: list, shape: tuple) -> Value:
    """Sizes known at import time: a Known of int64, or a Lazy when some are symbolic."""
    if all(isinstance(v, int) for v in values):
        return Known(np.array(values, np.int64).reshape(shape))
    return Lazy("i64", shape, np.array(values, dtype=object).reshape(shape))


def convert_shape(b, node, ins):
    shape = b.type_of(ins[0]).shape
    start, end = node.attr("start", 0), node.attr("end", len(shape))
    picked = list(shape[start:end])
    return [known_dims(picked, (len(picked),))]


def convert_size(b, node, ins):
    return [known_dims([b.type_of(ins[0]).size], ())]


def convert_matmul(b, node, ins):
    return [b.op("matmul", ins[:2], node.out)]


def convert_gemm(b, node, ins):
    """alpha * A' @ B' + beta * C."""
    a, w = ins[0], ins[1]
    if node.attr("transA", 0):
        a = b.op("transpose", [a], node.out, perm=(1, 0))
    if node.attr("transB", 0):
        w = b.op("transpose", [w], node.out, perm=(1, 0))
    y = b.op("matmul", [a, w], node.out)
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    if alpha != 1.0:
        y = b.op("mul", [y, const(float_scalar(b, y, alpha))], node.out)
    if len(ins) > 2 and ins[2] is not None:
        c = ins[2] if beta == 1.0 else b.op("mul", [ins[2], const(float_scalar(b, y, beta))], node.out)
        y = b.op("add", [y, c], node.out)
    return [y]


def float_scalar(b: Builder, like: Value, value: float) -> float:
    float_of(b, like)
    return float(value)


def convert_transpose(b, node, ins):
    perm = node.attr("perm") or list(reversed(range(rank_of(b, ins[0]))))
    return [b.op("transpose", [ins[0]], node.out, perm=tuple(perm))]


def reshape(b: Builder, x: Value, shape: tuple[int, ...], hint: str) -> Value:
    if b.type_of(x).shape == tuple(shape):
        return x
    return b.op("reshape", [x], hint, shape=tuple(shape))


def reshape_target(b: Builder, node: Node, ins) -> tuple:
    """Reshape's target shape: 0 copies the input's dimension (unless allowzero), one -1 is inferred
    (symbolically: `[-1, n, 16]` of a tensor [1, 4, n, 16] is [4, n, 16])."""
    x = b.type_of(ins[0])
    spec = node.attr("shape") if node.opset < 5 else b.static_dims(ins[1], "shape")
    allowzero = node.attr("allowzero", 0)
    if spec is None or any(isinstance(d, int) and d < -1 for d in spec) or list(spec).count(-1) > 1:
        raise invalid(f"Reshape to {spec} (dimensions are >= 0, with at most one -1)")
    if not allowzero and any(d == 0 and k >= x.rank for k, d in enumerate(spec)):
        raise invalid(f"Reshape to {list(spec)} copies a dimension {x} does not have")
    shape = [x.shape[k] if d == 0 and not allowzero else d for k, d in enumerate(spec)]
    check_dims(tuple(shape), "the Reshape's target shape")
    if -1 in shape:
        shape[shape.index(-1)] = quotient(list(x.shape), [d for d in shape if d != -1], x, spec)
    if dims.size(shape) != x.size:
        raise invalid(f"Reshape of {x} ({x.size} elements) to {list(spec)}")
    return tuple(shape)


def quotient(num: list, den: list, x, spec) -> dims.Dim:
    """prod(num) // prod(den): for symbolic dimensions, the factors both share cancelled first, then an
    exact division of what is left (Unsupported when it does not divide as polynomials)."""
    if all(isinstance(d, int) for d in num + den):
        return math.prod(num) // math.prod(den)
    num = list(num)
    rest = []
    for d in den:
        if d in num:
            num.remove(d)
        else:
            rest.append(d)
    q = dims.exact_div(dims.size(num), dims.size(rest))
    if q is None:
        raise Unsupported("shape", f"Reshape of {x} to {list(spec)}: the -1 is {dims.size(num)} / {dims.size(rest)}, "
                                   "which is no dimension stitch can write")
    return q


def convert_reshape(b, node, ins):
    return [reshape(b, ins[0], reshape_target(b, node, ins), node.out)]


def expand_target(b: Builder, ins) -> tuple:
    from ..engine.ir.check import broadcast_shapes

    x = b.type_of(ins[0])
    shape = broadcast_shapes(x.shape, tuple(b.static_dims(ins[1], "shape")))
    if shape is None:
        raise Unsupported("shape", f"Expand of {x} to a shape it does not broadcast to")
    return shape


def convert_expand(b, node, ins):
    x = b.type_of(ins[0])
    shape = expand_target(b, ins)
    if shape == x.shape:
        return [ins[0]]
    return [b.op("broadcast_to", [ins[0]], node.out, shape=check_dims(shape, "the Expand's shape"))]


def axes_of(b: Builder, node: Node, ins, since: int) -> list[int] | None:
    """An axes list from the attribute (before opset `since`) or the second input; None if absent."""
    if node.opset < since:
        return node.attr("axes")
    if len(ins) > 1 and ins[1] is not None:
        return b.static_ints(ins[1], "axes")
    return None


def squeeze_target(b: Builder, node: Node, ins) -> tuple:
    x = b.type_of(ins[0])
    axes = axes_of(b, node, ins, 13)
    if not axes and any(isinstance(d, dims.Expr) for d in x.shape):
        raise Unsupported("shape", f"Squeeze of {x} without axes: whether a symbolic dimension is 1 is known only "
                                   "at run time")
    drop = set(normal_axes(axes, x.rank, "a Squeeze axis")) if axes else {k for k, d in enumerate(x.shape) if d == 1}
    if any(x.shape[a] != 1 for a in drop):
        raise invalid(f"Squeeze of axes {sorted(drop)} of {x}, not all of length 1")
    return tuple(d for k, d in enumerate(x.shape) if k not in drop)


def convert_squeeze(b, node, ins):
    return [reshape(b, ins[0], squeeze_target(b, node, ins), node.out)]


def unsqueeze_target(b: Builder, node: Node, ins) -> tuple:
    x = b.type_of(ins[0])
    axes = axes_of(b, node, ins, 13)
    if axes is None:
        raise invalid("Unsqueeze needs axes")
    rank = x.rank + len(axes)
    new = set(normal_axes(axes, rank, "an Unsqueeze axis"))
    given = iter(x.shape)
    return tuple(1 if k in new else next(given) for k in range(rank))


def convert_unsqueeze(b, node, ins):
    return [reshape(b, ins[0], unsqueeze_target(b, node, ins), node.out)]


def flatten_target(b: Builder, node: Node, ins) -> tuple:
    x = b.type_of(ins[0])
    axis = node.attr("axis", 1)
    if not -x.rank <= axis <= x.rank:
        raise invalid(f"Flatten's axis {axis} is out of range for a tensor of rank {x.rank}")
    axis = axis + x.rank if axis < 0 else axis
    return (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def convert_flatten(b, node, ins):
    return [reshape(b, ins[0], flatten_target(b, node, ins), node.out)]


def reduce_args(b: Builder, node: Node, ins, since: int) -> dict | None:
    """The stitch reduction attributes; None when the node is the identity (noop_with_empty_axes)."""
    axes = axes_of(b, node, ins, since)
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return None
        axes = range(rank_of(b, ins[0]))
    return {"axes": normal_axes(axes, max(rank_of(b, ins[0]), 1), "a reduced axis"),
            "keepdims": bool(node.attr("keepdims", 1))}


def reduction(op: str, before: str | None = None, after: str | None = None, since: int = 18):
    """Reduce{Sum,Mean,Max,Min} and the compound ones: before(x) elementwise, then op, then after."""
    def convert(b, node, ins):
        args = reduce_args(b, node, ins, since)
        x = ins[0]
        if args is None:
            return [x]
        if before == "square":
            x = b.op("mul", [x, x], node.out)
        elif before is not None:
            x = b.op(before, [x], node.out)
        y = b.op(op, [x], node.out, **args)
        return [b.op(after, [y], node.out) if after else y]

    return convert


def softmax_axes(b: Builder, node: Node, x: Value) -> tuple[int, ...]:
    """Opset 13 normalizes along one axis (default -1); earlier opsets over all axes from `axis` (default 1)."""
    rank = rank_of(b, x)
    if node.opset >= 13:
        return (normal_axis(node.attr("axis", -1), rank),)
    return tuple(range(normal_axis(node.attr("axis", 1), rank), rank))


def convert_softmax(b, node, ins):
    x = ins[0]
    axes = softmax_axes(b, node, x)
    e = b.op("exp", [b.op("sub", [x, b.op("max", [x], node.out, axes=axes, keepdims=True)], node.out)], node.out)
    return [b.op("div", [e, b.op("sum", [e], node.out, axes=axes, keepdims=True)], node.out)]


def convert_log_softmax(b, node, ins):
    x = ins[0]
    axes = softmax_axes(b, node, x)
    d = b.op("sub", [x, b.op("max", [x], node.out, axes=axes, keepdims=True)], node.out)
    s = b.op("sum", [b.op("exp", [d], node.out)], node.out, axes=axes, keepdims=True)
    return [b.op("sub", [d, b.op("log", [s], node.out)], node.out)]


def normalize(b: Builder, x: Value, axes: tuple[int, ...], eps: float, hint: str) -> tuple[Sym, Sym, Sym]:
    """(x - mean) * rsqrt(var + eps) over `axes`, with the mean and the inverse standard deviation."""
    mean = b.op("mean", [x], hint, axes=axes, keepdims=True)
    d = b.op("sub", [x, mean], hint)
    var = b.op("mean", [b.op("mul", [d, d], hint)], hint, axes=axes, keepdims=True)
    inv = b.op("rsqrt", [b.op("add", [var, const(eps)], hint)], hint)
    return b.op("mul", [d, inv], hint), mean, inv


def convert_layer_norm(b, node, ins):
    """(x - mean) * rsqrt(var + eps) * scale + bias, computed in stash_type; outputs Y, Mean, InvStdDev."""
    x = ins[0]
    t = b.type_of(x)
    float_of(b, x)
    axes = tuple(range(normal_axis(node.attr("axis", -1), t.rank), t.rank))
    stash = onnx_dtype(node.attr("stash_type", 1))
    normalized, mean, inv = normalize(b, cast(b, x, stash, node.out), axes, float(node.attr("epsilon", 1e-5)),
                                      node.out)
    y = b.op("mul", [cast(b, normalized, t.dtype, node.out), ins[1]], node.out)
    if len(ins) > 2 and ins[2] is not None:
        y = b.op("add", [y, ins[2]], node.out)
    return [y, mean, inv]


def convert_gelu(b, node, ins):
    """0.5 x (1 + erf(x / sqrt 2)), or with approximate='tanh' 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    x = ins[0]
    approximate = node.attr("approximate", "none")
    if approximate == "tanh":
        cube = b.op("mul", [b.op("mul", [x, x], node.out), x], node.out)
        inner = b.op("add", [x, b.op("mul", [cube, const(0.044715)], node.out)], node.out)
        g = b.op("tanh", [b.op("mul", [inner, const(math.sqrt(2 / math.pi))], node.out)], node.out)
    elif approximate == "none":
        g = b.op("erf", [b.op("mul", [x, const(1 / math.sqrt(2))], node.out)], node.out)
    else:
        raise Unsupported("op", f"Gelu approximate='{approximate}'")
    half = b.op("mul", [x, const(0.5)], node.out)
    return [b.op("mul", [half, b.op("add", [g, const(1.0)], node.out)], node.out)]


def convert_clip(b, node, ins):
    """min(max(x, lo), hi); bounds from attributes before opset 11, optional inputs after."""
    x = ins[0]
    if node.opset < 11:
        lo = node.attr("min")
        hi = node.attr("max")
        lo, hi = (None if v is None else const(np.asarray(v, np.float32)) for v in (lo, hi))
    else:
        lo, hi = (ins[k] if len(ins) > k else None for k in (1, 2))
    if lo is not None:
        x = b.op("maximum", [x, lo], node.out)
    if hi is not None:
        x = b.op("minimum", [x, hi], node.out)
    return [x]


def convert_mean(b, node, ins):
    float_of(b, ins[0])
    total = variadic("add")(b, node, ins)[0]
    return [b.op("div", [total, const(float(len(ins)))], node.out)] if len(ins) > 1 else [total]


def negative_part(scale_of_negative):
    """Activations that are x for x >= 0 and f(x) below: where(x < 0, f(x), x)."""
    def convert(b, node, ins):
        x = ins[0]
        float_of(b, x)
        neg = scale_of_negative(b, node, x, ins)
        return [b.op("where", [b.op("less", [x, const(0.0)], node.out), neg, x], node.out)]

    return convert


def _leaky(b, node, x, ins):
    return b.op("mul", [x, const(float(node.attr("alpha", 0.01)))], node.out)


def _prelu(b, node, x, ins):
    return b.op("mul", [x, ins[1]], node.out)


def _elu(b, node, x, ins):
    em1 = b.op("sub", [b.op("exp", [x], node.out), const(1.0)], node.out)
    return b.op("mul", [em1, const(float(node.attr("alpha", 1.0)))], node.out)


def convert_selu(b, node, ins):
    """gamma * (x if x > 0 else alpha * (exp(x) - 1))."""
    x = ins[0]
    float_of(b, x)
    alpha = float(node.attr("alpha", 1.67326319217681884765625))
    gamma = float(node.attr("gamma", 1.05070102214813232421875))
    neg = b.op("mul", [b.op("sub", [b.op("exp", [x], node.out), const(1.0)], node.out), const(alpha)], node.out)
    y = b.op("where", [b.op("greater", [x, const(0.0)], node.out), x, neg], node.out)
    return [b.op("mul", [y, const(gamma)], node.out)]


def convert_celu(b, node, ins):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    x = ins[0]
    float_of(b, x)
    alpha = float(node.attr("alpha", 1.0))
    e = b.op("sub", [b.op("exp", [b.op("div", [x, const(alpha)], node.out)], node.out), const(1.0)], node.out)
    neg = b.op("minimum", [b.op("mul", [e, const(alpha)], node.out), const(0.0)], node.out)
    return [b.op("add", [b.op("maximum", [x, const(0.0)], node.out), neg], node.out)]


def hard_sigmoid(b: Builder, x: Value, alpha: float, beta: float, hint: str) -> Sym:
    lin = b.op("add", [b.op("mul", [x, const(alpha)], hint), const(beta)], hint)
    return b.op("maximum", [b.op("minimum", [lin, const(1.0)], hint), const(0.0)], hint)


def convert_hard_sigmoid(b, node, ins):
    float_of(b, ins[0])
    return [hard_sigmoid(b, ins[0], float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5)), node.out)]


def convert_hard_swish(b, node, ins):
    float_of(b, ins[0])
    return [b.op("mul", [ins[0], hard_sigmoid(b, ins[0], 1 / 6, 0.5, node.out)], node.out)]


def softplus(b: Builder, x: Value, hint: str) -> Sym:
    return b.op("log", [b.op("add", [b.op("exp", [x], hint), const(1.0)], hint)], hint)


def convert_softplus(b, node, ins):
    return [softplus(b, ins[0], node.out)]


def convert_softsign(b, node, ins):
    x = ins[0]
    return [b.op("div", [x, b.op("add", [b.op("abs", [x], node.out), const(1.0)], node.out)], node.out)]


def convert_mish(b, node, ins):
    return [b.op("mul", [ins[0], b.op("tanh", [softplus(b, ins[0], node.out)], node.out)], node.out)]


def convert_thresholded_relu(b, node, ins):
    x = ins[0]
    float_of(b, x)
    above = b.op("greater", [x, const(float(node.attr("alpha", 1.0)))], node.out)
    return [b.op("where", [above, x, const(0.0)], node.out)]


def convert_dropout(b, node, ins):
    """Inference only (training_mode absent or false): the identity, and an all-true mask."""
    training = ins[2] if len(ins) > 2 else None
    if training is not None and (not isinstance(training, Known) or training.array.any()):
        raise Unsupported("op", "Dropout in training mode (random)")
    x = ins[0]
    if sum(1 for o in node.proto.output if o) < 2:
        return [x]
    return [x, b.op("equal", [b.op("equal", [x, x], node.out), b.op("equal", [x, x], node.out)], node.out)]


def convert_swish(b, node, ins):
    x = ins[0]
    scaled = b.op("mul", [x, const(float(node.attr("alpha", 1.0)))], node.out)
    return [b.op("mul", [x, b.op("sigmoid", [scaled], node.out)], node.out)]


def convert_isnan(b, node, ins):
    return [b.op("equal", [b.op("equal", ins[:1] * 2, node.out), const(False)], node.out)]


def convert_isinf(b, node, ins):
    """x beyond the dtype's largest finite value, on the sides asked for (NaN is neither)."""
    x = ins[0]
    from ..engine.ir.interp import np_dtype

    big = float(np.finfo(np_dtype(float_of(b, x))).max)
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    if pos and neg:
        return [b.op("greater", [b.op("abs", [x], node.out), const(big)], node.out)]
    if pos:
        return [b.op("greater", [x, const(big)], node.out)]
    if neg:
        return [b.op("less", [x, const(-big)], node.out)]
    return [b.op("equal", [b.op("equal", [x, x], node.out), b.op("less", [x, x], node.out)], node.out)]


def convert_sign(b, node, ins):
    """greater(x, 0) - less(x, 0), and NaN stays NaN."""
    x = ins[0]
    dt = b.type_of(x).dtype
    zero = const(0.0 if dt in FLOAT_DTYPES else 0)
    up = b.op("cast", [b.op("greater", [x, zero], node.out)], node.out, dtype=dt)
    down = b.op("cast", [b.op("less", [x, zero], node.out)], node.out, dtype=dt)
    s = b.op("sub", [up, down], node.out)
    return [b.op("where", [b.op("equal", [x, x], node.out), s, x], node.out)] if dt in FLOAT_DTYPES else [s]


def convert_shrink(b, node, ins):
    x = ins[0]
    lambd, bias = float(node.attr("lambd", 0.5)), float(node.attr("bias", 0.0))
    above = b.op("where", [b.op("greater", [x, const(lambd)], node.out), b.op("sub", [x, const(bias)], node.out),
                           const(0.0)], node.out)
    below = b.op("less", [x, const(-lambd)], node.out)
    return [b.op("where", [below, b.op("add", [x, const(bias)], node.out), above], node.out)]


def convert_bit_shift(b: Builder, node, ins):
    """BitShift(x, y, direction=LEFT|RIGHT): ONNX defines it on unsigned integers, where both are
    logical shifts, as shl and shr are on u8."""
    direction = node.attr("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise invalid(f"direction must be LEFT or RIGHT, got {direction!r}")
    return [b.op("shl" if direction == "LEFT" else "shr", [ins[0], ins[1]], node.out)]


MATH_CONVERTERS = {
    "Identity": convert_identity,
    "Constant": convert_constant,
    "Shape": convert_shape,
    "Size": convert_size,
    **{onnx: unary(op) for onnx, op in [("Neg", "neg"), ("Abs", "abs"), ("Exp", "exp"), ("Log", "log"),
                                         ("Sqrt", "sqrt"), ("Tanh", "tanh"), ("Sigmoid", "sigmoid"),
                                         ("Relu", "relu"), ("Erf", "erf")]},
    "Reciprocal": convert_reciprocal,
    **{onnx: binary(op) for onnx, op in [("Add", "add"), ("Sub", "sub"), ("Mul", "mul"), ("Less", "less"),
                                          ("Greater", "greater"), ("Equal", "equal"), ("BitwiseAnd", "bitand"),
                                          ("BitwiseOr", "bitor"), ("BitwiseXor", "bitxor")]},
    "BitShift": convert_bit_shift,
    "Div": convert_div,
    "Pow": convert_pow,
    "Max": variadic("maximum"),
    "Min": variadic("minimum"),
    "Sum": variadic("add"),
    "Mean": convert_mean,
    "LessOrEqual": convert_or_equal("less"),
    "GreaterOrEqual": convert_or_equal("greater"),
    "Not": convert_not,
    "And": convert_and,
    "Or": convert_or,
    "Xor": convert_xor,
    "Where": convert_where,
    "Cast": convert_cast,
    "CastLike": convert_castlike,
    "MatMul": convert_matmul,
    "Gemm": convert_gemm,
    "Transpose": convert_transpose,
    "Reshape": convert_reshape,
    "Expand": convert_expand,
    "Squeeze": convert_squeeze,
    "Unsqueeze": convert_unsqueeze,
    "Flatten": convert_flatten,
    "ReduceSum": reduction("sum", since=13),
    "ReduceMean": reduction("mean"),
    "ReduceMax": reduction("max"),
    "ReduceMin": reduction("min"),
    "ReduceSumSquare": reduction("sum", before="square"),
    "ReduceL1": reduction("sum", before="abs"),
    "ReduceL2": reduction("sum", before="square", after="sqrt"),
    "ReduceLogSum": reduction("sum", after="log"),
    "ReduceLogSumExp": reduction("sum", before="exp", after="log"),
    "Softmax": convert_softmax,
    "LogSoftmax": convert_log_softmax,
    "LayerNormalization": convert_layer_norm,
    "Gelu": convert_gelu,
    "Clip": convert_clip,
    "LeakyRelu": negative_part(_leaky),
    "PRelu": negative_part(_prelu),
    "Elu": negative_part(_elu),
    "Selu": convert_selu,
    "Celu": convert_celu,
    "HardSigmoid": convert_hard_sigmoid,
    "HardSwish": convert_hard_swish,
    "Softplus": convert_softplus,
    "Softsign": convert_softsign,
    "Mish": convert_mish,
    "ThresholdedRelu": convert_thresholded_relu,
    "Dropout": convert_dropout,
    "Swish": convert_swish,
    "IsNaN": convert_isnan,
    "IsInf": convert_isinf,
    "Sign": convert_sign,
    "Shrink": convert_shrink,
}
