"""The ATen ops stitch translates (torch_fx.py walks the graph): one table, ATEN, from an op overload
to a function (translator, node, *args, **kwargs) -> the node's value (a list for several outputs).

The arguments come as the op's schema has them, with tensors as program values and sizes as
dimensions. The result dtype is torch's (`node.meta["val"]`): arithmetic casts its tensor operands to
it first (torch promotes an int tensor times 0.5 to float, where stitch would read 0.5 as an int).
Ops whose semantics the ONNX importer already defines go through its converter (`onnx`), given the
node's arguments as ONNX attributes.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from ..engine.ir import dims
from .onnx_builder import Known, Unsupported, normal_axes, normal_axis
from .onnx_lazy import fill
from .onnx_math import cast, const
from .onnx_movement import pad_axis
from .onnx_ops import CONVERTERS

aten = torch.ops.aten
DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.float64: "f64", torch.int8: "i8", torch.uint8: "u8",
          torch.int32: "i32", torch.int64: "i64", torch.bool: "bool"}
NUMPY = {torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64, torch.int8: np.int8,
         torch.uint8: np.uint8, torch.int32: np.int32, torch.int64: np.int64, torch.bool: np.bool_}


class _Attrs:
    """What an ONNX converter reads of its node: the op type, attributes, the output's name, the opset."""

    def __init__(self, op_type: str, out: str, opset: int, **attrs):
        self.op_type, self.out, self.opset, self.attrs = op_type, out, opset, attrs
        self.proto = SimpleNamespace(output=[out])

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)


def onnx(t, node, op_type: str, ins: list, **attrs) -> list:
    return CONVERTERS[op_type](t.b, _Attrs(op_type, node.name, t.b.opset, **attrs), ins)


def out_dtype(t, node) -> str:
    val = node.meta["val"]
    return t.type_of(val[0] if isinstance(val, (list, tuple)) else val).dtype


def operand(t, x, dtype: str, node):
    """A tensor operand in `dtype`; a Python number as a known scalar (written as a literal)."""
    if isinstance(x, (bool, int, float)):
        return const(x)
    if isinstance(x, dims.Expr):
        raise Unsupported("shape", f"a size ({x}) used as a number")
    return cast(t.b, x, dtype, node.name)


def arith(op: str):
    """add, sub, mul, div, ...: operands in the result's dtype, then the op."""
    def convert(t, node, x, y, alpha=1, rounding_mode=None):
        if rounding_mode is not None:
            raise Unsupported("op", f"div with rounding_mode='{rounding_mode}'")
        dtype = out_dtype(t, node)
        a, b = operand(t, x, dtype, node), operand(t, y, dtype, node)
        if alpha != 1:
            b = t.b.op("mul", [b, const(alpha)], node.name)
        return t.b.op(op, [a, b], node.name)

    return convert


def unary(op: str):
    def convert(t, node, x):
        return t.b.op(op, [operand(t, x, out_dtype(t, node), node)], node.name)

    return convert


def compare(op: str, negate: bool = False):
    """eq, lt, gt (and ne as not-equal, le/ge through the ONNX converters): operands promoted as torch does."""
    def convert(t, node, x, y):
        vals = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in node.args[:2]]
        dtype = t.type_of(torch.empty((), dtype=torch.result_type(*vals))).dtype
        a, b = operand(t, x, dtype, node), operand(t, y, dtype, node)
        if op in ("LessOrEqual", "GreaterOrEqual"):
            return onnx(t, node, op, [a, b])[0]
        r = t.b.op(op, [a, b], node.name)
        return t.b.op("equal", [r, const(False)], node.name) if negate else r

    return convert


def logical(op_type: str):
    def convert(t, node, *xs):
        return onnx(t, node, op_type, [cast(t.b, x, "bool", node.name) for x in xs])[0]

    return convert


def identity(t, node, x, *args, **kwargs):
    return x


def to_copy(t, node, x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None):
    if device is not None and torch.device(device).type != "cpu":
        raise Unsupported("op", f"a copy to {device}")
    return cast(t.b, x, out_dtype(t, node), node.name)


def where(t, node, c, x, y):
    dtype = out_dtype(t, node)
    return t.b.op("where", [cast(t.b, c, "bool", node.name), operand(t, x, dtype, node),
                            operand(t, y, dtype, node)], node.name)


def clamp(t, node, x, lo=None, hi=None):
    dtype = out_dtype(t, node)
    x = operand(t, x, dtype, node)
    if lo is not None:
        x = t.b.op("maximum", [x, operand(t, lo, dtype, node)], node.name)
    if hi is not None:
        x = t.b.op("minimum", [x, operand(t, hi, dtype, node)], node.name)
    return x


