"""The ONNX data-movement ops: Gather, GatherElements, GatherND, Slice, Split, Concat, Trilu, Pad, Tile
(and CumSum, a product with a known triangle).

Exports read tensors at positions known at import time far more often than at
run-time positions (q/k/v picks, position embeddings of a static sequence,
masks built from `arange`). So each op first asks what is known:

- everything known (and no weight): folded with numpy (`NUMPY_FOLDERS`; onnx's
  reference evaluator crashes on some GatherElements);
- a weight (initializer) read at known positions: a new, smaller weight;
- a run-time tensor read at known positions: `slice` (a contiguous run with a
  positive step, one index: slice + reshape) or `gather` with an index weight;
- run-time positions (token ids): `gather`, and for GatherElements / GatherND
  the linear positions computed by index arithmetic into the flattened tensor.
"""

from __future__ import annotations

import math

import numpy as np

from ..engine.ir import dims
from ..engine.ir.check import AttrProblem, clamp_slice
from .onnx_builder import Builder, Known, Sym, Unsupported, Value, check_dims, invalid, normal_axis

INDEX_DTYPES = ("i32", "i64")


def positions(dim: int, start: int, end: int, step: int) -> range:
    """The indices ONNX's Slice (and numpy's x[start:end:step]) selects on an axis of `dim`."""
    if step == 0:
        raise invalid("a Slice step is 0")
    return range(dim)[slice(start, end, step)]


# -- values at known positions -----------------------------------------------------------------------------


def reshaped(b: Builder, x: Value, shape: tuple[int, ...], hint: str) -> Value:
    if b.type_of(x).shape == tuple(shape):
        return x
    if isinstance(x, Known):
        return Known(x.array.reshape(shape), param=x.param, name=hint)
    return b.op("reshape", [x], hint, shape=tuple(shape))


def slice_ranges(b: Builder, x: Value, ranges: dict[int, range], hint: str) -> Value:
    """x restricted to `ranges` (axis -> a non-empty range of positions, any step sign)."""
    t = b.type_of(x)
    for axis, r in ranges.items():
        if len(r) == 0:
            raise Unsupported("shape", f"the result is empty along axis {axis} (stitch tensors are never empty)")
    ranges = {a: r for a, r in ranges.items() if r != range(t.shape[a])}
    if not ranges:
        return x
    if isinstance(x, Known):
        index = tuple(slice(r.start, r.stop if r.stop >= 0 else None, r.step) if a in ranges else slice(None)
                      for a, r in ((a, ranges.get(a)) for a in range(t.rank)))
        return Known(np.ascontiguousarray(x.array[index]), param=x.param, name=hint)
    forward = {a: r for a, r in ranges.items() if r.step > 0 or len(r) == 1}
    if forward:
        axes = sorted(forward)
        # a forward range's first and last positions, not min() and max(): they walk the range (wav2vec2's
        # first conv slices a flat range of 337M positions: 18 of its 18.4 s of import)
        starts = [forward[a][0] for a in axes]
        steps = [abs(forward[a].step) if len(forward[a]) > 1 else 1 for a in axes]
        ends = [forward[a][-1] + 1 for a in axes]
        attrs = {"axes": tuple(axes), "starts": tuple(starts), "ends": tuple(ends)}
        if any(s != 1 for s in steps):
            attrs["steps"] = tuple(steps)
        x = b.emit("slice", [x], hint, **attrs)
    for a, r in ranges.items():
        if a not in forward:  # a reversed run: gather at the positions
            x = take(b, x, np.array(list(r), np.int64), a, hint)
    return x


def take(b: Builder, x: Value, indices: np.ndarray, axis: int, hint: str) -> Value:
    """np.take(x, indices, axis) for known, non-negative, in-range `indices` of any rank."""
    t = b.type_of(x)
    out_shape = t.shape[:axis] + indices.shape + t.shape[axis + 1:]
    check_dims(out_shape, "the result")
    if isinstance(x, Known):
        return Known(np.take(x.array, indices, axis=axis), param=x.param, name=hint)
    flat = indices.reshape(-1)
    if indices.ndim <= 1 and (len(flat) == 1 or is_progression(flat)):
        step = int(flat[1] - flat[0]) if len(flat) > 1 else 1
        picked = slice_ranges(b, x, {axis: range(int(flat[0]), int(flat[-1]) + 1, step)}, hint)
        return reshaped(b, picked, out_shape, hint)
    where = Known(np.asarray(indices, np.int64), name=f"{hint}_indices")
    return b.emit("gather", [x, where], hint, axis=axis)


