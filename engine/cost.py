"""The cost model: a Schedule priced on a Target, reading only the target's numbers.

Per kernel:

    cycles = launch_cycles + transfer (+ or max, with overlap_dma) compute
    transfer = (bytes read + bytes written) / global_bandwidth
    compute = vector work / (vector_lanes * cores used) + matrix work

- Tile space: the kernel parallelizes over the root's output axes along which
  every reduction and matmul inside it varies (and which a reshape inside it
  keeps as a common prefix) (AStitch's rule: a tile holds the
  reduced axes whole, so no reduction is split or recomputed across tiles).
- Tile size: a divisor of each tiled extent (tiles are whole), grown along those
  axes, innermost first, while the tile's on-chip
  footprint (global inputs read more than once, which are staged; shared and
  local values; the accumulator of a reduction or matmul output; each aligned;
  an input read once and an elementwise output stream through) fits `onchip_bytes` and at least 2 x cores tiles remain. A kernel
  whose smallest tile does not fit is infeasible.
- Bytes: an input that does not vary along every tiled axis and takes at most
  an eighth of the on-chip buffer (a bias, a norm's weight) is held whole for
  the kernel and read once. Otherwise tiles are visited in order (outermost
  tiled axis first) and an input's slice stays on chip until an axis it varies
  along moves on, so a matmul's right operand is read again for each tile of
  rows (`rereads`). Where that order matters, every order of the tiled axes is
  priced and the cheapest kept (`tile_orders`). The output is written once.
  Lowering reads and writes exactly these bytes, in that order.
- Work: each instance computes its slice per tile; inline values are recomputed
  per use, so recomputation is priced.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from ..targets.target import Target
from .ir import dtype_bytes
from .schedule import Kernel, Label, Schedule

INFEASIBLE = math.inf


@dataclass
class KernelCost:
    parallel: list[str]  # tiled root axes ("p0", ...)
    tile: dict[str, int]  # tile extent of each parallel axis
    tiles: int
    footprint: int  # on-chip bytes of one tile
    bytes_read: int
    bytes_written: int
    vector_cycles: float
    matrix_cycles: float
    transfer_cycles: float
    cycles: float
    problem: str = ""

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


def parallel_axes(kernel: Kernel) -> list[str]:
    root = kernel.root_instance
    axes = [lab for lab in root.labels if lab is not None]
    for allowed in kernel.restrict:
        axes = [a for a in axes if a in allowed]
    return [a for a in axes if kernel.extents[a] > 1]


def slice_elems(labels: tuple[Label, ...], kernel: Kernel, tile: dict[str, int]) -> int:
    n = 1
    for lab in labels:
        if lab is not None:
            n *= tile.get(lab, kernel.extents[lab])
    return n


def resident_inputs(kernel: Kernel, parallel: list[str], types, target: Target) -> set[str]:
    """Small inputs that do not vary along every tiled axis: held on chip for the whole kernel, read once."""
    out = set()
    for cid, labels in kernel.inputs.items():
        if any(a not in labels for a in parallel) and types[cid].nbytes <= target.onchip_bytes // 8:
            out.add(cid)
    return out


def staged(kernel: Kernel, cid: str, labels, parallel: list[str]) -> bool:
    """A global input copied on chip: read more than once, or kept while tiles it does not vary along pass."""
    return kernel.input_uses.get(cid, 0) >= 2 or any(a not in labels for a in parallel)


def footprint_terms(kernel: Kernel, types, resident: set[str],
                    parallel: list[str]) -> tuple[list[int], list[tuple[tuple, int]]]:
    """The tile's on-chip buffers: (sizes of the buffers held whatever the tile, [(axis map, bytes per element)])."""
    fixed = [types[cid].nbytes for cid in resident]
    terms = [
        (labels, dtype_bytes(types[cid].dtype))
        for cid, labels in kernel.inputs.items()
        if cid not in resident and staged(kernel, cid, labels, parallel)  # others stream through
    ]
    return fixed, terms + kernel.buffers


