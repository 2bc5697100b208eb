"""The plan of a kernel: what lowering and every backend follow, decided here and nowhere else.

A plan says how a kernel runs, not what it costs (price.py prices a plan; cost.py keeps the
cheapest):

- Tiled axes and tile sizes: the kernel's parallel axes along which every reduction, matmul and
  stored value inside varies (facts.py), in a loop order (`tile_orders`); a tile grows one axis at
  a time while its on-chip footprint fits `onchip_bytes` and at least `min_tiles` tiles remain
  (`choose_tile`), along a matmul's columns on the vector unit a whole number of vectors.
- Residency and staging: an input that does not vary along every tiled axis and fits the
  target's `resident_bytes` is held whole (*resident*); otherwise a read made in two nests, or not
  varying along every tiled axis, is *staged* (copied on chip per tile, reads of one region
  sharing a copy); the other reads *stream* (`classify`).
- Chunking: a matmul's reduced axis walked in chunks inside each tile (`chunk_axis`), its operands
  staged a chunk at a time.
- Reading in place: on a cache, a staged read whose copy would walk rows of at least the
  target's `inplace_run_bytes` is read where it is (`in_place`): priced as staged (the cache holds
  what the tile reads again), but no copy is made.
- Partial reductions: a stored reduction split across tiles (global stitching), combined after
  the last tile, and the epilogue computed from it then.
- Packing: on the vector unit a matmul's computed or strided right operand is packed per tile.
- Pipelining: on a target that asks (`pipeline_tiles`), a kernel of several tiles (not walking a
  product's chunks) runs them as a two-stage pipeline, one tile's reads beside the previous
  tile's writes (`pipelined`). Lowering applies it where it is legal: the tile's loops have a
  pipeline's stages and two copies of its merged buffers fit (lowering/overlap.py; the merged
  size is known only once lowering has merged them).
- Threads: a kernel of fewer element updates than the target's `parallel_work` runs its tiles
  on the calling thread (`threaded` false, priced on one core): waking the others costs more.
- The micro-kernel's walk: which products read their left operand where it is (machine.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace

from ..ir.extent import is_symbolic
from ..ir.ops import ACCUMULATING
from ..ir.program import INT_DTYPES, dtype_bytes
from .facts import FREE_OPS, KernelFacts, nest_axes, parallel_axes, reduced_axes
from .index import FloorDiv, Ix, Mod, affine, flat_address, indirect
from .kernel import AxisKind, Hold, Instance, Kernel, Read, Ref, RefKind, index_axes
from .reads import region
from .target import Target


@dataclass(frozen=True)
class Staged:
    """A read copied on chip per tile: the input, the index it is copied at, and its region key."""

    cid: str
    index: tuple[Ix, ...]
    region: tuple
    in_place: bool = False  # read where it is, no copy made: rows long enough for a cache (`read_in_place`)


@dataclass(frozen=True)
class KernelPlan:
    parallel: tuple[str, ...]  # tiled axes, outermost first (a chunked axis last)
    tile: dict[str, int]  # tile extent of each tiled axis (not to be changed: the plan is shared)
    resident: frozenset = frozenset()  # inputs held whole for the kernel
    resident_in_place: frozenset = frozenset()  # of them, those read where they are (`read_in_place`)
    staged: tuple[Staged, ...] = ()  # reads copied on chip per tile
    # reads that stream, grouped by input and by the nest making them: ((input, nest), reads)
    streamed: tuple[tuple[tuple[str, object], tuple[Read, ...]], ...] = ()
    partial: frozenset = frozenset()  # reductions split across tiles (instance keys): global stitching
    epilogue: frozenset = frozenset()  # instances computed from them after the last tile
    # a matmul's reduced axis walked in chunks of tile[chunked] inside each tile (the last of
    # `parallel`, a serial loop): its operands are staged one chunk at a time
    chunked: str = ""
    packed: frozenset = frozenset()  # matmuls whose right operand is packed first (`KernelFacts.on`)
    left_in_place: frozenset = frozenset()  # matmuls whose left operand the micro-kernel reads where it is
    pipelined: bool = False  # tiles run as a two-stage pipeline where legal (two copies of a tile's buffers)
    threaded: bool = True  # tiles spread over the cores; False: run on the calling thread (`element_updates`)
    # the kernel's axes split where its indices divide them, in order (split.py): the plan is of that kernel
    splits: tuple[tuple[str, int], ...] = ()

    @property
    def chunk(self) -> tuple[str, int] | None:
        """(the chunked axis, the chunk's length), or None."""
        return (self.chunked, self.tile[self.chunked]) if self.chunked else None

    @property
    def spread(self) -> dict[str, int]:
        """The tile of the axes that make tiles (a chunked axis is walked inside each tile)."""
        return {a: t for a, t in self.tile.items() if a != self.chunked}


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def candidate_plans(kernel: Kernel, types, target: Target, f: KernelFacts) -> Iterator[KernelPlan]:
    """Every plan worth pricing: each tile space (a stored reduction split across tiles, or not),
    each order of tile loops (`tile_orders`) and each chunking of a matmul's reduced axis."""
    parallel = parallel_axes(kernel, f)
    spaces = [parallel]
    whole = [a for a in parallel if kernel.kinds[a] is AxisKind.PARALLEL]
    if whole != parallel:  # splitting a stored reduction across tiles is priced against not splitting it
        spaces.append(whole)
    axis = chunk_axis(kernel, f, target, types)
    chunks = [None] + [(axis, size) for size in chunk_sizes(kernel.extents[axis], read_divisors(kernel, axis))
                       if not (f.paired and size % 2)] if axis else [None]  # (pairs of k whole: facts.py `paired`)
    memo: dict = {}  # (the orders of one tile space share their inputs' classes, and a growth order its tile)
    for space in spaces:
        for order, grow in tile_orders(kernel, space, types, target):
            for chunk in chunks:
                yield plan_kernel(kernel, order, grow, types, target, f, chunk, memo)


def plan_kernel(kernel: Kernel, order: list[str], grow: list[str], types, target: Target, f: KernelFacts,
                chunk: tuple[str, int] | None = None, memo: dict | None = None) -> KernelPlan:
    """The plan with tile loops in `order`, the tile grown in `grow` order, and `chunk`. `memo` keeps, for
    the plans of one kernel, what depends on the tiled axes but not on their order: the inputs' classes
    (`classify`) and each growth order's tile (`choose_tile`; a kernel of three tiled axes prices 37
    orders, which grow 6 tiles)."""
    fixed = dict([chunk]) if chunk else {}
    parallel = order + list(fixed)  # the chunk loop is innermost
    memo = {} if memo is None else memo
    space = (frozenset(parallel), chunk)
    ins = memo.get(space)
    if ins is None:
        ins = memo[space] = classify(kernel, types, parallel, target, f, chunk[0] if chunk else "")
    grown = memo.get((space, tuple(grow)))
    if grown is None:
        grown = memo[(space, tuple(grow))] = choose_tile(kernel, parallel, grow, types, target, ins, f, fixed)[0]
    tile = {a: grown[a] for a in parallel}  # (in loop order, as choose_tile makes it)
    partial = frozenset(key for key, axes in f.partial_axes.items()
                        if any(a in tile and tile[a] < kernel.extents[a] and a not in kernel.instances[key].axes
                               for a in axes))
    epilogue = frozenset().union(*(f.tails[key] for key in partial)) if partial else frozenset()
    staged = tuple(replace(s, in_place=True) if read_in_place(s.cid, s.index, kernel, tile, types, target) else s
                   for s in ins.staged)
    whole = frozenset(cid for cid in ins.resident
                      if types[cid].shape and _long_run(types[cid].shape[-1], types[cid].dtype, target))
    plan = KernelPlan(tuple(parallel), tile, frozenset(ins.resident), whole, staged,
                      tuple((key, tuple(rs)) for key, rs in ins.streamed.items()), partial, epilogue,
                      chunk[0] if chunk else "", frozenset(f.packs) if f.packed_here else frozenset(), f.plain)
    # (tiles along a symbolic axis are not pipelined: their remainder tile is a loop of its own,
    # outside a pipeline's stages, lowering/remainder.py)
    symbolic_tiles = any(is_symbolic(kernel.extents[a]) and t < kernel.extents[a] for a, t in tile.items())
    if target.pipeline_tiles and count_tiles(kernel, plan.spread) > 1 and not chunk and not symbolic_tiles:
        plan = replace(plan, pipelined=True)
    if target.parallel_work and element_updates(kernel, plan, types) < target.parallel_work:
        plan = replace(plan, threaded=False)
    return plan


def element_updates(kernel: Kernel, plan: KernelPlan, types) -> int:
    """The element updates a kernel's loops make, what `parallel_work` is measured in: each value's
    nest (a reduction's and a product's reduced axes inside) once per point, an accumulator's start
    once per element, and each staged copy made (per tile it is made in). Each value counts once,
    whether held or computed inline (as many times as it is used): holding a value must not move a
    kernel across `parallel_work`, or the search would hold one to buy the price of two cores."""
    n = 0
    for inst in kernel.instances:
        op = inst.node.op
        if op in ("param", "const") or op in FREE_OPS:
            continue
        n += slice_elems(nest_axes(inst), kernel, {})
        if op in ACCUMULATING:
            n += slice_elems(inst.axes, kernel, {})
    tiles = count_tiles(kernel, plan.spread)
    for s in plan.staged:
        if not s.in_place:
            n += slice_elems(index_axes(s.index), kernel, plan.tile) * tiles
    return n


def plan_footprint(kernel: Kernel, plan: KernelPlan, types, target: Target, f: KernelFacts) -> int:
    """On-chip bytes of one tile of the plan: what its tile was sized by, and each split
    reduction's combined value, held on chip unless stored as it is combined."""
    ins = Inputs(set(plan.resident), list(plan.staged), {})
    total = footprint(kernel, plan.tile, types, target.alignment, ins, f)
    for key in plan.partial:
        inst = kernel.instances[key]
        if not (key in kernel.stores and inst.hold is Hold.ROOT):
            total += align(slice_elems(inst.axes, kernel, {}) * dtype_bytes(types[inst.cid].dtype), target.alignment)
    return total


# ---------------------------------------------------------------------------
# residency and staging


@dataclass
class Inputs:
    resident: set[str]
    staged: list[Staged]  # distinct staged regions
    streamed: dict[tuple[str, int], list[Read]]  # (input, nest) -> its reads there


def classify(kernel: Kernel, types, parallel: list[str], target: Target, f: KernelFacts, chunk: str = "") -> Inputs:
    """Each input resident, staged or streamed (the module's docstring). A read is made again along a
    tiled axis it does not vary with, so it is staged; but the chunk loop (`chunk`, a product's k walked
    inside the tile) runs only around the product's nest: a read of the nest after it (a conv's residual
    added once the sums are done) is made once per tile, and streams."""
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
            again = [a for a in parallel if a != chunk or chunk in nest_axes(kernel.instances[r.owner])]
            must_stage = len(nests) >= 2 or any(a not in r.axes for a in again)
            if must_stage and not r.guards and not any(map(indirect, r.index)):
                key = region(r, kernel, tiled, shape)
                staged.setdefault((cid, key), Staged(cid, r.index, key))
            else:
                streamed.setdefault((cid, _nest(r, packing)), []).append(r)
    return Inputs(resident, list(staged.values()), streamed)


def _packing_nests(kernel: Kernel, f: KernelFacts) -> dict[object, tuple]:
    """Reads a packed right operand makes in its own nest (the packing loop, before the product),
    by read site (the matmul's read of it) or by reader (the inline values it is computed from)."""
    out: dict[object, tuple] = {}
    for key in f.packs if f.packed_here else ():
        nest = ("pack", key)
        right = kernel.instances[key].operands[1]
        if right.kind is RefKind.GLOBAL:
            out[(key, 1)] = nest
        else:
            out.update(dict.fromkeys(kernel.inlined(right.key), nest))
    return out


def _nest(r: Read, packing: dict[object, tuple]):
    """The loop nest a read is made in: its owner's, or a packing loop's."""
    return packing.get(r.site, packing.get(r.site[0], r.owner))


def read_in_place(cid: str, index: tuple[Ix, ...], kernel: Kernel, tile: dict[str, int], types,
                  target: Target) -> bool:
    """Whether a staged read of `cid` at `index` is read where it is (a resident input: where its
    rows are that long): on a cache target (`inplace_run_bytes`), a copy
    pays only where the region's rows are short and far apart (a tile's 144 columns of a weight's
    rows, each its own stream, gathered into one block); where they are long (a product's left
    operand, 128 rows of 512 elements per chunk) the cache keeps what the tile reads again by
    itself and the copy is a pass that buys nothing. A row is the contiguous run the copy's
    innermost loops walk: its last axis at unit stride in the last dimension and in no other, and
    each loop outside it whose step is the run so far (a group norm's group, [C/G, H, W] of one
    sample's channels: 16 KiB consecutive, though W is 32 elements)."""
    axes = index_axes(index)
    if not target.inplace_run_bytes or not axes or not all(affine(ix) for ix in index):
        return False  # (no axes: one element, read at a constant index)
    inner = axes[-1]
    if index[-1].coef(inner) != 1 or any(inner in index_axes((ix,)) for ix in index[:-1]):
        return False
    return _long_run(_contiguous_run(index, axes, types[cid].shape, kernel, tile), types[cid].dtype, target)


def _contiguous_run(index: tuple[Ix, ...], axes: tuple[str, ...], shape, kernel: Kernel, tile: dict[str, int]):
    """The elements a copy at `index` walks consecutively: its loops from the innermost out, while
    each one's step in the buffer (`flat_address`) is the run its inner loops made (a symbolic
    extent or stride ends the run there)."""
    flat = flat_address(index, shape)
    run = 1
    for a in reversed(axes):
        n = tile.get(a, kernel.extents[a])
        step = flat.coef(a)
        if is_symbolic(step) or step != run:
            break
        run = run * n
        if is_symbolic(n):
            break
    return run


def _long_run(elements: int, dtype: str, target: Target) -> bool:
    """Whether a contiguous run of `elements` is long enough to read in place (`inplace_run_bytes`; 0: never)."""
    return bool(target.inplace_run_bytes) and elements * dtype_bytes(dtype) >= target.inplace_run_bytes


# ---------------------------------------------------------------------------
# tiles


def slice_elems(axes, kernel: Kernel, tile: dict[str, int]) -> int:
    n = 1
    for a in axes:
        n *= tile.get(a, kernel.extents[a])
    return n


def footprint(kernel: Kernel, tile: dict[str, int], types, alignment: int, ins: Inputs, f: KernelFacts) -> int:
    return footprint_of(footprint_parts(types, alignment, ins, f), kernel, tile, alignment)


def footprint_parts(types, alignment: int, ins: Inputs, f: KernelFacts) -> tuple[int, list[tuple[tuple, int]]]:
    """What a tile's footprint is made of, whatever the tile: the resident inputs' aligned bytes, and
    (axes, bytes per element) of each staged read and on-chip buffer (`choose_tile` sizes many tiles
    of one plan from them)."""
    resident = sum(align(types[cid].nbytes, alignment) for cid in ins.resident)
    per_tile = [(index_axes(s.index), dtype_bytes(types[s.cid].dtype)) for s in ins.staged]
    return resident, per_tile + list(f.buffers)


def footprint_of(parts: tuple[int, list[tuple[tuple, int]]], kernel: Kernel, tile: dict[str, int],
                 alignment: int) -> int:
    """`footprint` of a tile from its plan's `footprint_parts`."""
    total, per_tile = parts
    for axes, nbytes in per_tile:
        total += align(slice_elems(axes, kernel, tile) * nbytes, alignment)
    return total


def divisors(n: int) -> list[int]:
    """Tile sizes along an axis of extent n: its divisors, so every tile is whole. Along a symbolic
    axis (an Extent), powers of two up to its planning value: its last tile is a remainder, which
    lowering runs after the whole ones (lowering/remainder.py)."""
    if is_symbolic(n):  # (and the whole axis, which a tile of its planning value would not be)
        return [1 << k for k in range(n.value.bit_length()) if 1 << k < n.value] + [n]
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def count_tiles(kernel: Kernel, tile: dict[str, int]) -> int:
    n = 1
    for a, t in tile.items():
        n *= -(-kernel.extents[a] // t)
    return n


def choose_tile(kernel: Kernel, parallel: list[str], grow: list[str], types, target: Target, ins: Inputs,
                f: KernelFacts, fixed: dict[str, int] | None = None) -> tuple[dict[str, int], int]:
    """Grow the tile one axis at a time (in `grow` order) while it fits and leaves enough tiles for
    every core; `fixed` axes (a chunked reduction) keep their size and make no tiles of their own."""
    fixed = fixed or {}
    tile = {a: fixed.get(a, 1) for a in parallel}
    parts = footprint_parts(types, target.alignment, ins, f)
    fp = footprint_of(parts, kernel, tile, target.alignment)
    if fp > target.onchip_bytes:
        return tile, fp
    want_tiles = target.min_tiles
    columns = _vector_columns(f, target)
    panels = dict(f.paired.values())  # (whole panels of a weight laid out in pairs: facts.py `paired`)
    for axis in grow:
        for size in divisors(kernel.extents[axis])[1:]:
            group = columns.get(axis)
            if group is not None and size % target.vector_lanes and size != (group or kernel.extents[axis]):
                continue
            if group and group % size:  # a tile within one group's columns
                continue
            if size % panels.get(axis, 1):
                continue
            trial = dict(tile, **{axis: size})
            fp_trial = footprint_of(parts, kernel, trial, target.alignment)
            spread = count_tiles(kernel, {a: t for a, t in trial.items() if a not in fixed})
            if fp_trial > target.onchip_bytes or spread < want_tiles:
                break
            tile, fp = trial, fp_trial
    return tile, fp


def _vector_columns(f: KernelFacts, target: Target) -> dict[str, int]:
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


# ---------------------------------------------------------------------------
# chunks and loop orders


MIN_CHUNK = 128  # the shortest chunk of a reduced axis worth a pass over the accumulators


def chunk_sizes(extent: int, read_by: tuple[int, ...] = ()) -> list[int]:
    """Chunks a matmul's reduced axis may be walked in: divisors of it from MIN_CHUNK up, below it; only
    those that keep whole the runs the reads divide it by (`read_by`: `read_divisors`), where any does.
    A chunk is then a run of whole runs (or lies in one): a conv's k over (row tap, column tap, channel)
    chunked at 192 of 576 reads each chunk's rows at one row tap, affine in the chunk; chunked at 288,
    half a row tap's, so every element's index divides k by 192 (ResNet-18's 3x3 convs read their padded
    input so: 4.3-4.7 ms against 3.2-3.8 at 192)."""
    sizes = [d for d in divisors(extent) if MIN_CHUNK <= d < extent]
    whole = [c for c in sizes if all(c % d == 0 or d % c == 0 for d in read_by)]
    return whole or sizes


def read_divisors(kernel: Kernel, axis: str) -> tuple[int, ...]:
    """What the kernel's global reads divide `axis` by (`axis // d` in an index). Not a concat's pieces
    (its guards, and the offset within a piece): the C backend cuts a chunk at their boundaries
    (targets/c/a_pieces.py), so a chunk across them costs nothing an element (the U-Net conv block's
    convs, a concat per tap over a channels-first input, run fastest at 192 of 1152, 1.5 taps' channels:
    kept to 128 or 384, the block took 12.1-14.6 ms against 9.5-11.8)."""
    bare = Ix.var(axis)
    return tuple(sorted({t.d for read in kernel.reads for ix in read.index for t, _ in ix.terms
                         if isinstance(t, FloorDiv) and t.x == bare}))


def chunk_axis(kernel: Kernel, f: KernelFacts, target: Target, types) -> str:
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
    through = _map_chain(kernel, inst, types)
    if through is None:
        return ""
    for other in kernel.instances:
        if other.node.op in ("param", "const") or other.key == inst.key or other.key in through:
            continue
        if axis in other.axes or any(axis in index_axes(ix) for ix in other.operand_index):
            return ""
    return axis


def _map_chain(kernel: Kernel, inst: Instance, types) -> set[int] | None:
    """The index-map instances between a matmul and the global values it reads (a concat's select, a
    cast and an integer zero point among them: `_reads_one_element`), or None when an operand is
    computed (or held) in the kernel."""
    if not all(_read_or_inline(ref) for ref in inst.operands):
        return None
    chain = {key for ref in inst.operands if ref.inline for key in kernel.inlined(ref.key)}
    if not all(_reads_one_element(kernel.instances[key], types) for key in chain):
        return None
    return chain


def _reads_one_element(producer: Instance, types) -> bool:
    """Whether `producer` reads one element of one value where it is, as an index map does: a map, a
    concat's select, a cast, or an integer add or sub of a literal. MatMulInteger's byte weight widened
    to i32 (less its literal zero point, for a u8 weight) is then staged a chunk of k at a time as its
    bytes; else the fused widening's pack held all of k, its tile shrank, and the search wrote the
    weight's i32 copy in a kernel of its own on every call (4x its bytes)."""
    op = producer.node.op
    if op in FREE_OPS + ("concat", "cast"):
        return all(_read_or_inline(ref) for ref in producer.operands)
    return (op in ("add", "sub") and types[producer.cid].dtype in INT_DTYPES
            and sum(_read_or_inline(ref) for ref in producer.operands) == 1
            and all(_read_or_inline(ref) or ref.kind is RefKind.CONST for ref in producer.operands))


def _read_or_inline(ref: Ref) -> bool:
    return ref.kind is RefKind.GLOBAL or ref.inline


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