def is_progression(flat: np.ndarray) -> bool:
    """1-D positions equally spaced with a positive step."""
    d = np.diff(flat)
    return bool(len(flat) > 1 and d[0] > 0 and (d == d[0]).all())


def known_indices(idx: Known, dim: int) -> np.ndarray:
    """Integer positions on an axis of `dim`, negative ones from the end; out of range: the node is invalid."""
    if idx.array.dtype.kind not in "iu":
        raise invalid(f"indices must be integers, got {idx.array.dtype}")
    a = idx.array.astype(np.int64)
    if a.size and (a.min() < -dim or a.max() >= dim):
        raise invalid(f"an index is out of range for an axis of {dim} (indices from {a.min()} to {a.max()})")
    return np.where(a < 0, a + dim, a)


# -- the converters --------------------------------------------------------------------------------------


def convert_gather(b, node, ins):
    x, idx = ins[0], ins[1]
    t = b.type_of(x)
    axis = normal_axis(node.attr("axis", 0), t.rank)
    if isinstance(idx, Known):
        return [take(b, x, known_indices(idx, t.shape[axis]), axis, node.out)]
    it = b.type_of(idx)
    if it.dtype not in INDEX_DTYPES:
        raise invalid(f"Gather indices must be int32 or int64, got {it.dtype}")
    return [b.emit("gather", [x, idx], node.out, axis=axis)]


def slice_spec(b: Builder, node, ins, rank: int) -> list[tuple[int, object, object, int]]:
    """Slice's (axis, start, end, step) per sliced axis, axes non-negative; starts and ends may be
    symbolic dimensions."""
    if node.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes"), None
        if starts is None or ends is None:
            raise invalid("Slice needs the starts and ends attributes")
    else:
        starts, ends = b.static_dims(ins[1], "starts"), b.static_dims(ins[2], "ends")
        axes = b.static_ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
        steps = b.static_ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else None
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(axes) if steps is None else list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise invalid(f"Slice has {len(starts)} starts, {len(ends)} ends, {len(axes)} axes and {len(steps)} steps")
    spec, seen = [], set()
    for a, start, end, step in zip(axes, starts, ends, steps):
        a = normal_axis(a, rank, "a Slice axis")
        if a in seen:
            raise invalid(f"Slice axis {a} is given twice")
        seen.add(a)
        spec.append((a, start, end, step))
    return spec


def symbolic_bounds(b: Builder, dim, start, end, step: int, axis: int, label: str) -> tuple:
    """(first position, count) of a Slice on an axis where the dimension or a bound is symbolic: each
    clamp decided the same way for every value of the symbols (else Unsupported). A bound of one symbol
    past a static axis narrows that symbol's range, when the caller gave none, to end within the axis
    (a position buffer cut at `[:seq]`): past it onnxruntime clamps the cut, which one symbolic shape
    cannot say, so those sizes are refused instead (when the model then fails there anyway, as BERT's
    position embedding does, nothing is lost)."""
    if step <= 0:
        if step == 0:
            raise invalid("a Slice step is 0")
        raise Unsupported("shape", f"a Slice with step {step} on axis {axis} of {dim} with bounds {start}, {end}: "
                                   "stitch takes negative steps only where everything is static")
    if isinstance(dim, int):
        for bound in (start, end):
            if isinstance(bound, dims.Expr) and dims.bounds(bound, b.ranges)[0] >= 0:
                b.at_most(bound, dim, f"so that Slice '{label}' ends within its axis of {dim}")
    try:
        begin, _, length = clamp_slice(dim, start, end, step, b.ranges)
    except AttrProblem as problem:
        raise Unsupported("shape", f"Slice of axis {axis} ({dim}) from {start} to {end}: {problem.message}") from None
    if not dims.provably(1, length, b.ranges):
        raise Unsupported("shape", f"Slice of axis {axis} ({dim}) from {start} to {end} may be empty for some "
                                   "values of the symbols (stitch tensors are never empty)")
    return begin, length