def footprint(kernel: Kernel, tile: dict[str, int], types, alignment: int, resident: set[str] = frozenset(),
              terms=None) -> int:
    fixed, terms = terms or footprint_terms(kernel, types, resident, list(tile))
    total = sum(align(n, alignment) for n in fixed)  # each its own buffer, aligned as the merge places it
    extents = kernel.extents
    for labels, nbytes in terms:
        n = nbytes
        for lab in labels:
            if lab is not None:
                n *= tile.get(lab) or extents[lab]
        total += (n + alignment - 1) // alignment * alignment
    return total


def choose_tile(kernel: Kernel, parallel: list[str], types, target: Target,
                resident: set[str] = frozenset(), grow: list[str] | None = None) -> tuple[dict[str, int], int]:
    """Grow the tile one axis at a time (`grow`, default innermost first) while it fits and leaves
    enough tiles for every core."""
    terms = footprint_terms(kernel, types, resident, parallel)
    tile = {a: 1 for a in parallel}
    fp = footprint(kernel, tile, types, target.alignment, resident, terms)
    if fp > target.onchip_bytes:
        return tile, fp
    want_tiles = 2 * target.cores
    for axis in grow or reversed(parallel):
        for size in divisors(kernel.extents[axis])[1:]:
            trial = dict(tile, **{axis: size})
            fp_trial = footprint(kernel, trial, types, target.alignment, resident, terms)
            if fp_trial > target.onchip_bytes or count_tiles(kernel, trial) < want_tiles:
                break
            tile, fp = trial, fp_trial
    return tile, fp


