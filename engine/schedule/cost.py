"""The cost model: a Schedule priced on a Target, reading only the target's numbers.

Per kernel it decides the *plan* lowering follows (tiled axes, tile sizes,
which inputs are held whole, which reads are staged on chip, which stored
reductions finish across tiles) and prices it:

    cycles = launch_cycles + transfer (+ or max, with overlap_dma) compute [+ sync]
    transfer = (bytes read + bytes written) / global_bandwidth   (strided reads cost whole lines)
    compute = vector work / (vector_lanes * cores used) + matrix work

- Tile space: the kernel's parallel axes along which every reduction,
  matmul and stored value inside it varies (AStitch's rule: a tile holds the
  reduced axes whole, so no reduction is split or recomputed across tiles).
  The one exception is *global stitching*: a stored reduction that nothing
  else in the kernel reads may be tiled along the axes it reduces; each tile
  then produces a partial, and the partials are combined in tile order after
  the last tile (deterministic; priced as a sync plus the partials' traffic).
- Tile size: a divisor of each tiled extent (along a matmul's columns on a
  target without a matrix unit, a whole number of vectors), grown one axis at a
  time while the tile's on-chip footprint fits `onchip_bytes` and at least the target's
  `min_tiles` (`tiles_per_core` x cores, 2 x cores unless it says) remain.
  The footprint: inputs held whole, staged reads, shared/local values, the
  accumulators of reductions and matmuls and, on the vector unit, a matmul's
  packed right operand (`schedule.packed_operand`), each aligned. A kernel whose
  smallest tile does not fit is infeasible.
- Bytes: an input that does not vary along every tiled axis and takes at most
  the target's `resident_share` of the on-chip buffer (an eighth unless it
  says: `resident_bytes`) is held whole and read once (*resident*).
  Otherwise a read made in two nests, or not varying along every tiled axis,
  is *staged*: copied on chip once per tile where the innermost tiled axis it
  varies along moves on (so a matmul's right operand is read again for each
  tile of rows: `rereads`); reads that differ only by renaming whole axes
  share one copy. A read made in one nest *streams*: the reads of one input in
  one nest touch the union of their images (x and rotate_half(x) read x
  once); a read with fewer elements than points (a broadcast read through a
  reshape's div/mod) touches its bounding box once per tile. Where the order
  of tile loops matters, every order is priced and the cheapest kept
  (`tile_orders`). Outputs are written once (a stored reduction split across
  tiles is combined in its global buffer: set, then read and written again).
  Lowering reads and writes exactly these bytes, in that order (gathers read
  at most this many: repeated indices read a row once).
- Work: each held instance computes its slice per tile; inline values are
  recomputed in each nest that reads them, once per iteration of that nest
  (a value broadcast into a larger nest, the rsqrt of an axis-0 layer norm's
  variance, is recomputed for every element it is broadcast to), so
  recomputation is priced (a product's operands excepted: computed per row
  and k, or per k and column, over their own axes); index
  maps (transpose, reshape, broadcast, slice) cost nothing, a concat's select
  and a gather's index one op per element.
- Panels: on the vector unit a product's tile runs in register blocks of
  MICRO_ROWS rows by MICRO_VECTORS vectors. A left operand read with plain
  loads is walked panel of columns by panel, each panel reading the tile's rows
  of A (by the k it sums, a chunk's when k is chunked); a computed one block of
  rows by block, each reading the tile's panel of B. What each step re-reads,
  larger than PANEL_SHARE of the on-chip buffer, does not stay there and is
  priced as read again from memory (`panel_bytes`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

from ..ir.ops import ACCUMULATING, REDUCE, is_injective
from ..ir.program import TensorType, dtype_bytes
from .index import Indirect, Ix, Mod, affine, interval
from .kernel import AxisKind, Hold, Instance, Kernel, Read, Schedule, index_axes, packed_operand
from .maps import Guard
from .target import Target

INFEASIBLE = math.inf
# Rows of C the vector unit's matmul micro-kernel holds in registers (targets/c_matmul.py's blocks).
MICRO_ROWS = 8
# The narrowest vector the micro-kernel runs a product's columns in (targets/c_matmul.py's widths).
NARROWEST_VECTOR_BYTES = 16
# Vectors of C across one register block: the columns of one panel of B (targets/c_matmul.py's, with 32 registers).
MICRO_VECTORS = 3
# A product's panel of B (or its rows of A) stays on chip from one block to the next up to this share
# of `onchip_bytes` (the rest holds the other operand's, the accumulators and what else it stages).
PANEL_SHARE = 0.5
FREE_OPS = ("transpose", "reshape", "broadcast_to", "slice")  # index maps: no arithmetic
WHOLE = "*"  # a region dimension read whole (an untiled axis over the full extent)


@dataclass(frozen=True)
class Staged:
    """A read copied on chip per tile: the input, the index it is copied at, and its region key."""

    cid: str
    index: tuple[Ix, ...]
    region: tuple


@dataclass
class KernelCost:
    parallel: list[str]  # tiled axes, outermost first
    tile: dict[str, int]  # tile extent of each tiled axis
    tiles: int
    footprint: int  # on-chip bytes of one tile
    bytes_read: int
    bytes_written: int
    vector_cycles: float
    matrix_cycles: float
    transfer_cycles: float
    cycles: float
    problem: str = ""
    resident: frozenset = frozenset()  # inputs held whole for the kernel
    staged: tuple[Staged, ...] = ()  # reads copied on chip per tile
    partial: frozenset = frozenset()  # reductions split across tiles (instance keys): global stitching
    epilogue: frozenset = frozenset()  # instances computed from them after the last tile
    # bytes_read is what lowering reads, not an upper bound (a gather with repeated indices, or
    # overlapping reads of one input the model does not follow, read at most bytes_read)
    exact: bool = True
    # a matmul's reduced axis walked in chunks of tile[chunked] inside each tile (the last of
    # `parallel`, a serial loop): its operands are staged one chunk at a time
    chunked: str = ""
    packed: frozenset = frozenset()  # matmuls whose right operand is packed first (`_Facts.on`)

    @property
    def feasible(self) -> bool:
        return not self.problem


@dataclass
class ScheduleCost:
    kernels: list[KernelCost]
    cycles: float
    global_bytes: int
    compulsory_bytes: int
    problems: list[str] = field(default_factory=list)

    @property
    def feasible(self) -> bool:
        return not self.problems


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


# ---------------------------------------------------------------------------
# what the kernel's contents imply


@dataclass
class _Facts:
    """What pricing needs from a kernel's contents, computed once per kernel."""

    restrict: list[frozenset]  # axis sets the tiled axes must lie in
    candidates: list[str]  # axes that may be tiled, in loop order
    partial_axes: dict[int, frozenset]  # reduction -> the axes it may be split along (global stitching)
    tails: dict[int, frozenset]  # such a reduction -> the instances computed from it after the last tile
    buffers: list[tuple[tuple[str, ...], int]]  # on-chip values: (axes, bytes per element)
    work: list[tuple[tuple[str, ...], str, float]]  # (axes of the loop nest, op, elements per point)
    matmuls: list[tuple[Instance, int]]  # (instance, k)
    aliases: list[tuple[tuple[Ix, ...], tuple[Ix, ...]]]  # a held value read at another index
    packs: dict[int, tuple[tuple[str, ...], int]]  # matmul -> its packable right operand: (axes, bytes each)
    packed_here: bool = False  # packs are made (`on` a target without a matrix unit)
    plain: frozenset = frozenset()  # matmuls whose left operand is read with plain loads (`plain_left`)

    def on(self, target: Target) -> _Facts:
        """The facts on `target`: on the vector unit a matmul's computed or strided right operand is
        packed into a tile buffer (on chip too); a matrix unit reads operand tiles where they are."""
        if target.matrix is not None or not self.packs:
            return self
        return replace(self, buffers=self.buffers + list(self.packs.values()), packed_here=True)