def normal_slice(b: Builder, node, ins, shape, empty: bool = False) -> list[tuple[int, object, object, int]]:
    """Slice as (axis, first position, count, step) per sliced axis; a count of 0 only if `empty` (a known
    shape vector may be cut to nothing)."""
    out = []
    for a, start, end, step in slice_spec(b, node, ins, len(shape)):
        if all(isinstance(v, int) for v in (shape[a], start, end)):
            r = positions(shape[a], start, end, step)
            if len(r) == 0 and not empty:
                raise Unsupported("shape", f"the result is empty along axis {a} (stitch tensors are never empty)")
            out.append((a, r.start, len(r), r.step))
        else:
            out.append((a, *symbolic_bounds(b, shape[a], start, end, step, a, node.out), step))
    return out


def convert_slice(b, node, ins):
    x = ins[0]
    t = b.type_of(x)
    spec = slice_spec(b, node, ins, t.rank)
    if all(isinstance(v, int) for a, start, end, _ in spec for v in (t.shape[a], start, end)):
        return [slice_ranges(b, x, {a: positions(t.shape[a], start, end, step) for a, start, end, step in spec},
                             node.out)]
    cut = [(a, *symbolic_bounds(b, t.shape[a], start, end, step, a, node.out), step) for a, start, end, step in spec]
    cut = [(a, first, count, step) for a, first, count, step in cut if (first, count) != (0, t.shape[a])]
    if not cut:
        return [x]
    cut.sort()
    attrs = {"axes": tuple(c[0] for c in cut), "starts": tuple(c[1] for c in cut),
             "ends": tuple(dims.add(dims.add(c[1], dims.mul(c[3], dims.add(c[2], -1))), 1) for c in cut)}
    if any(c[3] != 1 for c in cut):
        attrs["steps"] = tuple(c[3] for c in cut)
    return [b.emit("slice", [x], node.out, **attrs)]