def divisors(n: int) -> list[int]:
    """Tile sizes along an axis of extent n: its divisors, so every tile is whole."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def count_tiles(kernel: Kernel, tile: dict[str, int]) -> int:
    n = 1
    for a, t in tile.items():
        n *= -(-kernel.extents[a] // t)
    return n


def rereads(labels: tuple[Label, ...], parallel: list[str], kernel: Kernel, tile: dict[str, int]) -> int:
    """How many times an input is read: tiles are visited in `parallel` order (outermost first) and an
    input's slice stays on chip until an axis it varies along moves on, so only tiled axes it does not
    vary along, outside the innermost one it does, make it read again."""
    have = set(labels)
    inner = max((i for i, a in enumerate(parallel) if a in have), default=0)
    n = 1
    for a in parallel[:inner]:
        if a not in have:
            n *= -(-kernel.extents[a] // tile[a])
    return n


def tile_work(kernel: Kernel, tile: dict[str, int], target: Target) -> tuple[float, float]:
    """(vector element-cycles, matrix-unit cycles) of one tile."""
    vector = 0.0
    for labels, ops in kernel.work.items():
        per_elem = sum(n * target.cycles_per_element(op) for op, n in ops.items())
        vector += slice_elems(labels, kernel, tile) * per_elem
    matrix = 0.0
    for labels, k in kernel.matmuls:
        out = slice_elems(labels, kernel, tile)
        if target.matrix is None:
            vector += out * k / target.fma_per_lane
            continue
        m = target.matrix
        rows = _tile_extent(labels, -2, kernel, tile) if len(labels) >= 2 else 1
        cols = _tile_extent(labels, -1, kernel, tile) if labels else 1
        batch = out // max(rows * cols, 1)
        matrix += batch * -(-rows // m.tile_m) * -(-cols // m.tile_n) * -(-k // m.tile_k) * m.cycles_per_tile
    return vector, matrix


def _tile_extent(labels, index, kernel, tile) -> int:
    lab = labels[index]
    return 1 if lab is None else tile.get(lab, kernel.extents[lab])


def indexing_problem(kernel: Kernel, parallel: list[str]) -> str:
    """A value held for the tile must be read along the same tiled axes it was computed along;
    untiled axes are whole in the buffer, so any axis map of the same extent reads them."""
    tiled = set(parallel)
    for op, own, other in kernel.indexings:
        for a, b in zip(own, other):
            if a == b:
                continue
            if a in tiled or b in tiled or (a is None) != (b is None) or kernel.extents.get(a) != kernel.extents.get(b):
                return f"held value {op} is read with two different indexings"
    return ""


def kernel_cost(kernel: Kernel, types, target: Target) -> KernelCost:
    """The kernel priced with its cheapest order of tile loops (see `tile_orders`)."""
    parallel = parallel_axes(kernel)
    resident = resident_inputs(kernel, parallel, types, target)
    best = None
    for order, grow in tile_orders(kernel, parallel, resident):
        kc = _kernel_cost(kernel, order, grow, resident, types, target)
        if best is None or (kc.cycles, kc.bytes_read) < (best.cycles, best.bytes_read):
            best = kc  # equal time (compute-bound): fewer bytes
    return best


def tile_orders(kernel: Kernel, parallel: list[str], resident: set[str]) -> list[tuple[list[str], list[str]]]:
    """(loop order, tile growth order) pairs worth pricing, the root's axis order (grown innermost
    first) first. The others only when the order can change what is read (an input that does not
    vary along every tiled axis is re-read as `rereads` says, e.g. a matmul's operands), and only
    for 2 or 3 tiled axes."""
    default = [(parallel, list(reversed(parallel)))]
    if len(parallel) < 2 or len(parallel) > 3:
        return default
    if all(cid in resident or all(a in labels for a in parallel) for cid, labels in kernel.inputs.items()):
        return default
    orders = [list(p) for p in itertools.permutations(parallel)]
    return default + [(o, g) for o in orders for g in orders if (o, g) != default[0]]


def _kernel_cost(kernel: Kernel, parallel: list[str], grow: list[str], resident: set[str], types,
                 target: Target) -> KernelCost:
    tile, fp = choose_tile(kernel, parallel, types, target, resident, grow)
    tiles = count_tiles(kernel, tile)
    problem = kernel.problem or indexing_problem(kernel, parallel)
    if not problem and fp > target.onchip_bytes:
        problem = (f"its smallest tile needs {fp} bytes on chip but {target.name} has {target.onchip_bytes}")
    reads = 0
    for cid, labels in kernel.inputs.items():
        nbytes = types[cid].nbytes
        reads += nbytes if cid in resident or not parallel else nbytes * rereads(labels, parallel, kernel, tile)
    written = types[kernel.root].nbytes
    vec, mat = tile_work(kernel, tile, target)
    vec *= tiles
    mat *= tiles
    cores = max(1, min(target.cores, tiles))
    vector_cycles = vec / (target.vector_lanes * cores)
    matrix_cycles = mat / cores
    transfer = (reads + written) / target.global_bandwidth
    compute = vector_cycles + matrix_cycles
    body = max(transfer, compute) if target.overlap_dma else transfer + compute
    cycles = INFEASIBLE if problem else target.launch_cycles + body
    return KernelCost(parallel, tile, tiles, fp, reads, written, vector_cycles, matrix_cycles, transfer, cycles,
                      problem)


def schedule_cost(schedule: Schedule, target: Target, kernel_costs: list[KernelCost] | None = None) -> ScheduleCost:
    """Price every kernel (or take the prices given, one per kernel) and add them up."""
    kcs = kernel_costs if kernel_costs is not None else [kernel_cost(k, schedule.types, target) for k in schedule.kernels]
    problems = [f"kernel {k.root_instance.node.op}: {kc.problem}" for k, kc in zip(schedule.kernels, kcs) if kc.problem]
    cycles = sum(kc.cycles for kc in kcs)
    global_bytes = sum(kc.bytes_read + kc.bytes_written for kc in kcs)
    return ScheduleCost(kcs, cycles, global_bytes, compulsory_bytes(schedule), problems)


def compulsory_bytes(schedule: Schedule) -> int:
    """Bytes every schedule must move: the parameters it reads and the outputs it writes."""
    types = schedule.types
    read = set()
    for k in schedule.kernels:
        read.update(c for c in k.inputs if c in schedule.params)
    for o in schedule.outputs:
        if o in schedule.params:
            read.add(o)
    written = {o for o in schedule.outputs if o not in schedule.params}
    return sum(types[c].nbytes for c in read) + sum(types[c].nbytes for c in written)
