"""The geometry of a kernel's global reads: what each touches, tile by tile.

A read's *image* is the elements of its input it touches over the kernel (the product of its axes'
ranges, at most its bounding box, taken tile by tile where the box is the smaller); the reads one
nest makes of one input touch the union of their images (`nest_image`: the pieces of a concat,
x beside rotate_half(x)), else at most the hull of their boxes in each tile. A read's *region* is
its staging key: two reads with equal regions share one on-chip copy. The plan (plan.py) stages
reads by region; the price (price.py) counts bytes by image.
"""

from __future__ import annotations

import itertools
import math

from ..ir.extent import is_symbolic, planned
from ..ir.program import dtype_bytes
from .index import Indirect, Ix, flat_address, interval
from .kernel import Kernel, Read
from .tile_grid import in_tile, tile_boxes, tile_hulls

DENSE = "dense"  # a region key's mark: a block of consecutive elements in each tile (`dense_part`)


def region(read: Read, kernel: Kernel, tiled: set[str], shape: tuple[int, ...]) -> tuple:
    """A read's staging key: equal keys share one on-chip copy.

    A read whose untiled axes walk a block of consecutive elements (`dense_part`) is keyed by where
    the block starts and its length: a group's sums read `x[p0, 4*p1h + r0 // 1024, (r0 // 32) % 32,
    r0 % 32]` and its normalized channels `x[p0, 4*p1h + p1l, p2, p3]`, both the group's 4096
    elements, through one copy. Otherwise its untiled axes are renamed by where they first appear
    and their extent (`untiled_names`): reads that differ only by which untiled axes walk the same
    positions read the same elements."""
    dense = None if read.guards else dense_part(read.index, kernel, tiled, shape)
    if dense is not None:
        start, length, _ = dense
        return (DENSE, start, length, read.guards)  # (guards last, as every key: none here)
    names = untiled_names(read.index, kernel, tiled)
    mapping = {a: Ix.var(n) for a, n in names.items()}
    return tuple(ix.substitute(mapping) for ix in read.index) + (read.guards,)


def dense_part(index: tuple[Ix, ...], kernel: Kernel, tiled: set[str], shape: tuple[int, ...]):
    """(start, length, untiled) where the read's flat address (index.py `flat_address`) is `start`, an
    expression of tiled axes alone, plus its untiled axes walking `length` consecutive elements
    row-major (`untiled`: each such axis with its coefficient, outermost first); else None."""
    if any(is_symbolic(d) for d in shape):
        return None
    flat = flat_address(index, shape)
    start: dict = {}
    untiled: list[tuple[str, int]] = []
    for t, c in flat.terms:
        if isinstance(t, str) and t not in tiled:
            if kernel.extents[t] != 1:
                untiled.append((t, c))
        elif isinstance(t, str) or all(a in tiled for a in t.axes()) and not isinstance(t, Indirect):
            start[t] = c
        else:
            return None
    length = 1
    for a, c in sorted(untiled, key=lambda ac: ac[1]):
        if is_symbolic(c) or is_symbolic(kernel.extents[a]) or c != length:
            return None
        length *= kernel.extents[a]
    if not untiled:
        return None
    return Ix.of(start, flat.const), length, tuple(sorted(untiled, key=lambda ac: -ac[1]))


def untiled_names(index: tuple[Ix, ...], kernel: Kernel, tiled: set[str]) -> dict[str, str]:
    """Each untiled axis of `index` -> its name in a region key: the order it first appears in and
    its extent (`*0:64`). Two indices with equal keys read the same elements, axis for axis through
    these names (lowering reads a shared copy so: `lowering/lower.py`, `read`)."""
    names: dict[str, str] = {}
    for a in dict.fromkeys(a for ix in index for a in ix.axes()):
        if a not in tiled:
            names[a] = f"*{len(names)}:{kernel.extents[a]}"
    return names


