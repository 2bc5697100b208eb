"""The ONNX ops stitch imports: each one a function from (builder, node, inputs) to its output values.

Ops stitch has map onto one op; the others (Softmax, LayerNormalization,
Gelu, Gemm, the activations, the compound reductions) expand into stitch ops
following the formulas of the ONNX operator specification. A converter raises
`Unsupported` for an attribute value or dtype it cannot express.
"""

from __future__ import annotations

import math

import numpy as np

from ..engine.ir.program import FLOAT_DTYPES
from .onnx_builder import (
    FOLD_LIMIT,
    NOT_FOLDED,
    Builder,
    Known,
    Sym,
    Unsupported,
    Value,
    check_dims,
    invalid,
    normal_axes,
    normal_axis,
    onnx_dtype,
)
from .onnx_movement import MOVEMENT_CONVERTERS, NUMPY_FOLDERS, pad_axis, slice_ranges


class Node:
    """A NodeProto with its attributes decoded, and the opset its defaults come from."""

    def __init__(self, proto, opset: int):
        from onnx import helper

        self.proto = proto
        self.op_type = proto.op_type
        self.opset = opset
        self.out = proto.output[0] if proto.output else proto.op_type
        self.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}

    def attr(self, name: str, default=None):
        v = self.attrs.get(name, default)
        return v.decode() if isinstance(v, bytes) else v


def translate(b: Builder, proto, ins: list[Value | None]) -> list[Value]:
    """The output values of one node: evaluated now when its inputs are all known, else emitted."""
    if proto.domain not in ("", "ai.onnx"):
        raise Unsupported("op", f"op domain '{proto.domain}' (stitch imports the default ONNX domain)")
    node = Node(proto, b.opset)
    check_schema(node, ins)
    convert = CONVERTERS.get(node.op_type)
    if foldable(node, ins):
        try:
            return fold(node, ins)
        except Exception as err:
            if convert is None:
                raise Unsupported("op", f"{node.op_type} failed at import time ({err})") from None
    if convert is None:
        raise Unsupported("op", f"stitch has no translation for {node.op_type}")
    results = convert(b, node, ins)
    if any(o and k >= len(results) for k, o in enumerate(proto.output)):
        raise Unsupported("op", f"{node.op_type} output {len(results)} ('{proto.output[len(results)]}') "
                                "is not supported")
    return results


def check_schema(node: Node, ins: list[Value | None]) -> None:
    """The node against its operator's schema at the model's opset: required inputs given, attributes
    the op has, each of the kind the specification says (an `axis` that is a list is an invalid model,
    not a crash in a converter). Ops onnx does not know are left to the converters (unsupported)."""
    from onnx import AttributeProto, defs

    try:
        schema = defs.get_schema(node.op_type, max(node.opset, 1), "")
    except Exception:
        return
    for k, formal in enumerate(schema.inputs):
        if formal.option == defs.OpSchema.FormalParameterOption.Single and (k >= len(ins) or ins[k] is None):
            raise invalid(f"{node.op_type} needs its input {k} ('{formal.name}')")
    kinds = AttributeProto.AttributeType.Name
    for a in node.proto.attribute:
        spec = schema.attributes.get(a.name)
        if spec is None:
            raise invalid(f"{node.op_type} has no attribute '{a.name}'")
        if a.type != int(spec.type):
            raise invalid(f"{node.op_type}'s attribute '{a.name}' is {kinds(a.type)}, the specification says "
                          f"{kinds(int(spec.type))}")
    missing = [name for name, spec in schema.attributes.items() if spec.required and name not in node.attrs]
    if missing:
        raise invalid(f"{node.op_type} needs the attribute '{missing[0]}'")


def is_supported(proto) -> bool:
    return proto.domain in ("", "ai.onnx") and proto.op_type in CONVERTERS


def foldable(node: Node, ins: list[Value | None]) -> bool:
    """Inputs all known, and no weight among them: evaluate at import time. An initializer of integers or
    bools, or of at most FOLD_LIMIT elements, is no weight here (the exporters keep shape arithmetic's
    constants and position buffers as initializers); float tensors stay parameters a user may replace."""
    given = [i for i in ins if i is not None]
    subgraphs = any(a.type in (a.GRAPH, a.GRAPHS) for a in node.proto.attribute)  # they read outer values
    return bool(given) and not subgraphs and node.op_type not in NOT_FOLDED and all(
        isinstance(i, Known) and not is_weight(i) for i in given)