def reduced_axes(inst: Instance) -> tuple[str, ...]:
    """The axes a reduction or matmul instance sums over (in its operands, not in its index)."""
    own = set(inst.axes)
    return tuple(dict.fromkeys(a for t in inst.operand_index for ix in t for a in ix.axes() if a not in own))


def facts(kernel: Kernel, types) -> _Facts:
    restrict: list[frozenset] = []
    buffers, work, matmuls, aliases = [], [], [], []
    packs: dict[int, tuple[tuple[str, ...], int]] = {}
    stored = set(kernel.stores)
    tails = _tails(kernel)
    partial_axes = {key: frozenset(kernel.instances[key].axes) | frozenset(reduced_axes(kernel.instances[key]))
                    for key in tails}
    in_tail = set().union(*tails.values()) if tails else set()
    for inst in kernel.instances:
        op = inst.node.op
        if op in ("param", "const"):
            continue
        accumulates = op in ACCUMULATING
        own = frozenset(inst.axes)
        if inst.key in partial_axes:
            restrict.append(partial_axes[inst.key])
        elif (accumulates or inst.key in stored) and inst.key not in in_tail:
            restrict.append(own)
        if op == "matmul":
            matmuls.append((inst, types[inst.node.children[0]].shape[-1]))
            axes = packed_operand(kernel, inst)
            if axes:
                packs[inst.key] = (axes, dtype_bytes(types[inst.node.children[1]].dtype))
        elif op not in FREE_OPS and inst.held:
            work.append((_nest_loop(inst), op, 1.0))
        if inst.held and op != "param":
            work.extend(_inline_work(kernel, inst))
        if inst.hold in (Hold.SHARED, Hold.LOCAL) or (inst.hold is Hold.ROOT and accumulates):
            dtype = types[inst.cid].dtype
            wide = op in ("sum", "mean") and dtype == "f16"  # lowering/widen.py's f32 accumulator
            buffers.append((inst.axes, dtype_bytes("f32" if wide else dtype)))
        for (kind, ref), index in zip(inst.operands, inst.operand_index):
            if kind not in ("global", "const") and kernel.instances[ref].held and kernel.instances[ref].index != index:
                aliases.append((kernel.instances[ref].index, index))
    root_axes = [a for ix in kernel.root_instance.index for a in ix.axes()]
    order = list(dict.fromkeys(root_axes + [a.name for a in kernel.axes if a.kind is AxisKind.PARALLEL]
                               + [a for axes in partial_axes.values() for a in sorted(axes)]))
    candidates = [a for a in order if kernel.extents.get(a, 1) > 1
                  and (kernel.kinds[a] is AxisKind.PARALLEL or any(a in s for s in partial_axes.values()))]
    plain = frozenset(inst.key for inst, _ in matmuls if plain_left(kernel, inst))
    return _Facts(restrict, candidates, partial_axes, tails, buffers, work, matmuls, aliases, packs, plain=plain)


