"""The price of a kernel's plan: cycles, bytes and on-chip footprint (the model is cost.py's docstring).

    cycles = launch_cycles + transfer (+ or max, with overlap_dma) compute [+ sync]
    transfer = (bytes read + bytes written) / global_bandwidth   (strided reads cost whole lines)
    compute = vector work / (vector_lanes * cores used) + matrix work

Nothing here decides how a kernel runs: a price is computed from a plan (plan.py) and the
kernel's facts (facts.py), and the plan whose price is lowest is kept (cost.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.extent import planned
from ..ir.program import dtype_bytes
from .facts import KernelFacts, alias_problem, matrix_dims
from .kernel import Hold, Kernel, Read
from .machine import MICRO_ROWS, MICRO_VECTORS, NARROWEST_VECTOR_BYTES
from .plan import KernelPlan, count_tiles, plan_footprint, rereads, slice_elems
from .reads import image, line_factor, nest_image
from .target import Target

INFEASIBLE = math.inf
# A product's panel of B (or its rows of A) stays on chip from one block to the next up to this share
# of `onchip_bytes` (the rest holds the other operand's, the accumulators and what else it stages).
PANEL_SHARE = 0.5


@dataclass(frozen=True)
class KernelPrice:
    tiles: int
    footprint: int  # on-chip bytes of one tile
    bytes_read: int
    bytes_written: int
    vector_cycles: float
    matrix_cycles: float
    transfer_cycles: float
    cycles: float
    problem: str = ""
    # bytes_read is what lowering reads, not an upper bound (a gather with repeated indices, or
    # overlapping reads of one input the model does not follow, read at most bytes_read)
    exact: bool = True

    @property
    def feasible(self) -> bool:
        return not self.problem

    def cycles_on(self, plan: KernelPlan, target: Target, threads: int) -> float:
        """The cycles were the kernel's tiles run by `threads` threads, not the target's cores: its
        compute spread over min(threads, tiles) (one, where the plan keeps it on the caller)."""
        if not self.feasible:
            return self.cycles
        priced, running = cores_used(plan, self.tiles, target.cores), cores_used(plan, self.tiles, threads)
        compute = self.vector_cycles + self.matrix_cycles
        scaled = compute * priced / running

        def body(c: float) -> float:
            return max(self.transfer_cycles, c) if target.overlap_dma else self.transfer_cycles + c

        return self.cycles - body(compute) + body(scaled)


def cores_used(plan: KernelPlan, tiles: int, cores: int) -> int:
    """The cores a kernel's tiles keep busy: as many as there are tiles, one where the plan keeps
    them on the calling thread."""
    return max(1, min(cores, tiles)) if plan.threaded else 1


def capacity_problem(needed: int, target: Target) -> str:
    """Why a tile needing `needed` bytes on chip does not run on `target` ('' when it fits)."""
    if needed <= target.onchip_bytes:
        return ""
    return f"its smallest tile needs {needed} bytes on chip but {target.name} has {target.onchip_bytes}"


def price_plan(kernel: Kernel, plan: KernelPlan, types, target: Target, f: KernelFacts) -> KernelPrice:
    parallel = list(plan.parallel)
    tile = plan.tile
    tiles = count_tiles(kernel, plan.spread)
    fp = plan_footprint(kernel, plan, types, target, f)
    problem = kernel.problem or alias_problem(kernel, f, parallel) or capacity_problem(fp, target)
    reads = 0
    moved = 0.0  # bytes the memory system moves for them (whole lines for strided reads)
    for cid in plan.resident:
        reads += types[cid].nbytes
        moved += types[cid].nbytes
    exact = True
    for s in plan.staged:
        t = types[s.cid]
        r = Read(s.cid, s.index, -1, (-1, -1), s.region[-1])
        n = image(r, kernel, t.shape, tile) * dtype_bytes(t.dtype) * rereads(r.axes, parallel, kernel, tile)
        reads += n
        moved += n * line_factor(s.index, t.dtype)
    for (cid, _), rs in plan.streamed:
        t = types[cid]
        elements, sure = nest_image(list(rs), kernel, t.shape, tile)
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
    written = sum(types[cid].nbytes for cid in kernel.roots)
    sync = 0.0
    for key in plan.partial:  # each tile writes its partial; one thread combines them in tile order
        inst = kernel.instances[key]
        nbytes = slice_elems(inst.axes, kernel, {}) * dtype_bytes(types[inst.cid].dtype)
        split = math.prod(-(-kernel.extents[a] // tile[a]) for a in f.partial_axes[key]
                          if a in tile and a not in inst.axes)
        written += nbytes * split
        reads += nbytes * split
        moved += 2 * nbytes * split
        sync += target.sync_cycles
        if key in kernel.stores and inst.hold is Hold.ROOT:
            # combined in its global buffer (lowering's split_across_tiles): set to the identity, then
            # read and written once more by the combining nest, and by a mean's division
            again = 2 if inst.node.op == "mean" else 1
            written += nbytes * again
            reads += nbytes * again
            moved += 2 * nbytes * again
    chunk = plan.chunk
    moved += tiles * panel_bytes(kernel, tile, target, f, types, chunk, plan.left_in_place)
    vec, mat = tile_work(kernel, plan.spread, target, f, types)  # (a tile walks every chunk of a chunked axis)
    if chunk:  # every chunk loads the tile's accumulators and stores them again
        (inst, _), = f.matmuls
        vec += 2 * slice_elems(inst.axes, kernel, tile) * (kernel.extents[chunk[0]] // chunk[1])
    vec *= tiles
    mat *= tiles
    cores = cores_used(plan, tiles, target.cores)
    vector_cycles = vec / (target.vector_lanes * cores)
    matrix_cycles = mat / cores
    transfer = (moved + written) / target.global_bandwidth
    compute = vector_cycles + matrix_cycles
    body = max(transfer, compute) if target.overlap_dma else transfer + compute
    cycles = INFEASIBLE if problem else target.launch_cycles + body + sync
    # a symbolic program's figures are at its planning values (engine/ir/extent.py)
    return KernelPrice(planned(tiles), planned(fp), planned(reads), planned(written), vector_cycles, matrix_cycles, transfer, cycles, problem,
                       exact)


def tile_work(kernel: Kernel, tile: dict[str, int], target: Target, f: KernelFacts, types) -> tuple[float, float]:
    """(vector element-cycles, matrix-unit cycles) of one tile."""
    vector = 0.0
    for axes, op, n in f.work:
        vector += slice_elems(axes, kernel, tile) * n * target.cycles_per_element(op)
    matrix = 0.0
    if target.matrix is None:  # a left operand made across k: an element at a time, its load a cycle
        lanes = target.vector_lanes
        for axes, ops in f.across_k:
            scalar = lanes + (lanes - 1) * sum(target.cycles_per_element(op) for op in ops)  # (beyond `work`'s)
            vector += slice_elems(axes, kernel, tile) * scalar
    for inst, k in f.matmuls:
        out = slice_elems(inst.axes, kernel, tile)
        if target.matrix is None:
            # columns fewer than a 16-byte vector's run a lane at a time (a product of one column,
            # attention's scores against one key per tile: SegFormer's 0.2 ms estimate took 4.1 ms)
            col_axes = matrix_dims(inst)[1]  # (none: a vector times a matrix, summed along k in vectors)
            cols = slice_elems(col_axes, kernel, tile) if col_axes else target.vector_lanes
            scalar = cols < NARROWEST_VECTOR_BYTES // dtype_bytes(types[inst.cid].dtype)
            vector += (out * k / target.fma_per_lane * (target.vector_lanes / cols if scalar else 1)
                       * row_block_fill(inst, kernel, tile))
            continue
        m = target.matrix
        rows, cols = (slice_elems(axes, kernel, tile) for axes in matrix_dims(inst))
        batch = batch_count(out, rows * cols)
        matrix += batch * -(-rows // m.tile_m) * -(-cols // m.tile_n) * -(-k // m.tile_k) * m.cycles_per_tile
    return vector, matrix


def batch_count(elems, matrix):
    """How many matrices of `matrix` elements a product's `elems` output elements hold (a price: at the
    planning values where two symbolic extents do not divide exactly, as when a row index spans a
    column's axis after a reshape: `s27 * 1024` over `s27 * 16384` in a two-symbol attention)."""
    try:
        return elems // max(matrix, 1)
    except TypeError:
        return elems.value // max(matrix.value, 1)


