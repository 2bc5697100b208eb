"""The index map of every op: where each operand is read, given where the result is wanted.

`operand_maps(node, index, ...)` takes the result's index (one `Ix` per
dimension, over kernel axes) and returns, per operand, the index it is read
at, plus the guards under which it is read at all (a concat piece is read
only where the concat axis falls in that piece). This is the one place that
knows each op's data movement; the kernel model walks it, the cost model
counts what it touches, and lowering turns it into loads.

    elementwise, cast, broadcast_to   numpy broadcasting: a size-1 operand dimension reads 0
    sum mean max min                  reduced dimensions get fresh (reduce) axes
    matmul                            a fresh reduce axis k: a[..., m, k], b[..., k, n]
    transpose                         a permutation
    reshape                           the flat position, split again (div/mod, simplified)
    slice                             start + step * i along each sliced axis
    concat (binary, nested)           piece j reads i - offset_j, guarded to its range
    gather                            x reads an Indirect index: the indices tensor's value
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..ir.ops import REDUCE
from .index import FloorDiv, Indirect, Ix, Mod, simplify


@dataclass(frozen=True)
class Guard:
    """The read happens only where lo <= ix < hi (a concat piece)."""

    ix: Ix
    lo: int
    hi: int

    def substitute(self, mapping: dict[str, Ix]) -> "Guard":
        return Guard(self.ix.substitute(mapping), self.lo, self.hi)

    def __str__(self) -> str:
        return f"{self.lo} <= {self.ix} < {self.hi}"


@dataclass(frozen=True)
class OperandMap:
    index: tuple[Ix, ...]
    guards: tuple[Guard, ...] = ()


@dataclass(frozen=True)
class GatherRef:
    """A gather's index value in the kernel model: the indices tensor (the e-class `indices`) read
    at `index`, an index over kernel axes. It names the value, not the gather that reads it: two
    gathers (or two instances of one) reading one indices tensor at one position select the same
    row, so their Indirect atoms are equal, and kernels unify and share values through them as
    through plain axes."""

    indices: str
    index: tuple[Ix, ...]

    def axes(self):
        for ix in self.index:
            yield from ix.axes()

    def substitute(self, mapping: dict[str, Ix]) -> "GatherRef":
        return GatherRef(self.indices, tuple(ix.substitute(mapping) for ix in self.index))

    def __str__(self) -> str:
        return f"{self.indices}[{', '.join(map(str, self.index))}]"


def operand_maps(op: str, attrs, index: tuple[Ix, ...], in_shapes: list[tuple[int, ...]],
                 out_shape: tuple[int, ...], fresh: Callable[[int], str], extent: Callable[[str], int],
                 indices: str = "") -> list[OperandMap]:
    """Per operand, where it is read when the result is wanted at `index` (see the module docstring).

    `fresh(n)` makes a new reduce axis of extent n; `extent(a)` is an axis's extent (for
    simplifying div/mod); `indices` is a gather's indices value (its Indirect reads it: GatherRef)."""
    attr = dict(attrs)
    if op in ("param", "const"):
        return []
    if op in REDUCE:
        (shape,) = in_shapes
        axes, keep = attr["axes"], attr["keepdims"]
        it = iter(index)
        out = []
        for i, d in enumerate(shape):
            if i in axes:
                out.append(Ix.var(fresh(d)))
                if keep:
                    next(it)
            else:
                out.append(next(it))
        return [OperandMap(tuple(out))]
    if op == "matmul":
        return _matmul(index, in_shapes, fresh)
    if op == "transpose":
        perm = attr["perm"]
        out = [Ix()] * len(perm)
        for i, p in enumerate(perm):
            out[p] = index[i]
        return [OperandMap(tuple(out))]
    if op == "reshape":
        return [OperandMap(_reshape_memo(index, out_shape, in_shapes[0], extent))]
    if op == "slice":
        out = list(index)
        for a, start, step in zip(attr["axes"], attr["starts"], attr["steps"]):
            out[a] = index[a] * step + start
        return [OperandMap(tuple(out))]
    if op == "concat":
        axis = attr["axis"]
        n0 = in_shapes[0][axis]
        n1 = in_shapes[1][axis]
        shifted = list(index)
        shifted[axis] = index[axis] - n0
        return [OperandMap(tuple(index), (Guard(index[axis], 0, n0),)),
                OperandMap(tuple(shifted), (Guard(index[axis], n0, n0 + n1),))]
    if op == "gather":
        axis = attr["axis"]
        x_shape, idx_shape = in_shapes
        r = len(idx_shape)
        idx_index = tuple(index[axis:axis + r])
        x_index = tuple(index[:axis]) + (Ix.var(Indirect(GatherRef(indices, idx_index), x_shape[axis])),) + tuple(
            index[axis + r:])
        return [OperandMap(x_index), OperandMap(idx_index)]
    # elementwise, where, cast, broadcast_to: numpy broadcasting, trailing dimensions aligned
    return [OperandMap(_broadcast(index, shape, out_shape)) for shape in in_shapes]