def _nest_loop(inst: Instance) -> tuple[str, ...]:
    """The axes of the loop nest computing a held instance (a reduction's reduced axes inside)."""
    return inst.axes + (reduced_axes(inst) if inst.node.op in ACCUMULATING else ())


def _inline_work(kernel: Kernel, held: Instance) -> list[tuple[tuple[str, ...], str, float]]:
    """The work of the values a held instance's nest computes inline: each once per iteration of
    that nest (a value read through a broadcast, rsqrt(var) under a [512, 64, 256] layer norm, is
    recomputed for every element it is broadcast to), except a product's operands, computed once
    per row and k (the left) or per k and column (the right) over their own axes."""
    out = []
    for key in kernel.inlined(held.key)[1:]:
        inst = kernel.instances[key]
        if inst.node.op in FREE_OPS or inst.node.op in ("param", "const"):
            continue
        out.append((inst.axes if held.node.op == "matmul" else _nest_loop(held), inst.node.op, 1.0))
    return out


def _tails(kernel: Kernel) -> dict[int, frozenset]:
    """Reductions that may be split across tiles (global stitching): sum, mean, max or min whose
    readers in the kernel (and theirs, ...) are injective and vary along none of the axes the
    reduction sums over; the readers are then computed once, after the partials are combined."""
    readers = kernel.readers
    out = {}
    for inst in kernel.instances:
        if inst.node.op not in REDUCE:
            continue
        own = set(inst.axes)
        tail: set[int] = set()
        stack = list(readers.get(inst.key, ()))
        ok = True
        while stack and ok:
            key = stack.pop()
            if key in tail:
                continue
            r = kernel.instances[key]
            ok = is_injective(r.node.op) and set(r.axes) <= own
            tail.add(key)
            stack.extend(readers.get(key, ()))
        if ok and (tail or inst.key in kernel.stores):
            out[inst.key] = frozenset(tail)
    return out


def parallel_axes(kernel: Kernel, f: _Facts | None = None) -> list[str]:
    f = f or facts(kernel, None)
    axes = list(f.candidates)
    for allowed in f.restrict:
        axes = [a for a in axes if a in allowed]
    return axes


def alias_problem(kernel: Kernel, f: _Facts, parallel: list[str]) -> str:
    """A held value read at another index is fine where the two differ only by whole (untiled)
    axes of the same extent: the buffer holds those axes whole."""
    tiled = set(parallel)
    for own, other in f.aliases:
        for a, b in zip(own, other):
            if a == b:
                continue
            la, lb = a.label, b.label
            if (la is None or lb is None or la in tiled or lb in tiled
                    or kernel.extents[la] != kernel.extents[lb]):
                return "a held value is read at two different indices"
    return ""


# ---------------------------------------------------------------------------
# global reads


def region(read: Read, kernel: Kernel, tiled: set[str], shape: tuple[int, ...]) -> tuple:
    """A read's staging key: equal keys share one on-chip copy (whole untiled axes renamed)."""
    labels = [ix.label for ix in read.index]
    distinct = len(set(labels)) == len(labels)
    key = []
    for ix, d in zip(read.index, shape):
        lab = ix.label
        if distinct and lab is not None and lab not in tiled and kernel.extents[lab] == d:
            key.append(WHOLE)
        else:
            key.append(ix)
    return tuple(key) + (read.guards,)


def image(r: Read, kernel: Kernel, shape: tuple[int, ...], tile: dict[str, int] | None = None) -> int:
    """Elements of the input one read touches over the whole kernel: the product of its axes'
    ranges (an injective index map), at most its bounding box, taken tile by tile (`tile`) where
    the box is the smaller: each tile reads its own box. Cached: a kernel is priced in every tile
    order and chunk size, which often choose the same tile (a conv's windows, summed box by box,
    took 3 ms an image)."""
    key = (r, kernel, shape, tuple(sorted(tile.items())) if tile else None)
    if key not in _IMAGES:
        if len(_IMAGES) > IMAGE_CACHE:
            _IMAGES.clear()
        _IMAGES[key] = _image(r, kernel, shape, tile)
    return _IMAGES[key]