def reshape_to(t, node, x, *args, **kwargs):
    """view, reshape, unsqueeze, squeeze, flatten: a reshape to the shape torch computed."""
    shape = t.shape(node.meta["val"])
    return x if t.b.type_of(x).shape == shape else t.b.op("reshape", [x], node.name, shape=shape)


def expand(t, node, x, *args, **kwargs):
    shape = t.shape(node.meta["val"])
    return x if t.b.type_of(x).shape == shape else t.b.op("broadcast_to", [x], node.name, shape=shape)


def permute(t, node, x, perm):
    rank = t.b.type_of(x).rank
    return t.b.op("transpose", [x], node.name, perm=tuple(normal_axis(p, rank) for p in perm))


def transpose(t, node, x, d0=0, d1=1):
    perm = list(range(t.b.type_of(x).rank))
    a, b = normal_axis(d0, len(perm)), normal_axis(d1, len(perm))
    perm[a], perm[b] = perm[b], perm[a]
    return t.b.op("transpose", [x], node.name, perm=tuple(perm))


def end_of(size, end):
    """A slice's end: past the axis (torch writes sys.maxsize for `x[a:]`) is the axis's size."""
    if end is None or (isinstance(end, int) and (end >= 2**62 or (isinstance(size, int) and end > size))):
        return size
    return end


def slice_(t, node, x, dim=0, start=None, end=None, step=1):
    shape = t.b.type_of(x).shape
    axis = normal_axis(dim, len(shape))
    start, end = start or 0, end_of(shape[axis], end)
    if isinstance(start, int) and start < 0:
        start = dims.add(shape[axis], start) if not isinstance(shape[axis], int) else max(shape[axis] + start, 0)
    if isinstance(end, int) and end < 0:
        end = dims.add(shape[axis], end) if not isinstance(shape[axis], int) else max(shape[axis] + end, 0)
    if (start, end, step) == (0, shape[axis], 1):
        return x
    return t.b.emit("slice", [x], node.name, axes=(axis,), starts=(start,), ends=(end,), steps=(step,))


def select(t, node, x, dim, index):
    shape = t.b.type_of(x).shape
    axis = normal_axis(dim, len(shape))
    if isinstance(index, int) and index < 0:
        index = dims.add(shape[axis], index)
    one = t.b.emit("slice", [x], node.name, axes=(axis,), starts=(index,), ends=(dims.add(index, 1),))
    return reshape_to(t, node, one)


def split(t, node, x, sizes, dim=0):
    shape = t.b.type_of(x).shape
    axis = normal_axis(dim, len(shape))
    if not isinstance(sizes, (list, tuple)):  # split.Tensor: pieces of `sizes` each, the last what is left
        step, total = sizes, shape[axis]
        if not isinstance(total, int):
            raise Unsupported("shape", f"a split of a symbolic axis ({total}) into pieces of {step}")
        sizes = [min(step, total - s) for s in range(0, total, step)]
    out, start = [], 0
    for size in sizes:
        end = dims.add(start, size)
        out.append(t.b.emit("slice", [x], node.name, axes=(axis,), starts=(start,), ends=(end,))
                   if (start, end) != (0, shape[axis]) else x)
        start = end
    return out


def cat(t, node, tensors, dim=0):
    dtype = out_dtype(t, node)
    parts = [cast(t.b, x, dtype, node.name) for x in tensors]
    axis = normal_axis(dim, t.b.type_of(parts[0]).rank)
    return parts[0] if len(parts) == 1 else t.b.emit("concat", parts, node.name, axis=axis)


def reduce(op: str):
    def convert(t, node, x, axes=None, keepdim=False, dtype=None):
        rank = t.b.type_of(x).rank
        axes = [axes] if isinstance(axes, int) else axes
        attrs = {"axes": normal_axes(axes, rank)} if axes else {}
        x = operand(t, x, out_dtype(t, node), node)
        return t.b.op(op, [x], node.name, keepdims=bool(keepdim), **attrs)

    return convert


def any_(t, node, x, axes=None, keepdim=False):
    """any as max over 0/1 ints, then greater than 0."""
    rank = t.b.type_of(x).rank
    axes = [axes] if isinstance(axes, int) else axes
    attrs = {"axes": normal_axes(axes, rank)} if axes else {}
    m = t.b.op("max", [cast(t.b, cast(t.b, x, "bool", node.name), "i32", node.name)], node.name,
               keepdims=bool(keepdim), **attrs)
    return t.b.op("greater", [m, const(0)], node.name)


def matmul(t, node, a, b):
    return t.b.op("matmul", [a, b], node.name)


def addmm(t, node, bias, a, b, beta=1, alpha=1):
    y = t.b.op("matmul", [a, b], node.name)
    if alpha != 1:
        y = t.b.op("mul", [y, const(float(alpha))], node.name)
    if beta != 1:
        bias = t.b.op("mul", [bias, const(float(beta))], node.name)
    return t.b.op("add", [y, bias], node.name)


