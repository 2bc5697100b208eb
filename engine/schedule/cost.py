"""The cost model: a Schedule priced on a Target, reading only the target's numbers.

Per kernel it decides the *plan* lowering and the backends follow (plan.py: tiled axes, tile
sizes, which inputs are held whole, which reads are staged on chip, which stored reductions
finish across tiles, chunking, packing) and prices it (price.py), keeping the cheapest plan.
What a kernel's contents imply is facts.py; the geometry of its reads, reads.py; the shape of
the C micro-kernel both sides assume, machine.py.

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
  packed right operand (`kernel.packed_operand`), each aligned. A kernel whose
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

import math
from dataclasses import dataclass, field, replace

from ..ir.extent import is_symbolic, planned
from ..ir.program import TensorType
from .facts import KernelFacts, facts, paired
from .kernel import Kernel, Schedule
from .plan import KernelPlan, candidate_plans
from .price import KernelPrice, price_plan, tile_work
from .split import axis_splits, split_axes
from .target import Target


@dataclass(frozen=True)
class KernelCost:
    """A kernel's plan (what lowering follows) and its price (what the search compares)."""

    plan: KernelPlan
    price: KernelPrice


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

    @property
    def plans(self) -> list[KernelPlan]:
        return [kc.plan for kc in self.kernels]


def kernel_variants(kernel: Kernel, types, target: Target,
                    bound: frozenset = frozenset()) -> list[tuple[tuple, Kernel, KernelFacts]]:
    """What `kernel_cost` prices and `kernel_bound` bounds: the kernel as formed and the kernel with its
    axes split where its indices divide them (split.py: a group's statistics made once per group, not
    once per channel), each as (the splits, the kernel, its facts on `target`, given the `bound`
    parameters' e-classes: facts.py `paired`)."""
    splits = axis_splits(kernel)
    out = []
    for split in ((), splits) if splits else ((),):
        k = split_axes(kernel, split)
        f = facts(k, types)
        out.append((split, k, f.on(target, paired(k, f, types, target, bound))))
    return out


def kernel_cost(kernel: Kernel, types, target: Target, variants: list | None = None,
                bound: frozenset = frozenset()) -> KernelCost:
    """The kernel's cheapest plan (every tile space, order of tile loops and chunking: `candidate_plans`)
    of each of its `kernel_variants` (given where the caller made them already), `bound` naming the
    e-classes of the parameters bound at build time (weights)."""
    best = None
    for split, k, f in variants or kernel_variants(kernel, types, target, bound):
        for plan in candidate_plans(k, types, target, f):
            plan = replace(plan, splits=split) if split else plan
            price = price_plan(k, plan, types, target, f)
            if best is None or (price.cycles, price.bytes_read) < (best.price.cycles, best.price.bytes_read):
                best = KernelCost(plan, price)  # equal time (compute-bound): fewer bytes
    return best


def kernel_bound(kernel: Kernel, types, target: Target, bound: frozenset = frozenset()) -> tuple[float, list]:
    """A lower bound on `kernel_cost(kernel).price.cycles`, for about what facts.py costs (a fraction
    of pricing the kernel's plans): the launch, the outputs written once, and the work of the whole
    kernel spread over every core. Every plan pays at least that (price.py `price_plan`): its tiles
    together do at least the whole kernel's work (a tile's slice is rounded up, a product's columns
    priced a lane at a time in a tile whenever they are in the whole), on at most `cores` cores; it
    writes each output once at least, and reads, re-reads and syncs on top. Infinite for a kernel
    formed with a problem (every plan of it is infeasible); 0 for a symbolic one (not bounded).
    With the `kernel_variants` it made (for `kernel_cost`, should the kernel be priced after all)."""
    if kernel.problem:
        return math.inf, []
    if any(is_symbolic(e) for e in kernel.extents.values()):
        return 0.0, []
    written = sum(types[cid].nbytes for cid in kernel.roots) / target.global_bandwidth
    best = math.inf
    variants = kernel_variants(kernel, types, target, bound)
    for _, k, f in variants:  # (the least of them)
        vector, matrix = tile_work(k, {}, target, f, types)  # (one tile: the whole kernel)
        compute = vector / (target.vector_lanes * target.cores) + matrix / target.cores
        body = max(written, compute) if target.overlap_dma else written + compute
        best = min(best, target.launch_cycles + body)
    return best, variants


def schedule_cost(schedule: Schedule, target: Target, kernel_costs: list[KernelCost] | None = None) -> ScheduleCost:
    """Price every kernel (or take the prices given, one per kernel) and add them up."""
    kcs = kernel_costs
    if kcs is None:
        kcs = [kernel_cost(k, schedule.types, target) for k in schedule.kernels]
    problems = [f"in the kernel ending in {k.root_instance.node.op}, {kc.price.problem}"
                for k, kc in zip(schedule.kernels, kcs) if kc.price.problem]
    cycles = sum(kc.price.cycles for kc in kcs)
    global_bytes = sum(kc.price.bytes_read + kc.price.bytes_written for kc in kcs)
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
    # (a symbolic program's at its planning values, as every figure of the cost model)
    return planned(sum(types[c].nbytes for c in read) + sum(types[c].nbytes for c in written))