IMAGE_CACHE = 1 << 14  # images kept (a compile prices a few thousand kernels; emptied when full)
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
    count, origins = _tile_origins(r.axes, kernel, tile)
    if count == 1:
        return box
    if count > TILE_BOXES:
        return count * box
    total = 0
    for at in origins:
        tile_span = _in_tile(span, at, tile)
        total += min(_points(r.axes, tile_span), _volume(_box(r, shape, tile_span)))
    return total


def _tile_origins(axes, kernel: Kernel, tile: dict[str, int]):
    """(how many tiles the tiled ones among `axes` make, each tile's origin on them)."""
    tiled = sorted({a for a in axes if a in tile and tile[a] < kernel.extents[a]})
    starts = [range(0, kernel.extents[a], tile[a]) for a in tiled]
    return math.prod(len(s) for s in starts), (dict(zip(tiled, o)) for o in itertools.product(*starts))


def _in_tile(span, at: dict[str, int], tile: dict[str, int]):
    """`span` (an axis's inclusive range) narrowed to the tile whose origin is `at`."""
    def tile_span(a: str) -> tuple[int, int]:
        lo, hi = span(a)
        return (max(lo, at[a]), min(hi, at[a] + tile[a] - 1)) if a in at else (lo, hi)

    return tile_span


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
    distinct = list(dict.fromkeys((r.index, r.guards) for r in reads))
    if len(distinct) == 1:
        r = reads[0]
        return image(r, kernel, shape, tile), not _gathered(r) and all(_narrows(g) for g in r.guards)
    rs = [next(r for r in reads if (r.index, r.guards) == key) for key in distinct]
    pieces = _pieces(rs, kernel, tile)
    if pieces is not None:  # (a gathered index counts each point it reads: repeats once each)
        return pieces, not any(_gathered(r) for r in rs)
    # a gathered read is made by every tile along the axes the others vary along and it does not
    # (x + x[i] in tiles along x's axis reads x[i] in each tile; the caller counts re-reads by the
    # other axes)
    together = {a for r in rs for a in r.axes}
    total = sum(image(r, kernel, shape, tile)
                * (_tile_origins(together - set(r.axes), kernel, tile)[0] if _gathered(r) else 1) for r in rs)
    return (total if any(_gathered(r) for r in rs) else min(total, _tile_hulls(rs, kernel, shape, tile))), False


def _tile_hulls(rs: list[Read], kernel: Kernel, shape: tuple[int, ...], tile: dict[str, int]) -> int:
    """Elements of the box around every read's box, tile by tile, summed over tiles: no tile reads
    more of the input than that (a tile of x + transpose(x) reads a row and a column of x, and the
    next tile another row and column: the rows' sum is the input, the columns' too)."""
    spans = [_spans(r, kernel) for r in rs]
    count, origins = _tile_origins([a for r in rs for a in r.axes], kernel, tile)
    if count > TILE_BOXES:
        return count * math.prod(shape)
    total = 0
    for at in origins:
        boxes = []
        for r, span in zip(rs, spans):
            tile_span = _in_tile(span, at, tile)
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
    return min(float(min(strides)), worst)


@dataclass
class _Inputs:
    resident: set[str]
    staged: list[Staged]  # distinct staged regions
    streamed: dict[tuple[str, int], list[Read]]  # (input, nest) -> its reads there


def classify(kernel: Kernel, types, parallel: list[str], target: Target, f: _Facts) -> _Inputs:
    tiled = set(parallel)
    resident, staged, streamed = set(), {}, {}
    packing = _packing_nests(kernel, f)
    for cid, reads in kernel.inputs.items():
        shape = types[cid].shape
        varies = set(a for r in reads for a in r.axes)
        if any(a not in varies for a in parallel) and types[cid].nbytes <= target.resident_bytes:
            resident.add(cid)
            continue
        nests = {_nest(r, packing) for r in reads}
        for r in reads:
            must_stage = len(nests) >= 2 or any(a not in r.axes for a in parallel)
            if must_stage and not r.guards and not any(isinstance(t, Indirect) for ix in r.index for t, _ in ix.terms):
                key = region(r, kernel, tiled, shape)
                staged.setdefault((cid, key), Staged(cid, r.index, key))
            else:
                streamed.setdefault((cid, _nest(r, packing)), []).append(r)
    return _Inputs(resident, list(staged.values()), streamed)


def _packing_nests(kernel: Kernel, f: _Facts) -> dict[object, tuple]:
    """Reads a packed right operand makes in its own nest (the packing loop, before the product),
    by read site (the matmul's read of it) or by reader (the inline values it is computed from)."""
    out: dict[object, tuple] = {}
    for key in f.packs if f.packed_here else ():
        nest = ("pack", key)
        kind, ref = kernel.instances[key].operands[1]
        if kind == "global":
            out[(key, 1)] = nest
        else:
            out.update(dict.fromkeys(kernel.inlined(ref), nest))
    return out


def _nest(r: Read, packing: dict[object, tuple]):
    """The loop nest a read is made in: its owner's, or a packing loop's."""
    return packing.get(r.site, packing.get(r.site[0], r.owner))