def softmax(op_type: str):
    def convert(t, node, x, dim, half_to_float=False):
        return onnx(t, node, op_type, [x], axis=dim)[0]

    return convert


def layer_norm(t, node, x, shape, weight=None, bias=None, eps=1e-5):
    scale = weight if weight is not None else const(1.0)
    return onnx(t, node, "LayerNormalization", [x, scale, bias], axis=-len(shape), epsilon=eps)


def group_norm(t, node, x, weight, bias, n, c, hw, groups, eps):
    weight = weight if weight is not None else Known(np.ones(c, np.float32))
    bias = bias if bias is not None else Known(np.zeros(c, np.float32))
    y = onnx(t, node, "GroupNormalization", [x, weight, bias], num_groups=groups, epsilon=eps)[0]
    return [y, None, None]  # (the mean and inverse deviation per group: not translated)


def batch_norm(t, node, x, weight, bias, mean, var, momentum, eps):
    """_native_batch_norm_legit_no_training: inference batch norm."""
    c = t.b.type_of(x).shape[1]
    weight = weight if weight is not None else Known(np.ones(c, np.float32))
    bias = bias if bias is not None else Known(np.zeros(c, np.float32))
    return [onnx(t, node, "BatchNormalization", [x, weight, bias, mean, var], epsilon=eps)[0], None, None]


def gelu(t, node, x, approximate="none"):
    return onnx(t, node, "Gelu", [x], approximate=approximate)[0]