def _broadcast(index: tuple[Ix, ...], shape: tuple[int, ...], out_shape: tuple[int, ...]) -> tuple[Ix, ...]:
    off = len(out_shape) - len(shape)
    return tuple(Ix() if (d == 1 and out_shape[j + off] != 1) else index[j + off] for j, d in enumerate(shape))


def _matmul(index: tuple[Ix, ...], in_shapes, fresh) -> list[OperandMap]:
    a, b = in_shapes
    k = Ix.var(fresh(a[-1]))
    out = list(index)
    n = None if len(b) == 1 else out.pop()
    m = None if len(a) == 1 else out.pop()
    batch = out  # the broadcast batch dimensions; each operand's own align right

    def batch_of(shape):
        own = max(len(shape) - 2, 0)
        return tuple(batch[len(batch) - own:]) if own else ()

    ia = batch_of(a) + ((m,) if m is not None else ()) + (k,)
    ib = batch_of(b) + (k,) + ((n,) if n is not None else ())
    # a size-1 dimension of an operand (a broadcast batch dimension) is read at 0
    ia = tuple(Ix() if (d == 1 and ix != k) else ix for d, ix in zip(a, ia))
    ib = tuple(Ix() if (d == 1 and ix != k) else ix for d, ix in zip(b, ib))
    return [OperandMap(ia), OperandMap(ib)]


# _reshape's results by their arguments (the extents of the axes the index reads standing for
# `extent`): the schedule search forms the same kernels' reshapes again and again, and their
# div/mod simplification was half of a small program's extraction. Emptied when full.
_RESHAPES: dict = {}
RESHAPES_KEPT = 1 << 16


def _reshape_memo(index: tuple[Ix, ...], out_shape, in_shape, extent) -> tuple[Ix, ...]:
    key = (index, tuple(out_shape), tuple(in_shape),
           tuple((a, extent(a)) for a in dict.fromkeys(a for ix in index for a in ix.axis_names)))
    out = _RESHAPES.get(key)
    if out is None:
        if len(_RESHAPES) >= RESHAPES_KEPT:
            _RESHAPES.clear()
        out = _RESHAPES[key] = _reshape(index, out_shape, in_shape, extent)
    return out


def _reshape(index: tuple[Ix, ...], out_shape, in_shape, extent) -> tuple[Ix, ...]:
    """The operand's index: the flat position of `index` in `out_shape`, split by `in_shape`.

    A reshape that only adds or drops size-1 dimensions may read its other dimensions where they
    are instead; the two agree wherever the dropped index is 0, and differ only outside a concat
    piece's range, where the read is not used. The flat position is kept unless it needs a div/mod
    the index had not (a depthwise conv's stride-1 taps stacked along an added axis all read
    x[.., p + tap] through it, whichever piece the concat picks); the direct index where it does (strided
    taps read x[.., 2*(p + k // 64) % 31] split again, not x[.., 2*p + tap]: wav2vec2's strided
    convs looked unchunkable and stored their taps in copy kernels)."""
    flat = Ix()
    stride = 1
    for ix, d in reversed(list(zip(index, out_shape))):
        flat = flat + ix * stride
        stride *= d
    flat = simplify(flat, extent)
    out = []
    stride = math.prod(in_shape)
    for d in in_shape:
        stride //= d
        if d == 1:
            out.append(Ix())
            continue
        part = Ix.var(FloorDiv(flat, stride)) if stride > 1 else flat
        out.append(simplify(Ix.var(Mod(part, d)), extent))
    given = {t for ix in index for t, _ in ix.terms if not isinstance(t, str)}
    if ([d for d in out_shape if d != 1] == [d for d in in_shape if d != 1]
            and any(not isinstance(t, str) and t not in given for ix in out for t, _ in ix.terms)):
        kept = iter([ix for ix, d in zip(index, out_shape) if d != 1])
        return tuple(Ix() if d == 1 else next(kept) for d in in_shape)
    return tuple(out)
