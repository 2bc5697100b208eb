"""ONNX's network layers as stitch ops: convolution (im2col windows and a product), the
normalizations (batch, instance, group, RMS, mean-variance, Lp), global pools, depth/space
rearrangements. Each expands following the ONNX operator specification's formulas.
"""

from __future__ import annotations

import math

import numpy as np

from .onnx_builder import (
    Builder,
    Known,
    Unsupported,
    Value,
    invalid,
    normal_axes,
    normal_axis,
    onnx_dtype,
)
from .onnx_math import cast, const, float_of, normalize, rank_of, reshape
from .onnx_movement import pad_axis, slice_ranges


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
    # k (the lowering narrows each tap's side to its own C values: no div/mod left in the rows)
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


# Windows of at most this many taps are a concat of slices, not a copy: as copies, the search stored
# a product's output before its bias and GELU and recomputed them per tap in the next im2col
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


# -- normalizations and layout ops expressed with reshape/transpose --------------


def channel_param(b: Builder, p: Value, rank: int, hint: str) -> Value:
    """A per-channel [C] parameter shaped [C, 1, ...] to broadcast along axis 1 of a rank-`rank` tensor."""
    c = b.type_of(p).shape
    return reshape(b, p, c + (1,) * (rank - 2), hint)


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


NN_CONVERTERS = {
    "Conv": convert_conv,
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
}