# ---------------------------------------------------------------------------
# tiles


def slice_elems(axes, kernel: Kernel, tile: dict[str, int]) -> int:
    n = 1
    for a in axes:
        n *= tile.get(a, kernel.extents[a])
    return n


def footprint(kernel: Kernel, tile: dict[str, int], types, alignment: int, ins: _Inputs, f: _Facts) -> int:
    total = sum(align(types[cid].nbytes, alignment) for cid in ins.resident)
    for s in ins.staged:
        axes = index_axes(s.index)
        total += align(slice_elems(axes, kernel, tile) * dtype_bytes(types[s.cid].dtype), alignment)
    for axes, nbytes in f.buffers:
        total += align(slice_elems(axes, kernel, tile) * nbytes, alignment)
    return total


def divisors(n: int) -> list[int]:
    """Tile sizes along an axis of extent n: its divisors, so every tile is whole."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def count_tiles(kernel: Kernel, tile: dict[str, int]) -> int:
    n = 1
    for a, t in tile.items():
        n *= -(-kernel.extents[a] // t)
    return n


def choose_tile(kernel: Kernel, parallel: list[str], grow: list[str], types, target: Target, ins: _Inputs,
                f: _Facts, fixed: dict[str, int] | None = None) -> tuple[dict[str, int], int]:
    """Grow the tile one axis at a time (in `grow` order) while it fits and leaves enough tiles for
    every core; `fixed` axes (a chunked reduction) keep their size and make no tiles of their own."""
    fixed = fixed or {}
    tile = {a: fixed.get(a, 1) for a in parallel}
    fp = footprint(kernel, tile, types, target.alignment, ins, f)
    if fp > target.onchip_bytes:
        return tile, fp
    want_tiles = target.min_tiles
    columns = _vector_columns(f, target)
    for axis in grow:
        for size in divisors(kernel.extents[axis])[1:]:
            group = columns.get(axis)
            if group is not None and size % target.vector_lanes and size != (group or kernel.extents[axis]):
                continue
            if group and group % size:  # a tile within one group's columns
                continue
            trial = dict(tile, **{axis: size})
            fp_trial = footprint(kernel, trial, types, target.alignment, ins, f)
            spread = count_tiles(kernel, {a: t for a, t in trial.items() if a not in fixed})
            if fp_trial > target.onchip_bytes or spread < want_tiles:
                break
            tile, fp = trial, fp_trial
    return tile, fp


def _vector_columns(f: _Facts, target: Target) -> dict[str, int]:
    """The axes along a matmul's columns on a target without a matrix unit: the product runs in
    vectors of `vector_lanes` columns, and columns left over a whole vector run one at a time, so a
    tile along them is a whole number of vectors (or the whole axis). Each axis maps to 0, or to
    G where the columns are the axis modulo G (a grouped Conv's product: the axis is the output's
    channels, G each group's): a tile then divides G, as a tile across groups reads another row
    of A per group and the micro-kernel does not take it (as 16 or 48 of 48, not 32)."""
    if target.matrix is not None:
        return {}
    out: dict[str, int] = {}
    for inst, _ in f.matmuls:
        for atom, c in (inst.index[-1].terms if inst.index else ()):
            if c == 1 and isinstance(atom, str):
                out.setdefault(atom, 0)
            elif c == 1 and isinstance(atom, Mod) and atom.x.label is not None:
                out[atom.x.label] = atom.d
    return out


def rereads(axes, parallel: list[str], kernel: Kernel, tile: dict[str, int]) -> int:
    """How many times a staged read is made: tiles are visited in `parallel` order (outermost
    first) and a copy stays on chip until an axis it varies along moves on, so only tiled axes it
    does not vary along, outside the innermost one it does, make it read again."""
    have = set(axes)
    inner = max((i for i, a in enumerate(parallel) if a in have), default=0)
    n = 1
    for a in parallel[:inner]:
        if a not in have:
            n *= -(-kernel.extents[a] // tile[a])
    return n


def matrix_dims(inst: Instance) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The axes of a product's rows and of its columns, as the matrix unit runs it: those of its
    output's last two dimensions (the others are its batch). Lowering records them on the
    product's nest, whose accumulator may be laid out otherwise (over the kernel's axes, after a
    reshape), and the simulator counts tiles by them. A vector operand has no such dimension in
    the output (numpy's matmul drops it): a vector times a batch of matrices has rows () and its
    output's last two dimensions are the batch and the columns (hypothesis found the batch taken
    for rows: no tile counted)."""
    axes = [tuple(dict.fromkeys(ix.axes())) for ix in inst.index]
    vector_a, vector_b = (len(ix) == 1 for ix in inst.operand_index[:2])
    if vector_a or vector_b:
        last = axes[-1] if axes else ()
        return (() if vector_a else last), (() if vector_b else last)
    return (axes[-2] if len(axes) >= 2 else ()), (axes[-1] if axes else ())


def tile_work(kernel: Kernel, tile: dict[str, int], target: Target, f: _Facts, types) -> tuple[float, float]:
    """(vector element-cycles, matrix-unit cycles) of one tile."""
    vector = 0.0
    for axes, op, n in f.work:
        vector += slice_elems(axes, kernel, tile) * n * target.cycles_per_element(op)
    matrix = 0.0
    for inst, k in f.matmuls:
        out = slice_elems(inst.axes, kernel, tile)
        if target.matrix is None:
            # columns fewer than a 16-byte vector's run a lane at a time (a product of one column,
            # attention's scores against one key per tile: SegFormer's 0.2 ms estimate took 4.1 ms)
            col_axes = matrix_dims(inst)[1]  # (none: a vector times a matrix, summed along k in vectors)
            cols = slice_elems(col_axes, kernel, tile) if col_axes else target.vector_lanes
            scalar = cols < NARROWEST_VECTOR_BYTES // dtype_bytes(types[inst.cid].dtype)
            vector += out * k / target.fma_per_lane * (target.vector_lanes / cols if scalar else 1)
            continue
        m = target.matrix
        rows, cols = (slice_elems(axes, kernel, tile) for axes in matrix_dims(inst))
        batch = out // max(rows * cols, 1)
        matrix += batch * -(-rows // m.tile_m) * -(-cols // m.tile_n) * -(-k // m.tile_k) * m.cycles_per_tile
    return vector, matrix


def panel_bytes(kernel: Kernel, tile: dict[str, int], target: Target, f: _Facts, types,
                chunk: tuple[str, int] | None) -> float:
    """Bytes one tile's products read again from memory, in the order the vector unit's
    micro-kernel walks a tile (targets/c_matmul.py):

    - A left operand A read with plain loads: panel by panel of MICRO_VECTORS vectors of columns,
      every block of rows reading its panel of B (which stays in the nearest cache) and the tile's
      rows of A (its rows by the k it sums, or by a chunk of it). Rows of A larger than PANEL_SHARE
      of on-chip memory do not stay there from one panel to the next.
    - A computed A (made per block of MICRO_ROWS rows): block by block of rows, each reading the
      tile's whole panel of B (its columns by the k or chunk); a panel larger than PANEL_SHARE of
      on-chip memory does not stay. (A 4103x1536 by 1536x512 product, rows outside, in tiles of 11
      rows by 256 columns read its 1.5 MB panel twice a tile: 73 ms, against 43 in tiles of 373
      rows by 256 columns with k in chunks of 256, whose 256 KB panel stays in the cache.)"""
    if target.matrix is not None:
        return 0.0
    total = 0.0
    share = PANEL_SHARE * target.onchip_bytes
    for inst, k in f.matmuls:
        row_axes, col_axes = matrix_dims(inst)
        rows = slice_elems(row_axes, kernel, tile)
        cols = slice_elems(col_axes, kernel, tile)
        batch = slice_elems(inst.axes, kernel, tile) // max(rows * cols, 1)
        depth = chunk[1] if chunk else k
        chunks = k // depth
        if inst.key in f.plain:
            block = depth * rows * dtype_bytes(types[inst.node.children[0]].dtype)
            if block > share:
                total += batch * -(-cols // (MICRO_VECTORS * target.vector_lanes)) * block * chunks
        else:
            panel = depth * cols * dtype_bytes(types[inst.node.children[1]].dtype)
            if panel > share:
                total += batch * -(-rows // MICRO_ROWS) * panel * chunks
    return total


def plain_left(kernel: Kernel, inst: Instance) -> bool:
    """Whether lowering reads a product's left operand with plain loads at affine indices (a global
    value, through index maps or not, or one held on chip), which the micro-kernel reads where it
    is; else it computes A per block of rows (targets/c_matmul.py's `_computed`)."""
    kind, ref = inst.operands[0]
    if kind == "const":
        return False
    if kind != "inline":
        return kind != "global" or _affine_reads(kernel, [inst.key], 0)
    chain = kernel.inlined(ref)
    if any(kernel.instances[key].node.op not in FREE_OPS for key in chain):
        return False
    return _affine_reads(kernel, chain, None)


def _affine_reads(kernel: Kernel, keys, position: int | None) -> bool:
    """Whether every global read by instances `keys` (at operand `position`, or any) is affine."""
    keys = set(keys)
    return all(affine(ix) for r in kernel.reads if r.site[0] in keys and position in (None, r.site[1])
               for ix in r.index)


# ---------------------------------------------------------------------------
# pricing


def kernel_cost(kernel: Kernel, types, target: Target) -> KernelCost:
    """The kernel priced with its cheapest order of tile loops (see `tile_orders`)."""
    f = facts(kernel, types).on(target)
    parallel = parallel_axes(kernel, f)
    spaces = [parallel]
    whole = [a for a in parallel if kernel.kinds[a] is AxisKind.PARALLEL]
    if whole != parallel:  # splitting a stored reduction across tiles is priced against not splitting it
        spaces.append(whole)
    best = None
    axis = chunk_axis(kernel, f, target)
    chunks = [None] + [(axis, size) for size in chunk_sizes(kernel.extents[axis])] if axis else [None]
    for space in spaces:
        for order, grow in tile_orders(kernel, space, types, target):
            for chunk in chunks:
                kc = _kernel_cost(kernel, order, grow, types, target, f, chunk)
                if best is None or (kc.cycles, kc.bytes_read) < (best.cycles, best.bytes_read):
                    best = kc  # equal time (compute-bound): fewer bytes
    return best


MIN_CHUNK = 128  # the shortest chunk of a reduced axis worth a pass over the accumulators


def chunk_sizes(extent: int) -> list[int]:
    """Chunks a matmul's reduced axis may be walked in: divisors of it from MIN_CHUNK up, below it."""
    return [d for d in divisors(extent) if MIN_CHUNK <= d < extent]


def chunk_axis(kernel: Kernel, f: _Facts, target: Target) -> str:
    """The reduced axis of the kernel's one matmul when a tile may walk it in chunks (as GEMM
    blocks K): the product's operands are then staged a chunk at a time, so the tile's footprint
    no longer holds whole rows and columns of a long reduction and the tile can be wider. Only
    when the operands are global values read through index maps (what a chunk stages), nothing
    else in the kernel reads along that axis, and the product runs on the vector unit ('' otherwise).
    A concat's select counts as an index map here: a conv's windows made of slices, chunked, compute
    each row's A once for all columns (wav2vec2's strided Conv1d: 108 -> 75 ms)."""
    if target.matrix is not None or len(f.matmuls) != 1:
        return ""
    inst, _ = f.matmuls[0]
    summed = reduced_axes(inst)
    if len(summed) != 1 or kernel.extents[summed[0]] < 2 * MIN_CHUNK:
        return ""
    axis = summed[0]
    through = _map_chain(kernel, inst)
    if through is None:
        return ""
    for other in kernel.instances:
        if other.node.op in ("param", "const") or other.key == inst.key or other.key in through:
            continue
        if axis in other.axes or any(axis in index_axes(ix) for ix in other.operand_index):
            return ""
    return axis


def _map_chain(kernel: Kernel, inst: Instance) -> set[int] | None:
    """The index-map instances between a matmul and the global values it reads (a concat's select
    among them), or None when an operand is computed (or held) in the kernel."""
    if any(kind not in ("global", "inline") for kind, _ in inst.operands):
        return None
    chain = {key for kind, ref in inst.operands if kind == "inline" for key in kernel.inlined(ref)}
    for key in chain:
        producer = kernel.instances[key]
        if (producer.node.op not in FREE_OPS + ("concat",)
                or any(kind not in ("global", "inline") for kind, _ in producer.operands)):
            return None
    return chain


def tile_orders(kernel: Kernel, parallel: list[str], types, target: Target) -> list[tuple[list[str], list[str]]]:
    """(loop order, tile growth order) pairs worth pricing, the natural order (grown innermost
    first) first. The others only when the order can change what is read (an input that does not
    vary along every tiled axis is re-read as `rereads` says, e.g. a matmul's operands), and only
    for 2 or 3 tiled axes."""
    default = [(parallel, list(reversed(parallel)))]
    if len(parallel) < 2 or len(parallel) > 3:
        return default
    small = target.resident_bytes
    if all(types[cid].nbytes <= small or all(a in r.axes for a in parallel for r in reads)
           for cid, reads in kernel.inputs.items()):
        return default
    orders = [list(p) for p in itertools.permutations(parallel)]
    return default + [(o, g) for o in orders for g in orders if (o, g) != default[0]]


def _kernel_cost(kernel: Kernel, parallel: list[str], grow: list[str], types, target: Target,
                 f: _Facts, chunk: tuple[str, int] | None = None) -> KernelCost:
    fixed = dict([chunk]) if chunk else {}
    parallel = parallel + list(fixed)  # the chunk loop is innermost
    ins = classify(kernel, types, parallel, target, f)
    tile, fp = choose_tile(kernel, parallel, grow, types, target, ins, f, fixed)
    tiles = count_tiles(kernel, {a: t for a, t in tile.items() if a not in fixed})
    problem = kernel.problem or alias_problem(kernel, f, parallel)
    if not problem and fp > target.onchip_bytes:
        problem = f"its smallest tile needs {fp} bytes on chip but {target.name} has {target.onchip_bytes}"
    reads = 0
    moved = 0.0  # bytes the memory system moves for them (whole lines for strided reads)
    for cid in ins.resident:
        reads += types[cid].nbytes
        moved += types[cid].nbytes
    exact = True
    for s in ins.staged:
        t = types[s.cid]
        r = Read(s.cid, s.index, -1, (-1, -1), s.region[-1])
        n = image(r, kernel, t.shape, tile) * dtype_bytes(t.dtype) * rereads(r.axes, parallel, kernel, tile)
        reads += n
        moved += n * line_factor(s.index, t.dtype)
    for (cid, _), rs in ins.streamed.items():
        t = types[cid]
        elements, sure = nest_image(rs, kernel, t.shape, tile)
        exact = exact and sure
        n = elements * dtype_bytes(t.dtype)
        axes = tuple(dict.fromkeys(a for r in rs for a in r.axes))
        along = {a: -(-kernel.extents[a] // tile[a]) for a in parallel if a in tile}
        own = math.prod(k for a, k in along.items() if a in axes)  # tiles reading disjoint parts
        # a tile's part larger than on-chip memory does not stay there for the next tile: read again
        # by each tile along the axes it does not vary along (wav2vec2's strided conv read its 16.8 MB
        # input once per column tile)
        n *= (math.prod(k for a, k in along.items() if a not in axes) if n > own * target.onchip_bytes
              else rereads(axes, parallel, kernel, tile))
        reads += n
        moved += n * max(line_factor(r.index, t.dtype) for r in rs)
    partial = frozenset(key for key, axes in f.partial_axes.items()
                        if any(a in tile and tile[a] < kernel.extents[a] and a not in kernel.instances[key].axes
                               for a in axes))
    for key in partial:  # a split reduction's combined value is held on chip unless stored as it is combined
        inst = kernel.instances[key]
        if not (key in kernel.stores and inst.hold is Hold.ROOT):
            fp += align(slice_elems(inst.axes, kernel, {}) * dtype_bytes(types[inst.cid].dtype), target.alignment)
    if not problem and fp > target.onchip_bytes:
        problem = f"its smallest tile needs {fp} bytes on chip but {target.name} has {target.onchip_bytes}"
    written = sum(types[cid].nbytes for cid in kernel.roots)
    sync = 0.0
    for key in partial:  # each tile writes its partial; one thread combines them in tile order
        nbytes = slice_elems(kernel.instances[key].axes, kernel, {}) * dtype_bytes(types[kernel.instances[key].cid].dtype)
        split = math.prod(-(-kernel.extents[a] // tile[a]) for a in f.partial_axes[key]
                          if a in tile and a not in kernel.instances[key].axes)
        written += nbytes * split
        reads += nbytes * split
        moved += 2 * nbytes * split
        sync += target.sync_cycles
        inst = kernel.instances[key]
        if key in kernel.stores and inst.hold is Hold.ROOT:
            # combined in its global buffer (lowering's split_across_tiles): set to the identity, then
            # read and written once more by the combining nest, and by a mean's division
            again = 2 if inst.node.op == "mean" else 1
            written += nbytes * again
            reads += nbytes * again
            moved += 2 * nbytes * again
    moved += tiles * panel_bytes(kernel, tile, target, f, types, chunk)
    vec, mat = tile_work(kernel, tile, target, f, types)
    if chunk:  # every chunk loads the tile's accumulators and stores them again
        (inst, _), = f.matmuls
        vec += 2 * slice_elems(inst.axes, kernel, tile) * (kernel.extents[chunk[0]] // chunk[1])
    vec *= tiles
    mat *= tiles
    cores = max(1, min(target.cores, tiles))
    vector_cycles = vec / (target.vector_lanes * cores)
    matrix_cycles = mat / cores
    transfer = (moved + written) / target.global_bandwidth
    compute = vector_cycles + matrix_cycles
    body = max(transfer, compute) if target.overlap_dma else transfer + compute
    cycles = INFEASIBLE if problem else target.launch_cycles + body + sync
    epilogue = frozenset().union(*(f.tails[key] for key in partial)) if partial else frozenset()
    return KernelCost(parallel, tile, tiles, fp, int(reads), int(written), vector_cycles, matrix_cycles, transfer,
                      cycles, problem, frozenset(ins.resident), tuple(ins.staged), partial, epilogue, exact,
                      chunk[0] if chunk else "", frozenset(f.packs) if f.packed_here else frozenset())


def schedule_cost(schedule: Schedule, target: Target, kernel_costs: list[KernelCost] | None = None) -> ScheduleCost:
    """Price every kernel (or take the prices given, one per kernel) and add them up."""
    kcs = kernel_costs if kernel_costs is not None else [kernel_cost(k, schedule.types, target) for k in schedule.kernels]
    problems = [f"kernel {k.root_instance.node.op}: {kc.problem}" for k, kc in zip(schedule.kernels, kcs) if kc.problem]
    cycles = sum(kc.cycles for kc in kcs)
    global_bytes = sum(kc.bytes_read + kc.bytes_written for kc in kcs)
    return ScheduleCost(kcs, cycles, global_bytes, compulsory_bytes(schedule), problems)


def compulsory_bytes(schedule: Schedule) -> int:
    """Bytes every schedule must move: the parameters it reads and the outputs it writes."""
    types: dict[str, TensorType] = schedule.types
    read = set()
    for k in schedule.kernels:
        read.update(c for c in k.inputs if c in schedule.params)
    for o in schedule.outputs:
        if o in schedule.params:
            read.add(o)
    written = {o for o in schedule.outputs if o not in schedule.params}
    return sum(types[c].nbytes for c in read) + sum(types[c].nbytes for c in written)