def convert_split(b, node, ins):
    x = ins[0]
    t = b.type_of(x)
    axis = normal_axis(node.attr("axis", 0), t.rank)
    dim, n = t.shape[axis], len(node.proto.output)
    if node.opset < 13:
        sizes = node.attr("split")
    else:
        sizes = b.static_ints(ins[1], "split") if len(ins) > 1 and ins[1] is not None else None
    if sizes is None:
        parts = node.attr("num_outputs", n) if node.opset >= 18 else n
        if parts != n or n < 1:
            raise invalid(f"Split into {parts} parts has {n} outputs")
        if node.opset < 18 and dim % n:
            raise invalid(f"Split of an axis of {dim} into {n} equal parts")
        chunk = -(-dim // n)
        sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
    sizes = list(sizes)
    if len(sizes) != n or sum(sizes) != dim or min(sizes) < 0:
        raise invalid(f"Split sizes {sizes} for {n} outputs do not add up to the axis' {dim}")
    offsets = np.cumsum([0] + sizes)
    return [slice_ranges(b, x, {axis: range(int(lo), int(hi))}, out or node.out)
            for lo, hi, out in zip(offsets[:-1], offsets[1:], node.proto.output)]


def convert_concat(b, node, ins):
    given = [i for i in ins if i is not None]
    if not given:
        raise invalid("Concat of no inputs")
    if node.attr("axis") is None:
        raise invalid("Concat needs the axis attribute")
    rank = len(_shape(b, given[0]))
    axis = normal_axis(node.attr("axis"), rank)
    shapes = [_shape(b, v) for v in given]
    for s in shapes:
        if len(s) != rank or any(d != d0 for k, (d, d0) in enumerate(zip(s, shapes[0])) if k != axis):
            raise invalid(f"Concat of shapes {[list(s) for s in shapes]} along axis {axis}")
    parts = [v for v, s in zip(given, shapes) if s[axis] != 0]  # an empty input adds nothing
    if not parts:
        raise Unsupported("shape", "Concat of empty tensors (stitch tensors are never empty)")
    dtypes = {b.type_of(v).dtype for v in parts}
    if len(dtypes) > 1:
        raise invalid(f"Concat of dtypes {', '.join(sorted(dtypes))}")
    if len(parts) == 1:
        return parts
    if all(isinstance(v, Known) for v in parts):  # some of them weights: one new weight
        name = next((v.param for v in parts if v.param), "")
        return [Known(np.concatenate([v.array for v in parts], axis=axis), param=name, name=node.out)]
    return [b.emit("concat", parts, node.out, axis=axis)]


def _shape(b: Builder, v: Value) -> tuple[int, ...]:
    """A value's shape, zero-size ones included (a known empty tensor is legal Concat input)."""
    return v.array.shape if isinstance(v, Known) else b.type_of(v).shape


def element_positions(shape: tuple[int, ...], indices: np.ndarray, axis: int) -> np.ndarray:
    """GatherElements' positions into x.reshape(-1): out[p] = x[p with p[axis] = indices[p]]."""
    if indices.ndim != len(shape) or any(i > d for k, (i, d) in enumerate(zip(indices.shape, shape)) if k != axis):
        raise invalid(f"GatherElements indices of shape {list(indices.shape)} for data of shape {list(shape)}")
    strides = np.array([math.prod(shape[k + 1:]) for k in range(len(shape))], np.int64)
    grid = np.indices(indices.shape, dtype=np.int64)
    grid[axis] = indices
    return np.tensordot(strides, grid, axes=1).astype(np.int64)


def element_offsets(shape: tuple[int, ...], index_shape: tuple[int, ...], axis: int) -> tuple[np.ndarray, int]:
    """The positions of GatherElements with every index 0, and the stride of `axis`."""
    return element_positions(shape, np.zeros(index_shape, np.int64), axis), math.prod(shape[axis + 1:])


def convert_gather_elements(b, node, ins):
    x, idx = ins[0], ins[1]
    t = b.type_of(x)
    axis = normal_axis(node.attr("axis", 0), t.rank)
    flat = reshaped(b, x, (t.size,), node.out)
    if isinstance(idx, Known):
        return [take(b, flat, element_positions(t.shape, known_indices(idx, t.shape[axis]), axis), 0, node.out)]
    it = b.type_of(idx)
    if it.dtype not in INDEX_DTYPES or it.rank != t.rank:
        raise invalid(f"GatherElements indices {it} for data {t}")
    offsets, stride = element_offsets(t.shape, it.shape, axis)
    picked = runtime_positions(b, [(idx, t.shape[axis], stride)], Known(offsets.astype(np.dtype(_np(it.dtype)))),
                               t.size, node.out)
    return [b.emit("gather", [flat, picked], node.out, axis=0)]


def _np(dtype: str) -> str:
    return {"i32": "int32", "i64": "int64"}[dtype]


def runtime_positions(b: Builder, terms, offsets: Known, size: int, hint: str) -> Sym:
    """offsets + sum(index_k * stride_k) for run-time index tensors, each first taken modulo its axis' length
    (a negative index counts from the end); a position out of range becomes `size`, which gather refuses
    at run time as the ONNX op would (never a read of another element)."""
    total: Value = offsets
    bad = None
    for idx, dim, stride in terms:
        wrapped = b.op("where", [b.op("less", [idx, Known(np.asarray(0))], hint),
                                 b.op("add", [idx, Known(np.asarray(dim))], hint), idx], hint)
        out = b.op("where", [b.op("less", [wrapped, Known(np.asarray(0))], hint), Known(np.asarray(True)),
                             b.op("equal", [b.op("less", [wrapped, Known(np.asarray(dim))], hint),
                                            Known(np.asarray(False))], hint)], hint)
        bad = out if bad is None else b.op("where", [bad, Known(np.asarray(True)), out], hint)
        total = b.op("add", [total, b.op("mul", [wrapped, Known(np.asarray(stride))], hint)], hint)
    return b.op("where", [bad, Known(np.asarray(size)), total], hint)


def nd_positions(shape: tuple[int, ...], indices: np.ndarray, batch_dims: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """GatherND as a take along axis 0 of x reshaped to [prod(shape[:batch_dims + m])] + shape[batch_dims + m:]:
    (the positions, that reshape). `indices` are known and already checked."""
    m = indices.shape[-1]
    inner = shape[batch_dims:batch_dims + m]
    lead = indices.shape[:-1]
    strides = np.array([math.prod(inner[k + 1:]) for k in range(m)], np.int64)
    pos = (indices * strides).sum(axis=-1) if m else np.zeros(lead, np.int64)
    batch = math.prod(shape[:batch_dims])
    if batch_dims:
        batch_index = np.arange(batch, dtype=np.int64).reshape(shape[:batch_dims] + (1,) * (len(lead) - batch_dims))
        pos = pos + batch_index * math.prod(inner)
    return pos.astype(np.int64), (batch * math.prod(inner),) + shape[batch_dims + m:]


def gather_nd_indices(shape: tuple[int, ...], idx: np.ndarray, batch_dims: int) -> np.ndarray:
    """GatherND's known indices validated and made non-negative."""
    if idx.dtype.kind not in "iu" or idx.ndim < 1:
        raise invalid(f"GatherND indices must be integers of rank >= 1, got {idx.dtype}{list(idx.shape)}")
    m = idx.shape[-1]
    if not 0 <= batch_dims < min(len(shape), idx.ndim) or batch_dims + m > len(shape):
        raise invalid(f"GatherND of data {list(shape)} with indices {list(idx.shape)} and batch_dims {batch_dims}")
    if idx.shape[:batch_dims] != shape[:batch_dims]:
        raise invalid(f"GatherND batch dimensions differ: data {list(shape)}, indices {list(idx.shape)}")
    dims = np.array(shape[batch_dims:batch_dims + m], np.int64)
    a = idx.astype(np.int64)
    if a.size and ((a < -dims).any() or (a >= dims).any()):
        raise invalid("a GatherND index is out of range")
    return np.where(a < 0, a + dims, a)


def convert_gather_nd(b, node, ins):
    x, idx = ins[0], ins[1]
    t = b.type_of(x)
    batch_dims = node.attr("batch_dims", 0)
    if not isinstance(idx, Known):
        return [gather_nd_at_run_time(b, x, idx, batch_dims, node.out)]
    pos, flat_shape = nd_positions(t.shape, gather_nd_indices(t.shape, idx.array, batch_dims), batch_dims)
    return [take(b, reshaped(b, x, flat_shape, node.out), pos, 0, node.out)]


def gather_nd_at_run_time(b: Builder, x: Value, idx: Sym, batch_dims: int, hint: str) -> Sym:
    """GatherND with run-time indices: the linear position of each index tuple (each component sliced
    out of the last axis), plus its batch's offset, read from x flattened over the indexed axes."""
    t, it = b.type_of(x), b.type_of(idx)
    if it.dtype not in INDEX_DTYPES or it.rank < 1:
        raise invalid(f"GatherND indices {it}")
    m = it.shape[-1]
    gather_nd_indices(t.shape, np.zeros(it.shape, np.int64), batch_dims)  # the shapes' validity
    lead = it.shape[:-1]
    inner = t.shape[batch_dims:batch_dims + m]
    zeros, flat_shape = nd_positions(t.shape, np.zeros(it.shape, np.int64), batch_dims)  # the batch offsets
    terms = []
    for k in range(m):
        component = slice_ranges(b, idx, {it.rank - 1: range(k, k + 1)}, hint)
        terms.append((reshaped(b, component, lead, hint), inner[k], math.prod(inner[k + 1:])))
    offsets = Known(zeros.astype(np.dtype(_np(it.dtype))))
    picked = runtime_positions(b, terms, offsets, flat_shape[0], hint)
    return b.emit("gather", [reshaped(b, x, flat_shape, hint), picked], hint, axis=0)


def convert_trilu(b, node, ins):
    """where(mask, x, 0) with the triangle's mask known at import time."""
    x = ins[0]
    t = b.type_of(x)
    if t.rank < 2:
        raise invalid(f"Trilu of a tensor of rank {t.rank}")
    k = b.static_ints(ins[1], "k", one_d=False)[0] if len(ins) > 1 and ins[1] is not None else 0
    rows, cols = t.shape[-2:]
    tri = np.triu if node.attr("upper", 1) else np.tril
    mask = tri(np.ones((rows, cols), bool), k)
    zero = False if t.dtype == "bool" else 0
    return [b.op("where", [Known(mask, name=f"{node.out}_mask"), x, Known(np.asarray(zero))], node.out)]


PAD_MODES = ("constant", "edge", "reflect", "wrap")


def convert_pad(b, node, ins):
    """Pad as a concat per padded axis: the input between its borders, each border a known constant
    tensor (constant), the edge slice broadcast (edge), a reversed slice (reflect) or the other end's
    slice (wrap); negative pads crop (a slice). Swin's windows and ConvBERT's span convolution pad."""
    x = ins[0]
    t = b.type_of(x)
    mode = node.attr("mode", "constant")
    if mode not in PAD_MODES:
        raise invalid(f"Pad mode '{mode}'")
    if node.opset < 11:
        pads, value = list(node.attr("pads") or []), node.attr("value", 0.0)
    else:
        pads = b.static_ints(ins[1], "pads")
        given = ins[2] if len(ins) > 2 else None
        value = given.array.reshape(-1)[0].item() if isinstance(given, Known) and given.array.size else (
            given if given is not None and not isinstance(given, Known) else 0)  # a value known at run time
    if len(ins) > 3 and ins[3] is not None:
        axes = [normal_axis(a, t.rank, "Pad axes") for a in b.static_ints(ins[3], "axes")]
    else:
        axes = list(range(t.rank))
    if len(pads) != 2 * len(axes) or len(set(axes)) != len(axes):
        raise invalid(f"Pad of {len(pads)} pads for axes {axes}")
    for k, a in enumerate(axes):
        before, after = pads[k], pads[k + len(axes)]
        length = b.type_of(x).shape[a]
        if before < 0 or after < 0:  # crop first
            x = slice_ranges(b, x, {a: range(max(-before, 0), length - max(-after, 0))}, node.out)
        x = pad_axis(b, x, a, max(before, 0), max(after, 0), mode, value, node.out)
    return [x]


def pad_axis(b: Builder, x: Value, a: int, before: int, after: int, mode: str, value, hint: str) -> Value:
    """`x` with `before` and `after` (>= 0) elements added on axis `a` in a Pad mode (see convert_pad);
    `value` a number or a run-time scalar (constant). Conv pads with it too."""
    from ..engine.ir.interp import np_dtype

    if not (before or after):
        return x
    t = b.type_of(x)
    length = t.shape[a]
    if mode in ("reflect", "wrap") and max(before, after) > length - (mode == "reflect"):
        raise Unsupported("shape", f"Pad '{mode}' of {before}, {after} on an axis of {length}")
    shape = list(t.shape)

    def border(width: int, first: bool) -> Value:
        wide = tuple(shape[:a] + [width] + shape[a + 1:])
        if mode == "constant" and not isinstance(value, (int, float, bool)):  # a run-time scalar
            return b.op("broadcast_to", [reshaped(b, value, (1,) * t.rank, hint)], hint, shape=wide)
        if mode == "constant":
            return Known(np.full(wide, value, np_dtype(t.dtype)), name=hint)
        if mode == "edge":
            edge = slice_ranges(b, x, {a: range(0, 1) if first else range(length - 1, length)}, hint)
            return b.op("broadcast_to", [edge], hint, shape=wide)
        if mode == "reflect":
            r = range(width, 0, -1) if first else range(length - 2, length - 2 - width, -1)
        else:
            r = range(length - width, length) if first else range(0, width)
        return slice_ranges(b, x, {a: r}, hint)

    parts = ([border(before, True)] if before else []) + [x] + ([border(after, False)] if after else [])
    return b.emit("concat", parts, hint, axis=a)


def convert_tile(b, node, ins):
    """Tile as a broadcast: each repeated axis [d] viewed as [1, d], broadcast to [r, d] and merged
    into r * d (an index map: position i reads i mod d)."""
    x = ins[0]
    t = b.type_of(x)
    repeats = b.static_ints(ins[1], "repeats")
    if len(repeats) != t.rank or min(repeats, default=1) < 0:
        raise invalid(f"Tile of {t} by repeats {repeats}")
    if 0 in repeats:
        raise Unsupported("shape", "Tile by 0 (stitch tensors are never empty)")
    if all(r == 1 for r in repeats):
        return [x]
    split = tuple(v for r, d in zip(repeats, t.shape) for v in ((1, d) if r > 1 else (d,)))
    wide = tuple(v for r, d in zip(repeats, t.shape) for v in ((r, d) if r > 1 else (d,)))
    spread = b.op("broadcast_to", [reshaped(b, x, split, node.out)], node.out, shape=wide)
    return [reshaped(b, spread, tuple(r * d for r, d in zip(repeats, t.shape)), node.out)]


def convert_cumsum(b, node, ins):
    """CumSum as a product with a known triangle of ones along the axis (moved last): output j sums
    inputs i <= j (i < j exclusive; i >= j, i > j reversed). n^2 multiply-adds for n positions, no
    scan: MPNet's position ids, a cumsum over the sequence's mask, are 128 of them."""
    from ..engine.ir.interp import np_dtype

    x = ins[0]
    t = b.type_of(x)
    if t.rank == 0:
        raise invalid("CumSum of a scalar")
    if t.dtype == "bool":
        raise Unsupported("dtype", "CumSum of bool (ONNX takes numbers)")
    (axis,) = b.static_ints(ins[1], "axis", one_d=False)[:1] or [None]
    a = normal_axis(axis, t.rank, "CumSum axis")
    n = t.shape[a]
    i, j = np.indices((n, n))
    keep = {(0, 0): i <= j, (1, 0): i < j, (0, 1): i >= j, (1, 1): i > j}[(node.attr("exclusive", 0),
                                                                             node.attr("reverse", 0))]
    ones = Known(keep.astype(np_dtype(t.dtype)), name=f"{node.out}_triangle")
    perm = tuple(k for k in range(t.rank) if k != a) + (a,)
    moved = x if a == t.rank - 1 else b.op("transpose", [x], node.out, perm=perm)
    y = b.op("matmul", [moved, ones], node.out)
    return [y if a == t.rank - 1 else b.op("transpose", [y], node.out, perm=tuple(int(p) for p in np.argsort(perm)))]


MOVEMENT_CONVERTERS = {
    "Gather": convert_gather,
    "GatherElements": convert_gather_elements,
    "GatherND": convert_gather_nd,
    "Slice": convert_slice,
    "Split": convert_split,
    "Concat": convert_concat,
    "Trilu": convert_trilu,
    "Pad": convert_pad,
    "Tile": convert_tile,
    "CumSum": convert_cumsum,
}


# -- folding with numpy ------------------------------------------------------------------------------------


def fold_gather_elements(node, arrays):
    """onnx 1.23.2's reference GatherElements crashes on some inputs (an axis of length >= 64 here)."""
    x, idx = arrays[0], arrays[1]
    axis = normal_axis(node.attr("axis", 0), x.ndim)
    pos = element_positions(x.shape, known_indices(Known(idx), x.shape[axis]), axis)
    return [x.reshape(-1)[pos]]


def fold_gather_nd(node, arrays):
    x, idx = arrays[0], arrays[1]
    batch_dims = node.attr("batch_dims", 0)
    pos, flat_shape = nd_positions(x.shape, gather_nd_indices(x.shape, idx, batch_dims), batch_dims)
    return [np.take(x.reshape(flat_shape), pos, axis=0)]


NUMPY_FOLDERS = {"GatherElements": fold_gather_elements, "GatherND": fold_gather_nd}