def row_block_fill(inst, kernel: Kernel, tile: dict[str, int]) -> float:
    """How much slower than a full register block a tile's product runs for its rows: the micro-kernel
    blocks the rows it walks innermost (the tile's rows that are consecutive in the output, over the row
    axes from the one of stride 1 outward while each is whole in the tile), MICRO_ROWS at a time, the
    others a batch around it. A tile holding fewer of them than a block, where the kernel has a block's
    worth, leaves the block's FMA chains short (MobileNetV2's 576 -> 96 projection in tiles of [14, 48,
    2] positions ran 2 rows a block at 12.7 GFLOP/s; ResNet-18's 64-channel convs in tiles of 4
    positions at 32-37 against 52-58 in tiles of 784): MICRO_ROWS over the rows, else 1."""
    if len(inst.index) < 2:
        return 1.0
    terms = sorted((c, a) for a, c in inst.index[-2].terms if isinstance(a, str) and c > 0)
    rows, stride, whole = 1, 1, 1
    for c, a in terms:
        if c != stride:
            break
        t = tile.get(a, kernel.extents[a])
        rows, whole = rows * t, whole * kernel.extents[a]
        if t != kernel.extents[a]:
            break
        stride *= kernel.extents[a]
    if not isinstance(rows, int) or rows >= MICRO_ROWS or whole < MICRO_ROWS:
        return 1.0
    return MICRO_ROWS / rows


def panel_bytes(kernel: Kernel, tile: dict[str, int], target: Target, f: KernelFacts, types,
                chunk: tuple[str, int] | None, left_in_place: frozenset | None = None) -> float:
    """Bytes one tile's products read again from memory, in the order the vector unit's
    micro-kernel walks a tile (targets/c/micro_kernel.py), the products whose left operand it reads in
    place as the plan says (`KernelPlan.left_in_place`; by default as the facts imply):

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
        batch = batch_count(slice_elems(inst.axes, kernel, tile), rows * cols)
        depth = chunk[1] if chunk else k
        chunks = k // depth
        if inst.key in (f.plain if left_in_place is None else left_in_place):
            block = depth * rows * dtype_bytes(types[inst.node.children[0]].dtype)
            if block > share:
                total += batch * -(-cols // (MICRO_VECTORS * target.vector_lanes)) * block * chunks
        else:
            panel = depth * cols * dtype_bytes(types[inst.node.children[1]].dtype)
            if panel > share:
                total += batch * -(-rows // MICRO_ROWS) * panel * chunks
    return total