def is_weight(v: Known) -> bool:
    return bool(v.param) and v.array.dtype.kind not in "iub" and v.array.size > FOLD_LIMIT


def fold(node: Node, ins: list[Value | None]) -> list[Value]:
    """Evaluate the node with onnx's reference evaluator, at the model's opset (with numpy where it is wrong)."""
    from onnx import ValueInfoProto, helper
    from onnx.reference import ReferenceEvaluator

    outputs = [o for o in node.proto.output if o]
    if node.op_type in NUMPY_FOLDERS:
        arrays = NUMPY_FOLDERS[node.op_type](node, [None if v is None else v.array for v in ins])
        return [Known(np.asarray(a), name=name) for a, name in zip(arrays, outputs)]
    feeds = {name: v.array for name, v in zip(node.proto.input, ins) if name and v is not None}
    graph = helper.make_graph([node.proto], "fold", [ValueInfoProto(name=n) for n in feeds],
                              [ValueInfoProto(name=o) for o in node.proto.output if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", node.opset)])
    outs = ReferenceEvaluator(model).run(None, feeds)
    return [Known(np.asarray(o), name=name) for o, name in zip(outs, [o for o in node.proto.output if o])]


# -- converters ---------------------------------------------------------------


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


def convert_shape(b, node, ins):
    shape = b.type_of(ins[0]).shape
    start, end = node.attr("start", 0), node.attr("end", len(shape))
    return [Known(np.array(shape[start:end], np.int64))]


def convert_size(b, node, ins):
    return [Known(np.array(b.type_of(ins[0]).size, np.int64))]


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


def convert_conv(b, node, ins):
    """Conv (any group, any number of spatial axes). The input, zero-padded by a concat, has each
    spatial axis split into (output position, tap) by `windows`: index maps, no copy. Group 1 is
    one product: the windows laid out as rows (im2col, [N, positions, C*K], K the kernel's
    positions) times the weight as a [C*K, M] matrix; other groups are one product with the groups
    as a batch axis (wav2vec2's positional Conv: 16 groups). A depthwise Conv (group = channels,
    one output channel each) multiplies the windows by each channel's weights and sums over the
    taps: no product."""
    x, w = ins[0], ins[1]
    xt, wt = b.type_of(x), b.type_of(w)
    dtype = float_of(b, x)
    if xt.rank < 3 or wt.rank != xt.rank:
        raise invalid(f"Conv of an input of rank {xt.rank} with a weight of rank {wt.rank}")
    n, c, spatial = xt.shape[0], xt.shape[1], xt.shape[2:]
    m, kernel = wt.shape[0], wt.shape[2:]
    d = len(spatial)
    group = node.attr("group", 1)
    depthwise = group == c > 1 and m == c  # each channel convolved with its own kernel
    if (group < 1 or wt.shape[1] * group != c or m % group
            or list(node.attr("kernel_shape") or kernel) != list(kernel)):
        raise invalid(f"Conv weight {list(wt.shape)} in {group} group(s) for an input of {c} channels")
    strides = list(node.attr("strides") or [1] * d)
    dilations = list(node.attr("dilations") or [1] * d)
    pads = list(node.attr("pads") or [0] * (2 * d))
    if len(strides) != d or len(dilations) != d or len(pads) != 2 * d or min(strides + dilations) < 1 or min(pads) < 0:
        raise invalid(f"Conv strides {strides}, dilations {dilations}, pads {pads} for {d} spatial axes")
    span = [(k - 1) * dl + 1 for k, dl in zip(kernel, dilations)]
    auto = node.attr("auto_pad", "NOTSET")
    if auto == "VALID":
        pads = [0] * (2 * d)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [max((-(-i // st) - 1) * st + sp - i, 0) for i, st, sp in zip(spatial, strides, span)]
        small = [t // 2 for t in total]
        big = [t - h for t, h in zip(total, small)]
        pads = (small + big) if auto == "SAME_UPPER" else (big + small)
    elif auto != "NOTSET":
        raise invalid(f"Conv auto_pad '{auto}'")
    padded = [i + pads[a] + pads[a + d] for a, i in enumerate(spatial)]
    out = [(p - sp) // st + 1 for p, sp, st in zip(padded, span, strides)]
    if min(out) < 1:
        raise invalid(f"Conv kernel {list(kernel)} (dilated {span}) is larger than the padded input {padded}")
    k, positions = math.prod(kernel), math.prod(out)
    hint = node.out
    for a in range(d):  # zeros on each side of each padded axis
        x = pad_axis(b, x, 2 + a, pads[a], pads[a + d], "constant", 0, hint)
    for a in range(d):  # [N, C, o1, k1, ..., od, kd]: each spatial axis split into (output position, tap)
        x = windows(b, x, 2 + 2 * a, out[a], kernel[a], strides[a], dilations[a], hint)
    if depthwise:  # the windows times each channel's K weights, summed over the taps
        per_tap = (c,) + tuple(v for kk in kernel for v in (1, kk))
        taps_w = (Known(w.array.reshape(per_tap), param=w.param, name=w.name) if isinstance(w, Known)
                  else reshape(b, w, per_tap, hint))
        if dtype == "f16":  # multiplied and summed in f32, rounded once (as an f16 product is)
            x, taps_w = cast(b, x, "f32", hint), cast(b, taps_w, "f32", hint)
        y = b.op("sum", [b.op("mul", [x, taps_w], hint)], hint, axes=tuple(3 + 2 * a for a in range(d)))
        y = cast(b, y, dtype, hint) if dtype == "f16" else y
        if len(ins) > 2 and ins[2] is not None:
            y = b.op("add", [y, reshape(b, ins[2], (c,) + (1,) * d, hint)], hint)
        return [y]
    # rows [N, o1, ..., od, C, k1, ..., kd]: one row of C*K values per output position; taps first
    # ([N, o..., k..., C]) where a window is a concat of slices, so that its select is on a range of
    # k (the lowering narrows each tap's side to its own C values: no div/mod left in the rows;
    # wav2vec2's strided Conv1d, 3 taps: 230 -> 158 ms)
    taps_first = any(sliced(kk, st, dl) for kk, st, dl in zip(kernel, strides, dilations))
    o_axes, k_axes = tuple(2 + 2 * a for a in range(d)), tuple(3 + 2 * a for a in range(d))
    rows = b.op("transpose", [x], hint, perm=(0,) + o_axes + (k_axes + (1,) if taps_first else (1,) + k_axes))
    if group == 1:
        rows = reshape(b, rows, (n, positions, c * k), hint)
    elif taps_first:  # [N, positions, K, G, C/G] -> [N, G, positions, K*C/G]
        rows = b.op("transpose", [reshape(b, rows, (n, positions, k, group, c // group), hint)], hint,
                    perm=(0, 3, 1, 2, 4))
        rows = reshape(b, rows, (n, group, positions, k * (c // group)), hint)
    else:  # [N, G, positions, C/G*K]: one product per group, the groups a batch axis
        rows = b.op("transpose", [reshape(b, rows, (n, positions, group, c // group * k), hint)], hint,
                    perm=(0, 2, 1, 3))
    lead = (group,) if group > 1 else ()
    # the weight as [G, C/G*K, M/G] ([C*K, M] for group 1; K*C/G rows taps first), laid out at import
    per_group = (group, m // group, c // group, k)
    order = (0, 3, 2, 1) if taps_first else (0, 2, 3, 1)
    if isinstance(w, Known):
        matrix = Known(np.ascontiguousarray(w.array.reshape(per_group).transpose(order).reshape(
            lead + (c // group * k, m // group))), param=w.param, name=w.name)
    else:
        matrix = reshape(b, b.op("transpose", [reshape(b, w, per_group, hint)], hint, perm=order),
                         lead + (c // group * k, m // group), hint)
    y = b.op("matmul", [rows, matrix], hint)  # [N, positions, M] ([N, G, positions, M/G] in groups)
    if len(ins) > 2 and ins[2] is not None:
        y = b.op("add", [y, reshape(b, ins[2], lead + (1,) * bool(lead) + (m // group,), hint)], hint)
    y = b.op("transpose", [y], hint, perm=(0,) + tuple(range(1, len(lead) + 1)) + (len(lead) + 2, len(lead) + 1))
    return [reshape(b, y, (n, m, *out), hint)]


# Whisper's k=3 convolutions as windows over copies: the search stored the first product's output
# before its bias and GELU and recomputed them per tap in the second's im2col (3.7 ms, 0.63 as slices)
SLICED_TAPS = 4


def sliced(k: int, stride: int, dilation: int) -> bool:
    """Whether `windows` makes an axis's windows of k taps as a concat of strided slices."""
    return 1 < k <= SLICED_TAPS and not (stride == k and dilation == 1)


def windows(b: Builder, x: Value, axis: int, count: int, k: int, stride: int, dilation: int, hint: str) -> Value:
    """`x` with `axis` split into [count, k] windows: [..., o, t, ...] reads x[..., o * stride + t * dilation, ...].
    Windows that tile the axis (stride = k, dilation 1) are a reshape of it, one tap (k = 1) a strided slice.
    Up to SLICED_TAPS taps are one strided slice each, stacked by a concat (a select per tap). More
    come from rows of length L + stride laid over copies of the axis (length L): row o starts
    o * stride further along, and its first (k - 1) * dilation + 1 values are the window. The reshapes'
    div/mod simplify away (o * stride + t * dilation < L), so the index map is affine: no copy, no
    select, whatever the taps (wav2vec2's 128: as slices, a chain of 127 selects took 200 s to
    compile and ran 200x onnxruntime's time)."""
    shape = b.type_of(x).shape
    before, length, after = shape[:axis], shape[axis], shape[axis + 1:]
    if k == 1 or (stride == k and dilation == 1):
        r = range(0, (count - 1) * stride + 1, stride) if k == 1 else range(count * k)
        return reshape(b, slice_ranges(b, x, {axis: r}, hint), before + (count, k) + after, hint)
    if sliced(k, stride, dilation):  # one strided slice per tap, stacked
        taps = [reshape(b, slice_ranges(b, x, {axis: range(t * dilation, t * dilation + (count - 1) * stride + 1,
                                                           stride)}, hint), before + (count, 1) + after, hint)
                for t in range(k)]
        return b.emit("concat", taps, hint, axis=axis + 1)
    row = length + stride
    copies = -(-count * row // length)
    x = b.op("broadcast_to", [reshape(b, x, before + (1, length) + after, hint)], hint,
             shape=before + (copies, length) + after)
    x = slice_ranges(b, reshape(b, x, before + (copies * length,) + after, hint), {axis: range(count * row)}, hint)
    x = reshape(b, x, before + (count, row) + after, hint)
    return slice_ranges(b, x, {axis + 1: range(0, (k - 1) * dilation + 1, dilation)}, hint)


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


def convert_reshape(b, node, ins):
    """0 copies the input's dimension (unless allowzero), one -1 is inferred."""
    x = b.type_of(ins[0])
    spec = node.attr("shape") if node.opset < 5 else b.static_ints(ins[1], "shape")
    allowzero = node.attr("allowzero", 0)
    if spec is None or any(d < -1 for d in spec) or list(spec).count(-1) > 1:
        raise invalid(f"Reshape to {spec} (dimensions are >= 0, with at most one -1)")
    if not allowzero and any(d == 0 and k >= x.rank for k, d in enumerate(spec)):
        raise invalid(f"Reshape to {list(spec)} copies a dimension {x} does not have")
    shape = [x.shape[k] if d == 0 and not allowzero else d for k, d in enumerate(spec)]
    check_dims(tuple(shape), "the Reshape's target shape")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = x.size // known
    if math.prod(shape) != x.size:
        raise invalid(f"Reshape of {x} ({x.size} elements) to {list(spec)}")
    return [reshape(b, ins[0], tuple(shape), node.out)]


def convert_expand(b, node, ins):
    from ..engine.ir.check import broadcast_shapes

    x = b.type_of(ins[0])
    shape = broadcast_shapes(x.shape, tuple(b.static_ints(ins[1], "shape")))
    if shape is None:
        raise Unsupported("shape", f"Expand of {x} to a shape it does not broadcast to")
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


def convert_squeeze(b, node, ins):
    x = b.type_of(ins[0])
    axes = axes_of(b, node, ins, 13)
    drop = set(normal_axes(axes, x.rank, "a Squeeze axis")) if axes else {k for k, d in enumerate(x.shape) if d == 1}
    if any(x.shape[a] != 1 for a in drop):
        raise invalid(f"Squeeze of axes {sorted(drop)} of {x}, not all of length 1")
    return [reshape(b, ins[0], tuple(d for k, d in enumerate(x.shape) if k not in drop), node.out)]


def convert_unsqueeze(b, node, ins):
    x = b.type_of(ins[0])
    axes = axes_of(b, node, ins, 13)
    if axes is None:
        raise invalid("Unsqueeze needs axes")
    rank = x.rank + len(axes)
    new = set(normal_axes(axes, rank, "an Unsqueeze axis"))
    dims = iter(x.shape)
    return [reshape(b, ins[0], tuple(1 if k in new else next(dims) for k in range(rank)), node.out)]


def convert_flatten(b, node, ins):
    x = b.type_of(ins[0])
    axis = node.attr("axis", 1)
    if not -x.rank <= axis <= x.rank:
        raise invalid(f"Flatten's axis {axis} is out of range for a tensor of rank {x.rank}")
    axis = axis + x.rank if axis < 0 else axis
    return [reshape(b, ins[0], (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])), node.out)]


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


CONVERTERS = {
    "Identity": convert_identity,
    "Constant": convert_constant,
    "Shape": convert_shape,
    "Size": convert_size,
    **{onnx: unary(op) for onnx, op in [("Neg", "neg"), ("Abs", "abs"), ("Exp", "exp"), ("Log", "log"),
                                         ("Sqrt", "sqrt"), ("Tanh", "tanh"), ("Sigmoid", "sigmoid"),
                                         ("Relu", "relu"), ("Erf", "erf")]},
    "Reciprocal": convert_reciprocal,
    **{onnx: binary(op) for onnx, op in [("Add", "add"), ("Sub", "sub"), ("Mul", "mul"), ("Less", "less"),
                                          ("Greater", "greater"), ("Equal", "equal")]},
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
    "Conv": convert_conv,
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
}


# -- normalizations and layout ops expressed with reshape/transpose --------------


def channel_param(b: Builder, p: Value, rank: int, hint: str) -> Value:
    """A per-channel [C] parameter shaped [C, 1, ...] to broadcast along axis 1 of a rank-`rank` tensor."""
    c = b.type_of(p).shape
    return reshape(b, p, c + (1,) * (rank - 2), hint)


def normalize(b: Builder, x: Value, axes: tuple[int, ...], eps: float, hint: str) -> tuple[Sym, Sym, Sym]:
    """(x - mean) * rsqrt(var + eps) over `axes`, with the mean and the inverse standard deviation."""
    mean = b.op("mean", [x], hint, axes=axes, keepdims=True)
    d = b.op("sub", [x, mean], hint)
    var = b.op("mean", [b.op("mul", [d, d], hint)], hint, axes=axes, keepdims=True)
    inv = b.op("rsqrt", [b.op("add", [var, const(eps)], hint)], hint)
    return b.op("mul", [d, inv], hint), mean, inv


def convert_rms_norm(b, node, ins):
    """x * rsqrt(mean(x^2) + eps) * scale over the axes from `axis`, computed in stash_type."""
    x = ins[0]
    t = b.type_of(x)
    float_of(b, x)
    axes = tuple(range(normal_axis(node.attr("axis", -1), t.rank), t.rank))
    xs = cast(b, x, onnx_dtype(node.attr("stash_type", 1)), node.out)
    ms = b.op("mean", [b.op("mul", [xs, xs], node.out)], node.out, axes=axes, keepdims=True)
    inv = b.op("rsqrt", [b.op("add", [ms, const(float(node.attr("epsilon", 1e-5)))], node.out)], node.out)
    return [b.op("mul", [cast(b, b.op("mul", [xs, inv], node.out), t.dtype, node.out), ins[1]], node.out)]


def convert_batch_norm(b, node, ins):
    """Inference: (x - mean) * rsqrt(var + eps) * scale + bias, per channel (axis 1)."""
    if node.attr("training_mode", 0):
        raise Unsupported("op", "BatchNormalization in training mode")
    x, scale, bias, mean, var = ins[:5]
    rank = rank_of(b, x)
    inv = b.op("rsqrt", [b.op("add", [channel_param(b, var, rank, node.out),
                                      const(float(node.attr("epsilon", 1e-5)))], node.out)], node.out)
    d = b.op("sub", [x, channel_param(b, mean, rank, node.out)], node.out)
    y = b.op("mul", [b.op("mul", [d, inv], node.out), channel_param(b, scale, rank, node.out)], node.out)
    return [b.op("add", [y, channel_param(b, bias, rank, node.out)], node.out)]


def convert_instance_norm(b, node, ins):
    x = ins[0]
    rank = rank_of(b, x)
    y, _, _ = normalize(b, x, tuple(range(2, rank)), float(node.attr("epsilon", 1e-5)), node.out)
    y = b.op("mul", [y, channel_param(b, ins[1], rank, node.out)], node.out)
    return [b.op("add", [y, channel_param(b, ins[2], rank, node.out)], node.out)]


def convert_group_norm(b, node, ins):
    """Opset 21: normalize each group of channels, then per-channel scale and bias, in stash_type."""
    if node.opset < 21:
        raise Unsupported("op", "GroupNormalization before opset 21 (per-group scale and bias)")
    x = ins[0]
    t = b.type_of(x)
    groups = node.attr("num_groups")
    xs = cast(b, x, onnx_dtype(node.attr("stash_type", 1)), node.out)
    grouped = reshape(b, xs, (t.shape[0], groups, t.size // (t.shape[0] * groups)), node.out)
    y, _, _ = normalize(b, grouped, (2,), float(node.attr("epsilon", 1e-5)), node.out)
    y = cast(b, reshape(b, y, t.shape, node.out), t.dtype, node.out)
    y = b.op("mul", [y, channel_param(b, ins[1], t.rank, node.out)], node.out)
    return [b.op("add", [y, channel_param(b, ins[2], t.rank, node.out)], node.out)]


def convert_mvn(b, node, ins):
    """(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9), as the ONNX function body computes it."""
    x = ins[0]
    axes = normal_axes(node.attr("axes", [0, 2, 3]), rank_of(b, x))
    mean = b.op("mean", [x], node.out, axes=axes, keepdims=True)
    mean_sq = b.op("mean", [b.op("mul", [x, x], node.out)], node.out, axes=axes, keepdims=True)
    std = b.op("sqrt", [b.op("sub", [mean_sq, b.op("mul", [mean, mean], node.out)], node.out)], node.out)
    return [b.op("div", [b.op("sub", [x, mean], node.out), b.op("add", [std, const(1e-9)], node.out)], node.out)]


def convert_lp_norm(b, node, ins):
    """x / ||x||_p along `axis` (p 1 or 2); 0 where the norm is 0."""
    x = ins[0]
    axis = (normal_axis(node.attr("axis", -1), rank_of(b, x)),)
    p = node.attr("p", 2)
    if p == 2:
        norm = b.op("sqrt", [b.op("sum", [b.op("mul", [x, x], node.out)], node.out, axes=axis, keepdims=True)],
                    node.out)
    elif p == 1:
        norm = b.op("sum", [b.op("abs", [x], node.out)], node.out, axes=axis, keepdims=True)
    else:
        raise Unsupported("op", f"LpNormalization with p={p}")
    zero = b.op("equal", [norm, const(0.0)], node.out)
    return [b.op("where", [zero, const(0.0), b.op("div", [x, norm], node.out)], node.out)]


def global_pool(op: str):
    def convert(b, node, ins):
        return [b.op(op, [ins[0]], node.out, axes=tuple(range(2, rank_of(b, ins[0]))), keepdims=True)]

    return convert


def convert_depth_to_space(b, node, ins):
    n, c, h, w = b.type_of(ins[0]).shape
    bs = node.attr("blocksize")
    if node.attr("mode", "DCR") == "DCR":
        split, perm = (n, bs, bs, c // bs**2, h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, perm = (n, c // bs**2, bs, bs, h, w), (0, 1, 4, 2, 5, 3)
    moved = b.op("transpose", [reshape(b, ins[0], split, node.out)], node.out, perm=perm)
    return [reshape(b, moved, (n, c // bs**2, h * bs, w * bs), node.out)]


def convert_space_to_depth(b, node, ins):
    n, c, h, w = b.type_of(ins[0]).shape
    bs = node.attr("blocksize")
    split = reshape(b, ins[0], (n, c, h // bs, bs, w // bs, bs), node.out)
    perm = (0, 3, 5, 1, 2, 4) if node.attr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    moved = b.op("transpose", [split], node.out, perm=perm)
    return [reshape(b, moved, (n, c * bs * bs, h // bs, w // bs), node.out)]


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


CONVERTERS.update({
    "RMSNormalization": convert_rms_norm,
    "BatchNormalization": convert_batch_norm,
    "InstanceNormalization": convert_instance_norm,
    "GroupNormalization": convert_group_norm,
    "MeanVarianceNormalization": convert_mvn,
    "LpNormalization": convert_lp_norm,
    "GlobalAveragePool": global_pool("mean"),
    "GlobalMaxPool": global_pool("max"),
    "DepthToSpace": convert_depth_to_space,
    "SpaceToDepth": convert_space_to_depth,
    "Dropout": convert_dropout,
    "Swish": convert_swish,
    "IsNaN": convert_isnan,
    "IsInf": convert_isinf,
    "Sign": convert_sign,
    "Shrink": convert_shrink,
    **MOVEMENT_CONVERTERS,
})