def image(r: Read, kernel: Kernel, shape: tuple[int, ...], tile: dict[str, int] | None = None) -> int:
    """Elements of the input one read touches over the whole kernel: the product of its axes'
    ranges (an injective index map), at most its bounding box, taken tile by tile (`tile`) where
    the box is the smaller: each tile reads its own box. Cached by what it depends on (`geometry`):
    a kernel is priced in every tile order and chunk size, which often choose the same tile, and the
    search forms and prices the same conv's windows in kernel after kernel (ResNet-18: 194,523
    images asked, 10,017 distinct)."""
    return _cached((geometry((r,), kernel, tile), shape), lambda: _image(r, kernel, shape, tile))


def _cached(key, work) -> int:
    """`work()`, remembered under `key` in the images' cache (cleared whole past IMAGE_CACHE entries)."""
    n = _IMAGES.get(key)
    if n is None:
        if len(_IMAGES) > IMAGE_CACHE:
            _IMAGES.clear()
        n = _IMAGES[key] = work()
    return n


def geometry(rs, kernel: Kernel, tile: dict[str, int] | None) -> tuple:
    """What the images and hulls of reads `rs` depend on besides the input's shape: their indices and
    guards, and the extent and tile of each axis their indices name (the only axes whose ranges they
    ask for; a kernel is not compared whole: equal kernels rebuilt apart would be compared field by
    field on every lookup)."""
    axes = dict.fromkeys(a for r in rs for a in r.axes)
    return (tuple((r.index, r.guards) for r in rs), tuple(kernel.extents[a] for a in axes),
            tuple(tile.get(a, 0) for a in axes) if tile else None)


IMAGE_CACHE = 1 << 15  # images and hulls kept (a compile asks for a few thousand distinct; emptied when full)
_IMAGES: dict[tuple, int] = {}


def _image(r: Read, kernel: Kernel, shape: tuple[int, ...], tile: dict[str, int] | None) -> int:
    span = _spans(r, kernel)
    n = _points(r.axes, span)
    if _gathered(r):  # tiles may read a row again: at most one element per point, not the box
        return n
    box = _volume(_box(r, shape, span))
    if box >= n or not tile:
        return min(n, box)
    return min(n, _tile_boxes(r, kernel, shape, span, tile, box))


TILE_BOXES = 4096  # tiles whose boxes are summed one by one; above, each counts the whole box


def _tile_boxes(r: Read, kernel: Kernel, shape: tuple[int, ...], span, tile: dict[str, int], box: int) -> int:
    """A read with fewer elements than points (a broadcast through a reshape's div/mod: x[p % 2])
    touches, in each tile of the axes it varies along, at most that tile's points and box; a tile
    reads again what an earlier one read (x[0] and x[1] in every tile of two)."""
    count, _ = _tile_origins(r.axes, kernel, tile)
    if count == 1:
        return box
    if count > TILE_BOXES:
        return count * box
    if count < GRID_TILES or _symbolic(r.axes, kernel, shape):
        return _tile_boxes_by_tile(r, kernel, shape, span, tile)
    return tile_boxes(r, span, shape, kernel, tile)


# From this many tiles the sums over tiles are taken as arrays over the grid of tiles (tile_grid.py),
# below it tile by tile (a few tiles: numpy's calls cost more than the loop); the same integers.
GRID_TILES = 16


def _symbolic(axes, kernel: Kernel, shape: tuple) -> bool:
    return any(is_symbolic(kernel.extents[a]) for a in axes) or any(is_symbolic(d) for d in shape)


def _tile_boxes_by_tile(r: Read, kernel: Kernel, shape: tuple[int, ...], span, tile: dict[str, int]) -> int:
    """`_tile_boxes`' sum one tile at a time (tile_grid.py `tile_boxes` is the same over arrays)."""
    total = 0
    for at in _tile_origins(r.axes, kernel, tile)[1]:
        tile_span = in_tile(span, at, tile)
        total += min(_points(r.axes, tile_span), _volume(_box(r, shape, tile_span)))
    return total