def convolution(t, node, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise Unsupported("op", "a transposed convolution")
    d = t.b.type_of(x).rank - 2
    if any(not isinstance(v, int) for v in (*stride, *padding, *dilation)):
        raise Unsupported("shape", "a convolution with symbolic strides or padding")
    expand_ = lambda v: list(v) * d if len(v) == 1 else list(v)  # noqa: E731
    pads = expand_(padding)
    return onnx(t, node, "Conv", [x, w, bias], strides=expand_(stride), pads=pads + pads,
                dilations=expand_(dilation), group=groups)[0]


def constant_pad(t, node, x, pad, value=0):
    rank = t.b.type_of(x).rank
    for k in range(len(pad) // 2):
        before, after = pad[2 * k], pad[2 * k + 1]
        if min(before, after) < 0:
            raise Unsupported("shape", "a negative pad")
        x = pad_axis(t.b, x, rank - 1 - k, before, after, "constant", value, node.name)
    return x


def full(t, node, size, value, **kwargs):
    val = node.meta["val"]
    return fill(t.type_of(val).dtype, t.shape(val), value)


def full_like(t, node, x, value, **kwargs):
    return full(t, node, None, value)


def constant_like(value):
    def convert(t, node, *args, **kwargs):
        return full(t, node, None, value)

    return convert


def scalar_tensor(t, node, value, **kwargs):
    return Known(np.asarray(value, NUMPY[node.meta["val"].dtype]))


def arange(t, node, *args, **kwargs):
    """arange(end) / arange(start, end, step): positions, cast to the dtype asked for."""
    start, step = (0, 1) if len(args) == 1 else (args[0], args[2] if len(args) > 2 else 1)
    if not isinstance(start, (int, dims.Expr)) or not isinstance(step, int) or step <= 0:
        raise Unsupported("op", f"arange from {start} by {step} (stitch makes integer runs up)")
    val = node.meta["val"]
    length = t.dim(val.shape[0])
    run = t.b.positions("i64", start, length, step, node.name)
    return cast(t.b, run, t.type_of(val).dtype, node.name)


def gather(axis_arg: int | None):
    """embedding(weight, indices) (axis 0) and index_select(x, dim, indices)."""
    def convert(t, node, x, *args, **kwargs):
        axis, idx = (0, args[0]) if axis_arg is None else (args[0], args[1])  # embedding: (weight, indices)
        return t.b.emit("gather", [x, idx], node.name, axis=normal_axis(axis, t.b.type_of(x).rank))

    return convert


def pow_(t, node, x, y):
    dtype = out_dtype(t, node)
    if isinstance(y, (int, float)) and not isinstance(y, bool) and y == 2:  # (as the exporters write x * x)
        x = operand(t, x, dtype, node)
        return t.b.op("mul", [x, x], node.name)
    return t.b.op("pow", [operand(t, x, dtype, node), operand(t, y, dtype, node)], node.name)


def reciprocal(t, node, x):
    return t.b.op("div", [const(1.0), operand(t, x, out_dtype(t, node), node)], node.name)


def silu(t, node, x):
    return t.b.op("mul", [x, t.b.op("sigmoid", [x], node.name)], node.name)


def rsub(t, node, x, y, alpha=1):
    return arith("sub")(t, node, y, x, alpha)


ATEN = {
    aten.add.Tensor: arith("add"), aten.add.Scalar: arith("add"),
    aten.sub.Tensor: arith("sub"), aten.sub.Scalar: arith("sub"), aten.rsub.Scalar: rsub,
    aten.mul.Tensor: arith("mul"), aten.mul.Scalar: arith("mul"),
    aten.div.Tensor: arith("div"), aten.div.Scalar: arith("div"), aten.div.Tensor_mode: arith("div"),
    aten.maximum.default: arith("maximum"), aten.minimum.default: arith("minimum"),
    aten.pow.Tensor_Scalar: pow_, aten.pow.Tensor_Tensor: pow_,
    aten.neg.default: unary("neg"), aten.abs.default: unary("abs"), aten.exp.default: unary("exp"),
    aten.log.default: unary("log"), aten.sqrt.default: unary("sqrt"), aten.rsqrt.default: unary("rsqrt"),
    aten.tanh.default: unary("tanh"), aten.sigmoid.default: unary("sigmoid"), aten.relu.default: unary("relu"),
    aten.erf.default: unary("erf"), aten.reciprocal.default: reciprocal, aten.silu.default: silu,
    aten.eq.Tensor: compare("equal"), aten.eq.Scalar: compare("equal"),
    aten.ne.Tensor: compare("equal", negate=True), aten.ne.Scalar: compare("equal", negate=True),
    aten.lt.Tensor: compare("less"), aten.lt.Scalar: compare("less"),
    aten.gt.Tensor: compare("greater"), aten.gt.Scalar: compare("greater"),
    aten.le.Tensor: compare("LessOrEqual"), aten.le.Scalar: compare("LessOrEqual"),
    aten.ge.Tensor: compare("GreaterOrEqual"), aten.ge.Scalar: compare("GreaterOrEqual"),
    aten.logical_not.default: logical("Not"), aten.bitwise_not.default: logical("Not"),
    aten.logical_and.default: logical("And"), aten.logical_or.default: logical("Or"),
    aten.where.self: where, aten.clamp.default: clamp,
    aten.clamp_min.default: lambda t, node, x, lo: clamp(t, node, x, lo),
    aten.clamp_max.default: lambda t, node, x, hi: clamp(t, node, x, None, hi),
    aten.clone.default: identity, aten.alias.default: identity, aten.lift_fresh_copy.default: identity,
    aten.detach.default: identity, aten._to_copy.default: to_copy,
    aten.view.default: reshape_to, aten._unsafe_view.default: reshape_to, aten.reshape.default: reshape_to,
    aten.unsqueeze.default: reshape_to, aten.squeeze.dim: reshape_to, aten.squeeze.dims: reshape_to,
    aten.squeeze.default: reshape_to, aten.flatten.using_ints: reshape_to,
    aten.expand.default: expand, aten.permute.default: permute, aten.transpose.int: transpose,
    aten.t.default: lambda t, node, x: transpose(t, node, x, 0, -1),
    aten.slice.Tensor: slice_, aten.select.int: select,
    aten.split_with_sizes.default: split, aten.split.Tensor: split, aten.cat.default: cat,
    aten.sum.dim_IntList: reduce("sum"), aten.mean.dim: reduce("mean"), aten.amax.default: reduce("max"),
    aten.amin.default: reduce("min"), aten.any.dim: any_, aten.any.dims: any_,
    aten.mm.default: matmul, aten.bmm.default: matmul, aten.matmul.default: matmul, aten.addmm.default: addmm,
    aten._softmax.default: softmax("Softmax"), aten._log_softmax.default: softmax("LogSoftmax"),
    aten.native_layer_norm.default: layer_norm, aten.native_group_norm.default: group_norm,
    aten._native_batch_norm_legit_no_training.default: batch_norm,
    aten.gelu.default: gelu, aten.convolution.default: convolution, aten.constant_pad_nd.default: constant_pad,
    aten.full.default: full, aten.full_like.default: full_like, aten.scalar_tensor.default: scalar_tensor,
    aten.zeros_like.default: constant_like(0), aten.ones_like.default: constant_like(1),
    aten.zeros.default: constant_like(0), aten.ones.default: constant_like(1),
    aten.arange.start_step: arange, aten.arange.start: arange, aten.arange.default: arange,
    aten.embedding.default: gather(None), aten.index_select.default: gather(1),
}

# Layout ops: a partition of only these computes nothing (engine/torch_backend.py leaves it to torch).
LAYOUT = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
          aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.expand.default, aten.permute.default,
          aten.transpose.int, aten.t.default, aten.clone.default, aten.alias.default, aten.slice.Tensor,
          aten.select.int, aten.detach.default, aten.flatten.using_ints}
