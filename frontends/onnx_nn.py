"""ONNX's network layers as stitch ops: convolution (im2col windows and a product), the
normalizations (batch, instance, group, RMS, mean-variance, Lp), global pools, depth/space
rearrangements. Each expands following the ONNX operator specification's formulas.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..engine.ir.interp import np_dtype
from ..engine.ir.ops import OPS
from ..engine.ir.program import Var
from .onnx_builder import (
    Builder,
    Known,
    Sym,
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
    one product: the windows laid out as rows (im2col, [N, positions, K*C], K the kernel's
    positions, channels last: `channels_last`) times the weight as a [K*C, M] matrix. A depthwise
    Conv (group = channels, one output channel each) multiplies the windows by each channel's
    weights and sums over the taps: no product. Other groups are one product with the groups as a
    batch axis (wav2vec2's positional Conv: 16 groups), channels first. A 3x3 Conv of a value the program
    makes channels first (a U-Net block's, after its GroupNorm) is Winograd's F(2x2, 3x3) (`winograd`)."""
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
    strides, dilations, pads, out = window_geometry(node, spatial, kernel)
    k, positions = math.prod(kernel), math.prod(out)
    hint = node.out
    if (depthwise or group == 1) and made_here(b, x):  # see channels_last
        x = channels_last(b, x, hint)
        for a in range(d):  # zeros on each side of each padded axis
            x = pad_axis(b, x, 1 + a, pads[a], pads[a + d], "constant", 0, hint)
        # [N, o1, k1, ..., od, kd, C]: each spatial axis split into (output position, tap); for a product,
        # an outer axis's taps as rows laid over it, so that its rows read the padded input where it is
        # (as a concat of slices, the search stored each conv's input rows stacked per row tap: 3x the
        # bytes). A depthwise conv keeps slices: its taps are summed one at a time over whole rows
        for a in range(d):
            x = windows(b, x, 1 + 2 * a, out[a], kernel[a], strides[a], dilations[a], hint,
                        slices=depthwise or a == d - 1)
        y = (depthwise_taps(b, x, w, kernel, dtype, hint) if depthwise
             else conv_product(b, x, w, n, c, m, kernel, positions, hint))
        if len(ins) > 2 and ins[2] is not None:
            y = b.op("add", [y, ins[2]], hint)
        return [channels_first(b, reshape(b, y, (n, *out, m), hint), hint)]
    for a in range(d):  # zeros on each side of each padded axis
        x = pad_axis(b, x, 2 + a, pads[a], pads[a + d], "constant", 0, hint)
    if group == 1 and b.winograd and winograd_fits(ins[0], w, kernel, strides, dilations, c, m, dtype):
        y = winograd(b, x, w, n, c, m, out, hint)
        if len(ins) > 2 and ins[2] is not None:
            y = b.op("add", [y, reshape(b, ins[2], (m, 1, 1), hint)], hint)
        return [y]
    for a in range(d):  # [N, C, o1, k1, ..., od, kd]: each spatial axis split into (output position, tap)
        x = windows(b, x, 2 + 2 * a, out[a], kernel[a], strides[a], dilations[a], hint)
    if depthwise:  # the windows times each channel's K weights, summed over the taps
        y = depthwise_taps(b, x, w, kernel, dtype, hint, last=False)
        if len(ins) > 2 and ins[2] is not None:
            y = b.op("add", [y, reshape(b, ins[2], (c,) + (1,) * d, hint)], hint)
        return [y]
    if group == 1 and channels_first_product(ins[0], strides, dilations):
        # the weight [M, C*K] times the windows as columns [N, C*K, positions]: [N, M, positions] is
        # the output channels first where it is, and a column's values for one k run along the input's rows
        o_axes, k_axes = tuple(2 + 2 * a for a in range(d)), tuple(3 + 2 * a for a in range(d))
        cols = reshape(b, b.op("transpose", [x], hint, perm=(0, 1) + k_axes + o_axes), (n, c * k, positions), hint)
        y = b.op("matmul", [weight_matrix(b, w, (m, c * k), (0, 1), (m, c * k), hint), cols], hint)
        if len(ins) > 2 and ins[2] is not None:
            y = b.op("add", [y, reshape(b, ins[2], (m, 1), hint)], hint)
        return [reshape(b, y, (n, m, *out), hint)]
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
    matrix = weight_matrix(b, w, (group, m // group, c // group, k), (0, 3, 2, 1) if taps_first else (0, 2, 3, 1),
                           lead + (c // group * k, m // group), hint)
    y = b.op("matmul", [rows, matrix], hint)  # [N, positions, M] ([N, G, positions, M/G] in groups)
    if len(ins) > 2 and ins[2] is not None:
        y = b.op("add", [y, reshape(b, ins[2], lead + (1,) * bool(lead) + (m // group,), hint)], hint)
    if group == 1:  # [N, o..., M] first: a channels-last reader's index of y stays affine (no div/mod by positions)
        return [channels_first(b, reshape(b, y, (n, *out, m), hint), hint)]
    y = b.op("transpose", [y], hint, perm=(0, 1, 3, 2))
    return [reshape(b, y, (n, m, *out), hint)]


def channels_last(b: Builder, x: Value, hint: str) -> Value:
    """[N, C, S...] read as [N, S..., C]: a convolution or pool works channels last inside, so that
    a value stored between two of them (the padded input of the next, a residual) is stored channels
    last (the ops between are elementwise: their index maps compose, and the next conv's transpose
    undoes this one's). A window's row of A is then C consecutive values per tap, read along k in
    vectors, and a depthwise conv or a pool runs along the channels (onnxruntime's NHWC kernels)."""
    r = b.type_of(x).rank
    return b.op("transpose", [x], hint, perm=(0, *range(2, r), 1))


def made_here(b: Builder, x: Value, depth: int = 16) -> bool:
    """Whether `x` is channels last where it is made: a conv's or a pool's output (`channels_first` of
    one), or an elementwise op (a ReLU, BatchNorm's scale and shift, a residual add) of such a value,
    within `depth` ops. Only then is a conv or pool of it channels last inside. A graph input is laid
    out by the caller, channels first: a conv of one (a stem over an image, a patch embedding) reads its
    windows' rows along the input's rows. So is a normalization's output (GroupNorm reshapes the
    channels into groups): a conv of it read channels last stored the normalized values through a
    transposing copy (a U-Net block's two convs: 6 copies of 0.44 ms where straight ones take 0.05);
    it is convolved channels first (`channels_first_product`)."""
    if not isinstance(x, Sym) or x.input:
        return False
    rank = b.type_of(x).rank
    level, seen = [x.name], {x.name}
    for _ in range(depth):  # breadth first: each value once, at its fewest ops from x
        if any(name in b.channels_last for name in level):
            return True
        calls = [b.calls.get(name) for name in level]
        level = [a.name for call in calls if call is not None and OPS[call.op].elementwise for a in call.args
                 if isinstance(a, Var) and b.types[a.name].rank == rank and a.name not in seen]
        seen.update(level)
    return False


def channels_first_product(x: Value, strides, dilations) -> bool:
    """Whether a dense Conv of `x`, not made channels last (`made_here`), computes its output channels
    first: the weight as the product's left operand, the windows as its columns. Where x is a value
    the program makes channels first (a GroupNorm's output in a U-Net block, or such a conv's) and the
    innermost axis's taps are read at stride 1: a column's values for one k are then the input's rows
    where they are, and the output [N, M, positions] is what the next GroupNorm or residual add reads,
    where rows of positions read the window's C values of a tap across channel planes and the output
    was transposed back by a copy of its own (docs/perf/2026-11-29-torch-compile.md).
    A graph input's conv (a stem, a patch embedding) keeps rows of positions: its output is read
    channels last (the next conv or pool, a ViT's tokens)."""
    return isinstance(x, Sym) and not x.input and strides[-1] == 1 and dilations[-1] == 1


# Winograd's F(2x2, 3x3) where both channel counts are at least this: its product is 16/36 of the direct
# one's multiply-adds, its transforms a few adds per input and output element, which fewer channels
# do not pay for
WINOGRAD_CHANNELS = 16

# F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2016): a 2x2 tile of
# outputs is AT [(G g GT) * (BT d B)] A for the 4x4 input tile d it reads and the 3x3 kernel g
WINOGRAD_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]])
WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
WINOGRAD_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]])


def winograd_fits(x: Value, w: Value, kernel, strides, dilations, c: int, m: int, dtype: str) -> bool:
    """Whether a dense Conv of `x` (a value the program makes channels first, `channels_first_product`)
    is imported as Winograd's F(2x2, 3x3) (`winograd`): a 3x3 kernel at stride and dilation 1, its
    weight known at import (transformed there), f32, and at least WINOGRAD_CHANNELS channels in and out."""
    return (list(kernel) == [3, 3] and list(strides) == [1, 1] and list(dilations) == [1, 1]
            and isinstance(w, Known) and dtype == "f32" and min(c, m) >= WINOGRAD_CHANNELS
            and channels_first_product(x, strides, dilations))


def winograd(b: Builder, x: Value, w: Known, n: int, c: int, m: int, out, hint: str) -> Value:
    """A 3x3 Conv of the zero-padded x [N, C, H, W] as F(2x2, 3x3): 16 products of the weight transformed at
    import (G g GT: [4, 4, M, C]) by the input tiles transformed (BT d B: adds of strided slices, [4, 4, C,
    N * tiles]), then each 2x2 output tile from 9 of the 16 (AT m A, adds): [N, M, oh, ow]. The products
    are 4 batched ones of 4, one per row a of the tile, each of a concat of 4 that one kernel can store
    whole and the product read as it is (stacked 16 in one concat, the product's operand was a select
    per element, or a copy per tile where the search stored the rows of 4)."""
    oh, ow = out
    th, tw = -(-oh // 2), -(-ow // 2)
    shape = b.type_of(x).shape
    x = pad_axis(b, x, 2, 0, 2 * th + 2 - shape[2], "constant", 0, hint)  # (an odd output: one row more)
    x = pad_axis(b, x, 3, 0, 2 * tw + 2 - shape[3], "constant", 0, hint)
    tiles = n * th * tw

    def combine(parts: list[Value], row) -> Value:  # sum of parts[i] * row[i] (row's entries 0, 1, -1, a 1 in each)
        ones = [p for p, k in zip(parts, row) if k == 1]
        total = ones[0]
        for p in ones[1:]:
            total = b.op("add", [total, p], hint)
        for p in (p for p, k in zip(parts, row) if k == -1):
            total = b.op("sub", [total, p], hint)
        return total

    rows = [slice_ranges(b, x, {2: range(i, i + 2 * th - 1, 2)}, hint) for i in range(4)]
    pieces = []
    for bt_a in WINOGRAD_BT:
        r = combine(rows, bt_a)  # [N, C, th, 2 tw + 2]
        cols = [slice_ranges(b, r, {3: range(j, j + 2 * tw - 1, 2)}, hint) for j in range(4)]
        v = [combine(cols, bt_b) for bt_b in WINOGRAD_BT]  # [N, C, th, tw] each
        v = [reshape(b, b.op("transpose", [p], hint, perm=(1, 0, 2, 3)), (1, c, tiles), hint) for p in v]
        pieces.append(b.emit("concat", v, hint, axis=0))  # [4, C, tiles]
    g = w.array.astype(np.float64)
    u = np.einsum("ai,mcij,bj->abmc", WINOGRAD_G, g, WINOGRAD_G).astype(np.float32)
    parts = []
    for a, v in enumerate(pieces):  # (a product per row of the tile: each reads one kernel's output as it is)
        mm = b.op("matmul", [Known(np.ascontiguousarray(u[a]), param=w.param, name=w.name), v], hint)  # [4, M, tiles]
        parts.append([reshape(b, slice_ranges(b, mm, {0: range(bb, bb + 1)}, hint), (m, tiles), hint)
                      for bb in range(4)])
    halves = []
    for at_i in WINOGRAD_AT:
        s = [combine([parts[a][bb] for a in range(4)], at_i) for bb in range(4)]  # [M, tiles] each
        y = [reshape(b, combine(s, at_j), (m, n, th, 1, tw, 1), hint) for at_j in WINOGRAD_AT]
        halves.append(b.emit("concat", y, hint, axis=5))
    y = reshape(b, b.emit("concat", halves, hint, axis=3), (m, n, 2 * th, 2 * tw), hint)
    y = b.op("transpose", [y], hint, perm=(1, 0, 2, 3))
    return slice_ranges(b, y, {2: range(oh), 3: range(ow)}, hint)


def channels_first(b: Builder, y: Value, hint: str) -> Value:
    """[N, S..., C] back to ONNX's [N, C, S...] (an index map: no copy unless the schedule stores it),
    marked as made channels last (`made_here`)."""
    r = b.type_of(y).rank
    out = b.op("transpose", [y], hint, perm=(0, r - 1, *range(1, r - 1)))
    b.channels_last.add(out.name)
    return out


def weight_matrix(b: Builder, w: Value, per_group: tuple, order: tuple, shape: tuple, hint: str) -> Value:
    """A Conv weight [M, C/G, k...] as the product's right operand: reshaped to `per_group`, permuted by
    `order`, reshaped to `shape`; a known weight laid out at import."""
    if isinstance(w, Known):
        return Known(np.ascontiguousarray(w.array.reshape(per_group).transpose(order).reshape(shape)),
                     param=w.param, name=w.name)
    return reshape(b, b.op("transpose", [reshape(b, w, per_group, hint)], hint, perm=order), shape, hint)


def conv_product(b: Builder, x: Value, w: Value, n: int, c: int, m: int, kernel, positions: int, hint: str) -> Value:
    """A dense Conv of channels-last windows x [N, o1, k1, ..., od, kd, C] as one product (im2col): rows
    [N, positions, K*C] (taps first, C consecutive) times the weight as a [K*C, M] matrix: [N, positions, M]."""
    d, k = len(kernel), math.prod(kernel)
    rows = b.op("transpose", [x], hint, perm=(0, *(1 + 2 * a for a in range(d)), *(2 + 2 * a for a in range(d)),
                                              2 * d + 1))
    rows = reshape(b, rows, (n, positions, k * c), hint)
    return b.op("matmul", [rows, weight_matrix(b, w, (1, m, c, k), (0, 3, 2, 1), (k * c, m), hint)], hint)


def depthwise_taps(b: Builder, x: Value, w: Value, kernel, dtype: str, hint: str, last: bool = True) -> Value:
    """A depthwise Conv (one output channel per channel) of windows x, channels last ([N, o1, k1, ..., od,
    kd, C]) or first ([N, C, o1, k1, ...]): the windows times each channel's K weights, summed over the
    taps: [N, o1, ..., od, C] or [N, C, o1, ..., od]."""
    d = len(kernel)
    if last:
        c = b.type_of(x).shape[-1]
        per_tap = tuple(v for a, kk in enumerate(kernel) for v in ((kk, 1) if a < d - 1 else (kk,))) + (c,)
        order = (*range(1, d + 1), 0)  # [C, k1, ..., kd] -> [k1, ..., kd, C]
    else:
        c = b.type_of(x).shape[1]
        per_tap = (c,) + tuple(v for kk in kernel for v in (1, kk))
        order = tuple(range(d + 1))
    if isinstance(w, Known):
        taps_w = Known(np.ascontiguousarray(w.array.reshape((c, *kernel)).transpose(order)).reshape(per_tap),
                       param=w.param, name=w.name)
    elif last:
        taps_w = reshape(b, b.op("transpose", [reshape(b, w, (c, *kernel), hint)], hint, perm=order), per_tap, hint)
    else:
        taps_w = reshape(b, w, per_tap, hint)
    if dtype == "f16":  # multiplied and summed in f32, rounded once (as an f16 product is)
        x, taps_w = cast(b, x, "f32", hint), cast(b, taps_w, "f32", hint)
    taps = tuple((2 if last else 3) + 2 * a for a in range(d))
    y = b.op("sum", [b.op("mul", [x, taps_w], hint)], hint, axes=taps)
    return cast(b, y, dtype, hint) if dtype == "f16" else y


def window_geometry(node, spatial, kernel) -> tuple[list[int], list[int], list[int], list[int]]:
    """(strides, dilations, pads [begins..., ends...], output sizes) of a sliding-window op (Conv, the pools) from its
    attributes, as the ONNX specification computes them: `auto_pad` SAME_UPPER/SAME_LOWER pads to ceil(input /
    stride) outputs, VALID pads nothing; `ceil_mode` (pools, explicit pads only) rounds the count of outputs up,
    less one where the last window would start past the input and its leading pad."""
    d, op = len(spatial), node.op_type
    strides = list(node.attr("strides") or [1] * d)
    dilations = list(node.attr("dilations") or [1] * d)
    pads = list(node.attr("pads") or [0] * (2 * d))
    if len(strides) != d or len(dilations) != d or len(pads) != 2 * d or min(strides + dilations) < 1 or min(pads) < 0:
        raise invalid(f"{op} strides {strides}, dilations {dilations}, pads {pads} for {d} spatial axes")
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
        raise invalid(f"{op} auto_pad '{auto}'")
    ceil = bool(node.attr("ceil_mode", 0)) and auto == "NOTSET"
    padded = [i + pads[a] + pads[a + d] for a, i in enumerate(spatial)]
    out = []
    for a, (p, sp, st) in enumerate(zip(padded, span, strides)):
        o = (-(-(p - sp) // st) if ceil else (p - sp) // st) + 1
        out.append(o - 1 if ceil and (o - 1) * st >= spatial[a] + pads[a] else o)
    if min(out) < 1:
        raise invalid(f"{op} kernel {list(kernel)} (dilated {span}) is larger than the padded input {padded}")
    return strides, dilations, pads, out


# Windows of at most this many taps are a concat of slices, not a copy: as copies, the search stored
# a product's output before its bias and GELU and recomputed them per tap in the next im2col
SLICED_TAPS = 4


def sliced(k: int, stride: int, dilation: int) -> bool:
    """Whether `windows` makes an axis's windows of k taps as a concat of strided slices."""
    return 1 < k <= SLICED_TAPS and not (stride == k and dilation == 1)


def windows(b: Builder, x: Value, axis: int, count: int, k: int, stride: int, dilation: int, hint: str,
            slices: bool = True) -> Value:
    """`x` with `axis` split into [count, k] windows: [..., o, t, ...] reads x[..., o * stride + t * dilation, ...].
    Windows that tile the axis (stride = k, dilation 1) are a reshape of it, one tap (k = 1) a strided slice.
    Up to SLICED_TAPS taps are one strided slice each, stacked by a concat (a select per tap), where
    `slices` allows. More (all, where it does not) come from rows of length L + stride laid over
    copies of the axis (length L): row o starts o * stride further along, and its first
    (k - 1) * dilation + 1 values are the window. The reshapes' div/mod simplify away
    (o * stride + t * dilation < L), so the index map is affine: no copy, no select, whatever the taps
    (wav2vec2's 128: as slices, a chain of 127 selects took 200 s to compile and ran 200x onnxruntime's
    time)."""
    shape = b.type_of(x).shape
    before, length, after = shape[:axis], shape[axis], shape[axis + 1:]
    if k == 1 or (stride == k and dilation == 1):
        r = range(0, (count - 1) * stride + 1, stride) if k == 1 else range(count * k)
        return reshape(b, slice_ranges(b, x, {axis: r}, hint), before + (count, k) + after, hint)
    if slices and sliced(k, stride, dilation):  # one strided slice per tap, stacked
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
    """GlobalAveragePool / GlobalMaxPool: the spatial axes reduced, channels last inside (as a pool's,
    unless a graph input: the reduction runs along the channels of a conv's stored output)."""
    def convert(b, node, ins):
        x, r = ins[0], rank_of(b, ins[0])
        if not made_here(b, x):
            return [b.op(op, [x], node.out, axes=tuple(range(2, r)), keepdims=True)]
        y = b.op(op, [channels_last(b, x, node.out)], node.out, axes=tuple(range(1, r - 1)), keepdims=True)
        return [channels_first(b, y, node.out)]

    return convert


# -- pools: windows (as Conv's) reduced over their taps ------------------------------------------------------


def convert_pool(kind: str):
    """MaxPool, AveragePool or LpPool (`kind` max, average, lp) over any number of spatial axes, every padding,
    stride, dilation and ceil_mode form. The input, padded by a concat with the pool's identity (-inf, or
    the dtype's least integer, for max; 0 for the sums), is split into (output position, tap) per axis by
    Conv's `windows` (index maps, no copy) and reduced over the taps. The padding also covers the windows
    ceil_mode adds past the end. An average divides by each window's count of taps inside the input
    (count_include_pad 0) or inside the explicitly padded input (1; never the ceil_mode extension): a
    divisor known at import, one number when every window has the same, else a constant of the windows' shape.
    The windows are channels last inside (as Conv's; `channels_last`) but where MaxPool's Indices are asked
    for or the input is a graph input.
    LpPool is (sum |x|^p)^(1/p). Sums of f16 are taken in f32 and rounded once. MaxPool's Indices output
    is the flat index (N, C and the spatial axes row-major; the spatial axes column-major for storage_order
    1) of the first largest element of each window in row-major scan order, as onnxruntime picks it."""

    def convert(b, node, ins):
        x, hint = ins[0], node.out
        t = b.type_of(x)
        if kind == "max":
            if t.dtype not in ("f16", "f32", "f64", "i8", "u8"):
                raise Unsupported("dtype", f"MaxPool of {t.dtype}")
        else:
            float_of(b, x)
        if t.rank < 3:
            raise invalid(f"{node.op_type} of an input of rank {t.rank} (N, C and at least one spatial axis)")
        spatial, d = t.shape[2:], t.rank - 2
        kernel = list(node.attr("kernel_shape") or [])
        if len(kernel) != d or min(kernel) < 1:
            raise invalid(f"{node.op_type} kernel_shape {kernel} for {d} spatial axes")
        strides, dilations, pads, out = window_geometry(node, spatial, kernel)
        if kind == "max":
            fill = -np.inf if t.dtype.startswith("f") else int(np.iinfo(np_dtype(t.dtype)).min)
        else:
            fill = 0
        work = "f32" if t.dtype == "f16" and kind != "max" else t.dtype
        w = cast(b, x, work, hint)
        with_indices = kind == "max" and len(node.proto.output) > 1 and bool(node.proto.output[1])
        inside = made_here(b, x) and not with_indices  # channels last inside, as Conv's
        first = 1 if inside else 2  # the first spatial axis
        w = channels_last(b, w, hint) if inside else w
        for a in range(d):  # each side's pad, and past the end the windows ceil_mode adds
            beyond = max((out[a] - 1) * strides[a] + (kernel[a] - 1) * dilations[a] + 1
                         - (spatial[a] + pads[a] + pads[a + d]), 0)
            w = pad_axis(b, w, first + a, pads[a], pads[a + d] + beyond, "constant", fill, hint)
        for a in range(d):  # [N, o1, k1, ..., od, kd, C] ([N, C, o1, k1, ...] with the indices)
            w = windows(b, w, first + 2 * a, out[a], kernel[a], strides[a], dilations[a], hint)
        taps = tuple(first + 1 + 2 * a for a in range(d))
        back = (lambda v: channels_first(b, v, hint)) if inside else (lambda v: v)
        if kind == "max":
            y = b.op("max", [w], hint, axes=taps)
            if with_indices:  # channels first
                return [y, max_indices(b, node, w, y, t.shape, strides, dilations, pads, out)]
            return [back(y)]
        if kind == "lp":
            p = node.attr("p", 2)
            if p < 1:
                raise invalid(f"LpPool with p={p} (p is a positive integer)")
            if p == 2:
                y = b.op("sqrt", [b.op("sum", [b.op("mul", [w, w], hint)], hint, axes=taps)], hint)
            elif p == 1:
                y = b.op("sum", [b.op("abs", [w], hint)], hint, axes=taps)
            else:
                powered = b.op("pow", [b.op("abs", [w], hint), const(float(p))], hint)
                y = b.op("pow", [b.op("sum", [powered], hint, axes=taps), const(1.0 / p)], hint)
            return [back(cast(b, y, t.dtype, hint))]
        counts = [window_counts(spatial[a], out[a], kernel[a], strides[a], dilations[a], pads[a],
                                pads[a + d] if node.attr("count_include_pad", 0) else None) for a in range(d)]
        divisor = functools.reduce(np.multiply.outer, counts)
        if np.all(divisor == math.prod(kernel)):
            y = b.op("mean", [w], hint, axes=taps)
        else:
            shape = (1, *out, 1) if inside else (1, 1, *out)
            known = Known(divisor.reshape(shape).astype(np_dtype(work)), name=f"{hint}_divisor")
            y = b.op("div", [b.op("sum", [w], hint, axes=taps), known], hint)
        return [back(cast(b, y, t.dtype, hint))]

    return convert


def window_counts(length: int, count: int, k: int, stride: int, dilation: int, before: int, after: int | None):
    """How many of each window's k taps fall inside [0, length) (`after` None), or inside the padded
    [-before, length + after), along one axis: an average pool's divisors."""
    positions = np.arange(count)[:, None] * stride + np.arange(k)[None, :] * dilation - before
    high = length if after is None else length + after
    low = 0 if after is None else -before
    return ((positions >= low) & (positions < high)).sum(axis=1)


def max_indices(b: Builder, node, w: Value, y: Value, shape, strides, dilations, pads, out) -> Value:
    """MaxPool's Indices: among the taps of each window of `w` ([N, C, o1, k1, ...]) equal to its largest
    `y`, the least row-major flat index of the input (the first in scan order, as onnxruntime's strict `>`
    keeps it); with storage_order 1, that element's index with the spatial axes column-major."""
    hint, d = node.out, len(out)
    wide = b.type_of(w).shape
    spatial = shape[2:]
    row = [math.prod(spatial[a + 1:]) for a in range(d)]  # row-major strides of the spatial axes

    def flat(steps: list[int]) -> Value:  # the input's flat index that each element of w reads
        terms = [(0, shape[1] * math.prod(spatial)), (1, math.prod(spatial))]  # (w's axis, its coefficient)
        for a in range(d):  # position o * stride + t * dilation - pad along spatial axis a
            terms += [(2 + 2 * a, strides[a] * steps[a]), (3 + 2 * a, dilations[a] * steps[a])]
        index = const(-sum(pads[a] * steps[a] for a in range(d)))
        for axis, coef in terms:
            position = b.op("iota", [], hint, shape=wide, axis=axis, dtype="i64")
            index = b.op("add", [b.op("mul", [position, const(coef)], hint), index], hint)
        return index

    taps = tuple(3 + 2 * a for a in range(d))
    largest = reshape(b, y, tuple(1 if a in taps else n for a, n in enumerate(wide)), hint)
    first = b.op("where", [b.op("equal", [w, largest], hint), flat(row), const(np.iinfo(np.int64).max)], hint)
    index = b.op("min", [first], hint, axes=taps)
    if node.attr("storage_order", 0) == 1:
        column = [math.prod(spatial[:a]) for a in range(d)]
        chosen = reshape(b, index, b.type_of(largest).shape, hint)
        at = b.op("where", [b.op("equal", [flat(row), chosen], hint), flat(column), const(np.iinfo(np.int64).max)],
                  hint)
        index = b.op("min", [at], hint, axes=taps)
    return index


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
    "MaxPool": convert_pool("max"),
    "AveragePool": convert_pool("average"),
    "LpPool": convert_pool("lp"),
    "GlobalAveragePool": global_pool("mean"),
    "GlobalMaxPool": global_pool("max"),
    "DepthToSpace": convert_depth_to_space,
    "SpaceToDepth": convert_space_to_depth,
}