def _tile_origins(axes, kernel: Kernel, tile: dict[str, int]):
    """(how many tiles the tiled ones among `axes` make, each tile's origin on them)."""
    tiled = sorted({a for a in axes if a in tile and tile[a] < kernel.extents[a]})
    starts = [range(0, kernel.extents[a], tile[a]) for a in tiled]
    return math.prod(len(s) for s in starts), (dict(zip(tiled, o)) for o in itertools.product(*starts))


def _points(axes, span) -> int:
    n = 1
    for a in axes:
        lo, hi = span(a)
        n *= max(hi - lo + 1, 0)
    return n


def _gathered(r: Read) -> bool:
    return any(isinstance(t, Indirect) for ix in r.index for t, _ in ix.terms)


def _narrows(g) -> bool:
    """Whether `_spans` narrows an axis by the guard: one on `c*a + k` with c > 0. Another (a
    concat's piece behind a reshape, guarded on `4*p0 + p1`) is not followed: the read's image
    then counts the points it leaves out, an upper bound."""
    return g.ix.stepped is not None


def _spans(r: Read, kernel: Kernel):
    """Each axis's inclusive range under the read's guards (a guard on `c*a + k` narrows `a`)."""
    narrowed: dict[str, tuple[int, int]] = {}
    for g in r.guards:
        if _narrows(g):
            (a, c), k = g.ix.terms[0], g.ix.const
            lo, hi = narrowed.get(a, (0, kernel.extents[a] - 1))
            narrowed[a] = (max(lo, -(-(g.lo - k) // c)), min(hi, -(-(g.hi - k) // c) - 1))

    def span(a: str) -> tuple[int, int]:
        return narrowed.get(a, (0, kernel.extents[a] - 1))

    return span


def _box(r: Read, shape: tuple[int, ...], span) -> list[tuple[int, int]]:
    box = []
    for ix, d in zip(r.index, shape):
        lo, hi = interval(ix, span)
        box.append((max(lo, 0), min(hi, d - 1)))
    return box


def _volume(box) -> int:
    n = 1
    for lo, hi in box:
        n *= max(hi - lo + 1, 0)
    return n


def nest_image(reads: list[Read], kernel: Kernel, shape: tuple[int, ...], tile: dict[str, int]) -> tuple[int, bool]:
    """(elements, exact?) of one input that one nest's reads touch, summed over tiles.

    One read: its image. Reads that differ only in one dimension, by an offset along one axis
    (the pieces of a concat, x beside rotate_half(x)): the union along that axis tile by tile,
    exact unless a read is gathered (its index may repeat). Otherwise the images' sum, at most
    what the reads' boxes span in each tile (`_tile_hulls`): an upper bound (two reads of one tile
    may touch the same elements, two tiles may each read the same element: x + transpose(x))."""
    first: dict = {}
    for r in reads:
        first.setdefault((r.index, r.guards), r)
    if len(first) == 1:
        r = reads[0]
        return image(r, kernel, shape, tile), not _gathered(r) and all(_narrows(g) for g in r.guards)
    rs = list(first.values())
    pieces = _pieces(rs, kernel, tile)
    if pieces is not None:  # (a gathered index counts each point it reads: repeats once each)
        return pieces, not any(_gathered(r) for r in rs)
    # a gathered read is made by every tile along the axes the others vary along and it does not
    # (x + x[i] in tiles along x's axis reads x[i] in each tile; the caller counts re-reads by the
    # other axes)
    together = {a for r in rs for a in r.axes}
    total = sum(image(r, kernel, shape, tile)
                * (_tile_origins(together - set(r.axes), kernel, tile)[0] if _gathered(r) else 1) for r in rs)
    if any(_gathered(r) for r in rs) or len(rs) * _tile_origins(together, kernel, tile)[0] > HULL_WORK:
        return total, False
    return min(total, _tile_hulls(rs, kernel, shape, tile)), False


# Distinct reads of one input in one nest times the tiles they span, beyond which their images' sum is
# taken as it is, without the tighter hull tile by tile: the hull of a long inline chain's many reads (a
# Winograd conv's transforms, docs/perf/2026-11-29-torch-compile.md) took seconds a price to bound.
HULL_WORK = 8192


def _tile_hulls(rs: list[Read], kernel: Kernel, shape: tuple[int, ...], tile: dict[str, int]) -> int:
    """Elements of the box around every read's box, tile by tile, summed over tiles: no tile reads
    more of the input than that (a tile of x + transpose(x) reads a row and a column of x, and the
    next tile another row and column: the rows' sum is the input, the columns' too)."""
    key = ("hull", geometry(rs, kernel, tile), shape)  # (cached beside the images, as they are)
    return _cached(key, lambda: _hulls(rs, kernel, shape, tile))


def _hulls(rs: list[Read], kernel: Kernel, shape: tuple[int, ...], tile: dict[str, int]) -> int:
    spans = [_spans(r, kernel) for r in rs]
    axes = [a for r in rs for a in r.axes]
    count, _ = _tile_origins(axes, kernel, tile)
    if count > TILE_BOXES:
        return count * math.prod(shape)
    if count < GRID_TILES or _symbolic(axes, kernel, shape):
        return _tile_hulls_by_tile(rs, kernel, shape, tile, spans)
    return tile_hulls(rs, spans, shape, kernel, tile)


def _tile_hulls_by_tile(rs: list[Read], kernel: Kernel, shape: tuple[int, ...], tile: dict[str, int], spans) -> int:
    """`_tile_hulls`' sum one tile at a time (tile_grid.py `tile_hulls` is the same over arrays)."""
    total = 0
    for at in _tile_origins([a for r in rs for a in r.axes], kernel, tile)[1]:
        boxes = []
        for r, span in zip(rs, spans):
            tile_span = in_tile(span, at, tile)
            box = _box(r, shape, tile_span)
            if _volume(box) and _points(r.axes, tile_span):
                boxes.append(box)
        if boxes:
            total += _volume([(min(b[d][0] for b in boxes), max(b[d][1] for b in boxes)) for d in range(len(shape))])
    return total


def _pieces(rs: list[Read], kernel: Kernel, tile: dict[str, int]) -> int | None:
    """The union of reads that differ only in dimension d, each reading `axis + offset` there,
    with guards only on that axis; None when they are not so."""
    dims = [d for d in range(len(rs[0].index)) if len({r.index[d] for r in rs}) > 1]
    if len(dims) > 1:
        return None
    d = dims[0] if dims else None
    axis = None
    offsets = []
    for r in rs:
        if d is None:
            return None
        ix = r.index[d]
        if len(ix.terms) != 1 or not isinstance(ix.terms[0][0], str) or ix.terms[0][1] != 1:
            return None
        a = ix.terms[0][0]
        if axis not in (None, a):
            return None
        axis = a
        offsets.append(ix.const)
        if any(axis in set(o.axes()) for j, o in enumerate(r.index) if j != d):
            return None
        if any(set(g.ix.axes()) != {axis} for g in r.guards):
            return None
    common = 1
    for a in dict.fromkeys(x for j, ix in enumerate(rs[0].index) if j != d for x in ix.axes()):
        common *= kernel.extents[a]
    spans = [_spans(r, kernel)(axis) for r in rs]
    extent = kernel.extents[axis]
    t = tile.get(axis, extent)
    along = 0
    for start in range(0, extent, t):
        cells = set()
        for (lo, hi), off in zip(spans, offsets):
            cells.update(range(max(lo, start) + off, min(hi, start + t - 1) + off + 1))
        along += len(cells)
    return common * along


def line_factor(index: tuple[Ix, ...], dtype: str, line: int = 64) -> float:
    """Bytes moved per byte used by a read: a stride along the last dimension, or an index the
    hardware cannot follow, fetches whole lines for single elements."""
    if not index:
        return 1.0
    last = index[-1]
    elem = dtype_bytes(dtype)
    worst = line / elem
    if any(not isinstance(t, str) for t, _ in last.terms):
        return min(2.0, worst)
    strides = [abs(c) for _, c in last.terms]
    if not strides or 1 in strides:
        return 1.0
    return min(float(planned(min(strides))), worst)
