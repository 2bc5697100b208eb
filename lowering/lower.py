"""Schedule -> LoopProgram: each kernel becomes tile loops around per-value loop nests.

The cost model's plan (`KernelPlan`: tiled axes, tile sizes, inputs held
whole, staged reads, partial reductions) is followed, not re-decided. For a
kernel tiled over axes P (outermost first) with tile sizes t:

    <inputs held whole: copied once>
    for p0o in 0..E0/t0 parallel {          # one loop per tiled axis (none for one tile)
      <staged reads that vary along p0 only: copied once per p0 tile>
      for p1o in 0..E1/t1 parallel { ... per-tile body ... } }
    <partials of reductions split across tiles: combined in tile order>

Inside a tile, every held value (shared, local, stored) gets a loop nest over
the kernel axes it varies along: a tiled axis `a` runs 0..t within the tile
(its position `ao*t + a`), any other axis over its whole extent. A held value
is first written to a global temporary of this kernel (the round trip the
accelerator seed complains of) that `forward_buffers` then moves on chip.
Inline values and the injective ops become expressions inside their readers'
nests: a load at the index map's position, a `Select` per concat, an `Indirect`
index per gather, an iota's position (`IndexValue`). Reductions and matmuls
initialize their accumulator, then accumulate over their reduced axes; `mean`
divides at the end. A value the kernel stores is written to its global buffer
from the nest that computes it (or copied from its on-chip buffer)."""

from __future__ import annotations

from typing import Protocol

from ..engine.ir.extent import is_symbolic, planning_values
from ..engine.ir.graph import Graph
from ..engine.ir.ops import REDUCE as REDUCTIONS
from ..engine.ir.program import FLOAT_DTYPES, TensorType, int_range
from ..engine.ir.recursion import allows_deep_recursion
from ..engine.schedule.cost import ScheduleCost
from ..engine.schedule.facts import matrix_dims, reduced_axes
from ..engine.schedule.index import FloorDiv, Indirect, Ix, Mod, simplify, simplify_in
from ..engine.schedule.kernel import Hold, Instance, Kernel, Read, RefKind, Schedule, index_axes, packed_operand
from ..engine.schedule.machine import sum_accumulator
from ..engine.schedule.maps import GatherRef
from ..engine.schedule.plan import KernelPlan, Staged
from ..engine.schedule.reads import DENSE, dense_part, region, untiled_names
from ..engine.schedule.schedule_print import global_names
from ..engine.schedule.split import planned_kernel
from ..engine.schedule.target import Target
from .loops import (
    Accumulate,
    Buffer,
    Checked,
    Expr,
    For,
    IndexValue,
    Lit,
    Load,
    LoopKernel,
    LoopProgram,
    Op,
    Select,
    Stmt,
    Store,
    expr_vars,
    loads,
    map_indices,
)
from .passes import PASSES


class Scheduled(Protocol):
    """What lowering reads of the extraction stage's result (engine/compiled_program.py's `Compiled`)."""

    @property
    def graph(self) -> Graph: ...

    @property
    def schedule(self) -> Schedule: ...

    @property
    def cost(self) -> ScheduleCost: ...

    @property
    def target(self) -> Target: ...


def identity(op: str, dtype: str):
    """The starting value of a reduction's accumulator."""
    if op in ("sum", "mean", "matmul"):
        return 0
    if dtype in FLOAT_DTYPES:
        return float("-inf") if op == "max" else float("inf")
    if dtype == "bool":
        return op == "min"
    low, high = int_range(dtype)
    return low if op == "max" else high


@allows_deep_recursion
def lower(compiled: Scheduled, bound: tuple[str, ...] = (), caches: dict[str, int] | None = None,
          tops: dict[str, int] | None = None) -> LoopProgram:
    """The lowering pipeline: loop nests, then its passes, then the verifier. `bound` names the
    parameters whose values are given at build time (weights): what derives from them alone moves
    to the program's prologue (lowering/bind.py). `caches` (parameter -> output position) grow in
    place (lowering/caches.py), laid out for the symbols' `tops` (default: this program's planning values)."""
    from .caches import grow_in_place
    from .verify import verify

    target = compiled.target
    program = lower_schedule(compiled.graph.name, compiled.schedule, compiled.cost, target, compiled.graph)
    program.bound = tuple(b.name for b in program.params if b.name in bound)
    for lowering_pass in PASSES:
        program = lowering_pass(program, target)
    program = grow_in_place(program, caches or {}, tops or planning_values(compiled.graph.symbols))
    verify(program, capacity=target.onchip_bytes)
    if program.prologue is not None:
        verify(program.prologue)
    return program


def lower_schedule(name: str, schedule: Schedule, cost: ScheduleCost, target: Target,
                   graph: Graph | None = None) -> LoopProgram:
    names = global_names(schedule)
    types = schedule.types
    params = [Buffer(n, "global", types[c].dtype, types[c].shape) for c, n in schedule.params.items()]
    outputs = set(schedule.outputs)
    intermediates = []
    kernels = []
    checks: list[str] = []
    for i, (kernel, plan) in enumerate(zip(schedule.kernels, cost.plans)):
        for cid in kernel.roots:
            if cid not in outputs:
                t = types[cid]
                intermediates.append(Buffer(names[cid], "global", t.dtype, t.shape))
        kernel = planned_kernel(kernel, plan)  # (its axes split as the plan says)
        lowering = _KernelLowering(f"k{i}", kernel, plan, types, names, checks, graph)
        kernels.append(lowering.lower())
        intermediates.extend(lowering.temporaries)
    for cid, value in schedule.constants.items():  # an output that is a literal: a kernel filling it
        kernels.append(fill_kernel(f"k{len(kernels)}", names[cid], types[cid], value))
    stored = {cid for k in schedule.kernels for cid in k.roots}
    for cid in schedule.outputs:
        if cid not in stored and cid not in schedule.params | schedule.constants:
            raise AssertionError(f"output {cid} has no kernel")
    out_buffers = [Buffer(names[c], "global", types[c].dtype, types[c].shape)
                   for c in dict.fromkeys(schedule.outputs) if c not in schedule.params]
    return LoopProgram(name, params, [names[c] for c in schedule.outputs], intermediates, kernels, out_buffers,
                       checks, symbols=tuple(graph.symbols) if graph is not None else ())


def fill_kernel(name: str, buffer: str, t: TensorType, value) -> LoopKernel:
    """A kernel storing `value` into every element of `buffer`."""
    loops = [For(f"p{d}", n, "serial", []) for d, n in enumerate(t.shape)]
    body: Stmt = Store(buffer, tuple(Ix.var(loop.var) for loop in loops), Lit(value, t.dtype))
    for loop in reversed(loops):
        loop.body.append(body)
        body = loop
    return LoopKernel(name, [], [body])


class _KernelLowering:
    def __init__(self, name: str, kernel: Kernel, plan: KernelPlan, types: dict[str, TensorType],
                 names: dict[str, str], checks: list[str], graph):
        self.name = name
        self.k = kernel
        self.plan = plan
        self.types = types
        self.names = names
        self.checks = checks
        self.graph = graph
        self.parallel = plan.parallel
        self.tile = plan.tile
        self.allocs: list[Buffer] = []
        self.temporaries: list[Buffer] = []
        self.forwardable: dict[str, str] = {}
        self.held: dict[int, str] = {}  # instance key -> the buffer holding it (over its axes)
        self.resident: dict[str, str] = {}  # input -> its whole on-chip copy
        self.staged: dict[tuple, tuple[str, Staged]] = {}  # (input, region) -> (buffer, what it holds)
        self.reads_at = {r.site: r for r in kernel.reads}
        self.sites: dict[int, int] = {}  # gather instance key -> its check number
        # an axis's position: its tile's origin plus the axis inside the tile
        self.position = {a: (Ix.var(a + "o", t) + Ix.var(a)) if t < kernel.extents[a] else Ix.var(a)
                         for a, t in self.tile.items()}
        self.after_tiles = False  # lowering the epilogue: every axis whole, no tile loops around
        self.exprs: dict[tuple, Expr] = {}
        # loop variables a concat's side narrows (it is read only where the concat's index is below,
        # or from, its split): inclusive (lo, hi), which indices inside that side simplify with
        self.narrowed: dict[str, tuple[int, int]] = {}
        # a chunked reduction (KernelPlan.chunked): its accumulator is set before the chunk loop,
        # and what follows the product runs after it
        self.before_chunk: list[Stmt] = []
        self.after_chunk: list[Stmt] = []

    # -- indices -------------------------------------------------------------

    def extent(self, var: str) -> int:
        """A loop variable's extent: a tile loop's count, an axis's tile, else the whole axis."""
        if var.endswith("o") and var[:-1] in self.tile:
            return self.k.extents[var[:-1]] // self.tile[var[:-1]]
        if self.after_tiles:
            return self.k.extents.get(var, 1)
        return self.tile.get(var, self.k.extents.get(var, 1))

    def at(self, ix: Ix) -> Ix:
        """A kernel-level index as a loop-level one: gathers resolved, axes at their positions (a
        resolved gather's index value is already a loop-level expression, which substitution leaves)."""
        resolved = self._resolve(ix)
        moved = resolved if self.after_tiles else resolved.substitute(self.position)
        return simplify_in(moved, self.span)

    def span(self, var: str) -> tuple[int, int]:
        """The inclusive range a loop variable takes here: all of its extent, or where a concat's
        side being built narrowed it to."""
        return self.narrowed.get(var) or (0, self.extent(var) - 1)

    def _resolve(self, ix: Ix) -> Ix:
        def atom(t):
            if isinstance(t, Indirect) and isinstance(t.value, GatherRef):
                gather = self.k.instances[self.k.gathers[t]]  # any gather reading these indices there
                return Ix.var(Indirect(self.operand(gather, 1), t.extent, self.site(gather.key, t.extent)))
            if isinstance(t, (FloorDiv, Mod)):
                return Ix.var(type(t)(self._resolve(t.x), t.d))
            return Ix.var(t)

        return ix.map_atoms(atom)

    def site(self, key: int, extent: int) -> int:
        """The program-wide number of a gather, and what it reports for a bad index."""
        if key not in self.sites:
            node = self.k.instances[key].node
            where = _position(self.graph, node, self.types, self.k.instances[key].cid)
            self.checks.append(f"gather{where}: index {{value}} is out of range for axis {node.attr('axis')} "
                               f"of size {extent}")
            self.sites[key] = len(self.checks) - 1
        return self.sites[key]

    def loops(self, axes) -> list[tuple[str, int]]:
        return [(a, self.extent(a)) for a in dict.fromkeys(axes)]

    def nest(self, axes, leaf: Stmt) -> Stmt:
        """`leaf` inside loops over `axes` (outermost first); a loop its target's index does not
        use is a reduce loop."""
        target = {v for ix in leaf.index for v in ix.axes()}
        for a, n in reversed(self.loops(axes)):
            leaf = For(a, n, "serial" if a in target else "reduce", [leaf])
        return leaf

    # -- the kernel ----------------------------------------------------------

    def lower(self) -> LoopKernel:
        body_at: dict[int, list[Stmt]] = {i: [] for i in range(len(self.parallel) + 1)}
        for cid in sorted(self.plan.resident):  # (a set: sorted, the same C in every process)
            body_at[0].extend(self.stage_whole(cid))
        for s in self.plan.staged:
            axes = index_axes(s.index)
            body_at[self.staging_level(axes)].extend(self.stage(s, axes))
        epilogue: list[Stmt] = []
        later = []
        for inst in self.k.ordered():
            if not inst.held:
                continue
            if inst.key in self.plan.epilogue:
                later.append(inst)
                continue
            tile_part, after = self.compute(inst)
            after_chunks = self.plan.chunked and not self.walks_chunks(inst)
            (self.after_chunk if after_chunks else body_at[len(self.parallel)]).extend(tile_part)
            epilogue.extend(after)
        self.after_tiles = True  # what a split reduction's combined value feeds: once, after the tiles
        for inst in later:
            tile_part, after = self.compute(inst)
            epilogue.extend(tile_part + after)
        body = body_at[len(self.parallel)]
        remainders = []
        for level in reversed(range(len(self.parallel))):
            axis = self.parallel[level]
            extent, t = self.k.extents[axis], self.tile[axis]
            tiles = extent // t
            if self._has_remainder(axis):  # whole tiles; the remainder follows (the last pass)
                remainders.append((axis, t, extent))
            if axis == self.plan.chunked:  # the chunks of one tile's reduction, in order, on its thread
                body = body_at[level] + self.before_chunk + [For(axis + "o", tiles, "serial", body)] + self.after_chunk
                continue
            if tiles == 1:  # a tile loop of one iteration is no loop
                body = body_at[level] + body
                continue
            body = body_at[level] + [For(axis + "o", tiles, "parallel", body)]
        in_place = frozenset(name for name, s in self.staged.values() if s.in_place) | frozenset(
            name for cid, name in self.resident.items() if cid in self.plan.resident_in_place)
        return LoopKernel(self.name, self.allocs, body + epilogue, forwardable=self.forwardable, in_place=in_place,
                          pipelined=self.plan.pipelined, threaded=self.plan.threaded, remainders=tuple(remainders))

    def _has_remainder(self, axis: str) -> bool:
        """Whether the tiles along `axis` leave a remainder tile at some size (a symbolic axis whose
        tile does not divide it at every size)."""
        extent, t = self.k.extents[axis], self.tile[axis]
        return t < extent and is_symbolic(extent % t)

    def staging_level(self, axes) -> int:
        """The depth of tile loops a copy sits in: just inside the innermost tiled axis it varies along."""
        have = [i for i, a in enumerate(self.parallel) if a in axes]
        return max(have) + 1 if have else 0

    def stage_whole(self, cid: str) -> list[Stmt]:
        t = self.types[cid]
        name = f"{self.names.get(cid, cid)}_s"
        index = tuple(Ix.var(f"s{i}") for i in range(len(t.shape)))
        leaf: Stmt = Store(name, index, Load(self.names[cid], index))
        for i, d in reversed(list(enumerate(t.shape))):
            leaf = For(f"s{i}", d, "serial", [leaf])
        self.allocs.append(Buffer(name, "shared", t.dtype, t.shape))
        self.resident[cid] = name
        return [leaf]

    def stage(self, s: Staged, axes) -> list[Stmt]:
        t = self.types[s.cid]
        name = f"{self.names.get(s.cid, s.cid)}_s{len(self.staged)}"
        self.allocs.append(Buffer(name, "shared", t.dtype, tuple(self.extent(a) for a in axes)))
        self.staged[(s.cid, s.region)] = (name, s)
        leaf = Store(name, tuple(Ix.var(a) for a in axes), Load(self.names[s.cid], tuple(self.at(ix) for ix in s.index)))
        return [self.nest(axes, leaf)]

    def temporary(self, inst: Instance, scope: str) -> str:
        """A global temporary over the instance's axes (forward_buffers moves it on chip)."""
        name = f"{self.name}_v{inst.key}"
        shape = tuple(self.k.extents[a] for a in inst.axes)
        self.temporaries.append(Buffer(name, "global", self.types[inst.cid].dtype, shape))
        self.forwardable[name] = scope
        self.held[inst.key] = name
        return name

    def own(self, inst: Instance) -> tuple[Ix, ...]:
        """Where an instance's value sits in its own (axis-space) buffer."""
        return tuple(self.at(Ix.var(a)) for a in inst.axes)

    def compute(self, inst: Instance) -> tuple[list[Stmt], list[Stmt]]:
        """(statements inside the tile, statements after the last tile) computing a held instance."""
        op = inst.node.op
        dtype = self.types[inst.cid].dtype
        stored = inst.key in self.k.stores
        out = self.names.get(inst.cid)
        if op not in REDUCTIONS and op != "matmul":
            value = self.expr(inst)
            if inst.hold is Hold.ROOT:  # streams straight to its global buffer
                return [self.nest(inst.axes, Store(out, self.value_index(inst), value))], []
            name = self.temporary(inst, inst.hold.value)
            stmts = [self.nest(inst.axes, Store(name, self.own(inst), value))]
            if stored:
                stmts.append(self.nest(inst.axes, Store(out, self.value_index(inst), Load(name, self.own(inst)))))
            return stmts, []
        # reductions and matmuls accumulate on chip (`local` unless held shared), then write once
        name = self.temporary(inst, "shared" if inst.hold is Hold.SHARED else "local")
        index = self.own(inst)
        init = self.nest(inst.axes, Store(name, index, Lit(identity(op, dtype), dtype)))
        chunked = self.walks_chunks(inst)
        if chunked:  # set once per tile, before the chunk loop; the product then runs per chunk
            self.before_chunk.append(init)
        stmts = [] if chunked else [init]
        if op == "matmul":
            a, b = self.operand(inst, 0), self.pack(inst, stmts)
            k = tuple(a for ix in inst.operand_index[0] for a in ix.axes() if a not in inst.axes)
            own = inst.axes
            # (batch..., m, k, n): the innermost loop runs along the contiguous rows of b and the accumulator
            n_axes = tuple(inst.index[-1].axes()) if inst.index else ()
            outer = tuple(a for a in own if a not in n_axes)
            stmts.append(self.nest(outer + k + n_axes, Accumulate(name, index, "sum", Op("mul", (a, b), dtype),
                                                                  unit="matrix", matrix=matrix_dims(inst))))
        else:
            acc = "sum" if op == "mean" else op
            loop = tuple(a for ix in inst.operand_index[0] for a in ix.axes())
            extra = tuple(a for a in inst.axes if a not in loop)  # keepdims axes: outermost, so the
            stmts.append(self.nest(extra + loop, Accumulate(  # reduce loop stays innermost
                name, index, acc, self.operand(inst, 0))))
        after: list[Stmt] = []
        if inst.key in self.plan.partial:
            stmts_partial, after = self.split_across_tiles(inst, name)
            return stmts + stmts_partial, after
        if op == "mean":
            stmts.append(self.nest(inst.axes, Store(name, index, Op("div", (Load(name, index), _count(inst, self.types,
                                                                                               dtype)), dtype))))
        if stored:
            store = self.nest(inst.axes, Store(out, self.value_index(inst), Load(name, index)))
            (self.after_chunk if chunked else stmts).append(store)
        return stmts, after

    def walks_chunks(self, inst: Instance) -> bool:
        """Whether `inst` is the matmul whose reduction the plan walks in chunks."""
        return inst.node.op == "matmul" and self.plan.chunked in reduced_axes(inst)

    def pack(self, inst: Instance, stmts: list[Stmt]) -> Expr:
        """A matmul's right operand, packed into a tile buffer (columns innermost) first where the
        plan says so (`KernelPlan.packed`): computed once per tile, then read contiguously."""
        b = self.operand(inst, 1)
        if inst.key not in self.plan.packed:
            return b
        axes = packed_operand(self.k, inst)
        name = f"{self.name}_pack{inst.key}"
        dtype = self.types[inst.node.children[1]].dtype
        # a chunked reduction's axis: one chunk of it, packed in the chunk loop (the whole axis
        # would not fit where the plan chunks it)
        chunk = self.plan.chunked
        self.temporaries.append(Buffer(name, "global", dtype, tuple(self.extent(a) if a == chunk else self.k.extents[a]
                                                                    for a in axes)))
        self.forwardable[name] = "local"
        at = tuple(Ix.var(a) if a == chunk else self.at(Ix.var(a)) for a in axes)
        stmts.append(self.nest(_reading_order(axes, b), Store(name, at, b)))
        return Load(name, at)

    def split_across_tiles(self, inst: Instance, acc: str) -> tuple[list[Stmt], list[Stmt]]:
        """A reduction tiled along axes it reduces (global stitching): each tile writes its
        partial; after the last tile they are combined in tile order, so the result does not depend
        on which thread ran which tile. What reads it (its tail) runs after that, and reads the
        combined value."""
        op = inst.node.op
        dtype = self.types[inst.cid].dtype
        split = [a for a in self.parallel if a not in inst.axes and self.tile[a] < self.k.extents[a]]
        # a symbolic axis's remainder tile (lowering/remainder.py) writes one partial more, at index
        # n // t: the identity where it is empty
        counts = [self.k.extents[a] // self.tile[a] + (1 if self._has_remainder(a) else 0) for a in split]
        part = f"{self.name}_part{inst.key}"
        shape = tuple(counts) + tuple(self.k.extents[a] for a in inst.axes)
        # an f16 sum's partials keep its f32 accumulator's value and are combined in f32 (widen.py
        # widens the combining temporary and lets the f32 partials through): rounded to f16, a
        # partial overflowed where the whole sum does not (a mean's) and rounded once per tile
        wide = op in ("sum", "mean") and sum_accumulator(dtype) != dtype
        self.temporaries.append(Buffer(part, "global", sum_accumulator(dtype) if wide else dtype, shape))
        tile_ix = tuple(Ix.var(a + "o") for a in split)
        write = self.nest(inst.axes, Store(part, tile_ix + self.own(inst), Load(acc, self.own(inst))))
        # after the tiles: fold the partials in order
        self.after_tiles = True
        stored = inst.key in self.k.stores
        if stored and inst.hold is Hold.ROOT and not wide:
            total, at = self.names[inst.cid], self.value_index(inst)
        else:
            total = f"{self.name}_all{inst.key}"
            self.temporaries.append(Buffer(total, "global", dtype, tuple(self.k.extents[a] for a in inst.axes)))
            self.forwardable[total] = "local"
            at = self.own(inst)
        t_vars = tuple(f"{a}t" for a in split)
        loops = [(a, self.k.extents[a]) for a in inst.axes]
        after: list[Stmt] = [
            _loop_nest(loops, Store(total, at, Lit(identity(op, dtype), dtype))),
            _loop_nest([(v, n) for v, n in zip(t_vars, counts)] + loops, Accumulate(
                total, at, "sum" if op == "mean" else op, Load(part, tuple(Ix.var(v) for v in t_vars) + self.own(inst))))]
        if op == "mean":
            after.append(_loop_nest(loops, Store(total, at, Op("div", (Load(total, at), _count(inst, self.types, dtype)),
                                                               dtype))))
        if stored and total != self.names[inst.cid]:
            after.append(_loop_nest(loops, Store(self.names[inst.cid], self.value_index(inst), Load(total, at))))
        self.held[inst.key] = total
        self.after_tiles = False
        return [write], after

    def value_index(self, inst: Instance, position: bool = True) -> tuple[Ix, ...]:
        """Where a stored instance's element goes in its value's global buffer."""
        if position:
            return tuple(self.at(ix) for ix in inst.index)
        return tuple(simplify(ix, lambda a: self.k.extents[a]) for ix in inst.index)

    # -- expressions ---------------------------------------------------------

    def operand(self, inst: Instance, i: int) -> Expr:
        ref = inst.operands[i]
        if ref.kind is RefKind.CONST:
            return Lit(ref.target, self.types[inst.node.children[i]].dtype)
        if ref.kind is RefKind.GLOBAL:
            return self.read(self.reads_at[(inst.key, i)])
        producer = self.k.instances[ref.key]
        if ref.inline:
            return self.expr(producer)
        return Load(self.held[ref.key], self.held_index(producer, inst.operand_index[i]))

    def held_index(self, holder: Instance, at: tuple[Ix, ...]) -> tuple[Ix, ...]:
        """A held buffer (over the holder's axes) read where the reader wants `at`: equal to the
        holder's index except, possibly, for whole axes read under another name."""
        rename = {ix.label: other for ix, other in zip(holder.index, at) if ix.label is not None}
        return tuple(self.at(rename.get(a, Ix.var(a))) for a in holder.axes)

    def read(self, r: Read) -> Expr:
        name = self.names[r.cid]
        if r.cid in self.resident:
            return Load(self.resident[r.cid], tuple(self.at(ix) for ix in r.index))
        key = (r.cid, region(r, self.k, set(self.parallel), self.types[r.cid].shape))
        if key in self.staged:
            buffer, s = self.staged[key]  # (over its first read's axes)
            return Load(buffer, self.staged_index(s, r))
        return Load(name, tuple(self.at(ix) for ix in r.index))

    def staged_index(self, s: Staged, r: Read) -> tuple[Ix, ...]:
        """Where read `r` finds its element in the copy staged for `s` (the first read of its region,
        whose axes the copy is laid out over): a tiled axis is itself; an untiled one is named alike in
        `r` (reads.py `untiled_names`), or, in a block of consecutive elements (reads.py `dense_part`),
        is its digit of `r`'s offset in the block."""
        tiled = set(self.parallel)
        if s.region[0] == DENSE:
            shape = self.types[s.cid].shape
            *_, mine = dense_part(s.index, self.k, tiled, shape)
            offset = dense_part(r.index, self.k, tiled, shape)[2]
            at = Ix.of(dict(offset))
            digits = {a: simplify_in(Ix.var(Mod(Ix.var(FloorDiv(at, c)), self.k.extents[a])), self.span)
                      for a, c in mine}
            # (an untiled axis of extent 1 is no part of the block: its one position, 0, where `r` has no such axis)
            own = set(index_axes(r.index)) | tiled
            return tuple(digits.get(a, Ix.var(a) if a in own else Ix.constant(0)) for a in index_axes(s.index))
        mine = {name: a for a, name in untiled_names(r.index, self.k, tiled).items()}
        rename = {a: Ix.var(mine[name]) for a, name in untiled_names(s.index, self.k, tiled).items()}
        return tuple(rename.get(a, Ix.var(a)) for a in index_axes(s.index))

    def expr(self, inst: Instance) -> Expr:
        """The value of an elementwise or injective instance as an expression: built once per
        instance and shared by every use (an inline value read twice is one node; the C printer
        computes it once)."""
        key = (inst.key, self.after_tiles, tuple(sorted(self.narrowed.items())))
        if key not in self.exprs:
            self.exprs[key] = self._expr(inst)
        return self.exprs[key]

    def _expr(self, inst: Instance) -> Expr:
        op = inst.node.op
        dtype = self.types[inst.cid].dtype
        if op in ("transpose", "reshape", "broadcast_to", "slice"):
            return self.operand(inst, 0)  # the operand's read already follows the index map
        if op == "iota":  # its position along its axis, where it is read
            return IndexValue(self.at(inst.index[inst.node.attr("axis")]), dtype)
        if op == "gather":
            value = self.operand(inst, 0)  # a load at the gathered index (checked when read)
            extent = self.types[inst.node.children[0]].shape[inst.node.attr("axis")]
            site = self.site(self.k.gathers[inst.gathered], extent)
            if not _checks(value, site):  # the index map dropped the index (a table axis of size 1)
                check = Ix.var(Indirect(self.operand(inst, 1), extent, site))
                return Checked(check, value)
            return value
        if op == "concat":
            axis = inst.node.attr("axis")
            split = self.types[inst.node.children[0]].shape[axis]
            at = self.at(inst.index[axis])
            low, high = (self.narrow(at, split, side, lambda i=i: self.operand(inst, i)) for i, side in enumerate("<>"))
            if low == high:  # both sides read the same (a window's taps of one padded input): no choice to make
                return low
            return self.one_read(at, split, low, high) or Select(at, split, low, high, dtype)
        args = tuple(self.operand(inst, i) for i in range(len(inst.operands)))
        return Op(op, args, dtype)

    def one_read(self, at: Ix, split: int, low: Expr, high: Expr) -> Expr | None:
        """One expression for both sides of a concat along a loop variable v (`at` = v + const) where
        the sides read one affine function of v: each side that does not depend on v is read at a
        single v, and the other side (or the line through both) gives it there. A depthwise conv's
        taps stacked along an added axis read x[.., p + 0] where the tap is 0, x[.., p + 1] where it
        is 1, ...: one load of x[.., p + tap], not a select of 3 or 9 loads (4x the time). None
        where the sides are not so."""
        if len(at.terms) != 1 or at.terms[0][1] != 1 or not isinstance(at.terms[0][0], str):
            return None
        v = at.terms[0][0]
        lo, hi = self.span(v)
        edge = split - at.const  # low is read where v < edge
        if not lo < edge <= hi:
            return None
        low_fixed, high_fixed = lo == edge - 1 and v not in expr_vars(low), hi == edge and v not in expr_vars(high)
        if low_fixed and high_fixed:
            return _zip_indices(low, high, lambda a, b: _through(a, b, v, edge - 1))
        if low_fixed and _at(high, v, edge - 1) == low:
            return high
        if high_fixed and _at(low, v, edge) == high:
            return low
        return None

    def narrow(self, at: Ix, split: int, side: str, build):
        """`build()` (a concat's side) with the loop variable of its index `at` narrowed to where
        that side is read: `at < split` ('<') or `at >= split` ('>'). An index of one variable with
        a positive step narrows, or of the floor quotient of one (`c * ((a*v + b) // d) + const`, a
        window's tap taken from a row of taps-first conv values); any other builds as it is."""
        if len(at.terms) != 1 or at.terms[0][1] <= 0:
            return build()
        (term, c), = at.terms
        a, b, d = 1, 0, 1  # at = c * ((a*v + b) // d) + const
        if isinstance(term, FloorDiv):
            if term.x.stepped is None:
                return build()
            (term, a), b, d = term.x.stepped, term.x.const, term.d
        elif not isinstance(term, str):
            return build()
        v = term
        lo, hi = self.span(v)
        if side == "<":  # c*q + const <= split - 1, q = (a*v + b) // d: a*v + b < (q_max + 1) * d
            q = (split - 1 - at.const) // c
            hi = min(hi, ((q + 1) * d - 1 - b) // a)
        else:  # c*q + const >= split: a*v + b >= q_min * d
            q = -(-(split - at.const) // c)
            lo = max(lo, -(-(q * d - b) // a))
        if lo > hi:
            return build()  # this side is never read here: nothing to narrow to
        before = self.narrowed.get(v)
        self.narrowed[v] = (lo, hi)
        try:
            return build()
        finally:
            if before is None:
                del self.narrowed[v]
            else:
                self.narrowed[v] = before


def _at(e: Expr, v: str, point: int) -> Expr:
    """`e` where loop variable `v` is `point`."""
    return map_indices(e, lambda ix: ix.substitute({v: Ix.constant(point)}))


def _through(a: Ix, b: Ix, v: str, point: int) -> Ix | None:
    """The index that is `a` where v = point and `b` where v = point + 1, or None where they differ
    by more than a constant."""
    if a == b:
        return a
    step = b - a
    return None if step.terms else a + Ix.var(v, step.const, -step.const * point)


def _zip_indices(a: Expr, b: Expr, fn) -> Expr | None:
    """`a` with each index replaced by `fn(its index, b's index there)`, where `a` and `b` are the
    same expression but for their indices; None where they are not, or `fn` gives None."""
    def ixs(xs, ys):
        if len(xs) != len(ys):
            return None
        out = tuple(fn(x, y) for x, y in zip(xs, ys))
        return None if any(o is None for o in out) else out

    if isinstance(a, Load) and isinstance(b, Load) and a.buffer == b.buffer:
        index = ixs(a.index, b.index)
        return None if index is None else Load(a.buffer, index)
    if isinstance(a, Lit) and a == b:
        return a
    if isinstance(a, Op) and isinstance(b, Op) and (a.op, a.dtype, len(a.args)) == (b.op, b.dtype, len(b.args)):
        args = tuple(_zip_indices(x, y, fn) for x, y in zip(a.args, b.args))
        return None if any(x is None for x in args) else Op(a.op, args, a.dtype)
    if isinstance(a, Select) and isinstance(b, Select) and (a.split, a.dtype) == (b.split, b.dtype):
        ix = ixs((a.ix,), (b.ix,))
        sides = _zip_indices(a.low, b.low, fn), _zip_indices(a.high, b.high, fn)
        return None if ix is None or None in sides else Select(ix[0], a.split, *sides, a.dtype)
    if isinstance(a, Checked) and isinstance(b, Checked):
        check, value = ixs((a.check,), (b.check,)), _zip_indices(a.value, b.value, fn)
        return None if check is None or value is None else Checked(check[0], value)
    return None


def _reading_order(axes: tuple[str, ...], value: Expr) -> tuple[str, ...]:
    """`axes` with the one most of `value`'s loads read contiguously innermost: a packed transposed
    operand (attention's keys, rotated) then reads rows and writes a column of its on-chip buffer,
    and its loop vectorizes (reading columns, Llama's key pack ran one element at a time)."""
    def contiguous(a: str) -> int:
        return sum(1 for ld in loads(value) if ld.index and ld.index[-1].coef(a) == 1)

    best = max(axes, key=contiguous, default=None)
    if best is None or contiguous(best) <= contiguous(axes[-1]):
        return axes
    return tuple(a for a in axes if a != best) + (best,)


def _checks(e: Expr, site: int) -> bool:
    """Whether evaluating `e` checks gather `site`'s index."""
    for load in loads(e):
        for ix in load.index:
            if any(isinstance(t, Indirect) and t.site == site for t, _ in ix.terms):
                return True
    if isinstance(e, Select):
        return _checks(e.low, site) and _checks(e.high, site)
    return False


def _count(inst: Instance, types, dtype: str) -> Expr:
    """The element count a mean divides by, as a `dtype` value (a symbolic count read at run time)."""
    n = 1
    for a in inst.node.attr("axes"):
        n *= types[inst.node.children[0]].shape[a]
    return IndexValue(Ix.constant(n), dtype) if is_symbolic(n) else Lit(float(n), dtype)


def _loop_nest(loops: list[tuple[str, int]], leaf: Stmt) -> Stmt:
    target = {v for ix in leaf.index for v in ix.axes()}
    for var, n in reversed(loops):
        leaf = For(var, n, "serial" if var in target else "reduce", [leaf])
    return leaf


def _position(graph, node, types, cid) -> str:
    """' at file:line:col' of the program's gather this e-node came from, when one matches."""
    if graph is None:
        return ""
    found = [n for n in graph.nodes if n.op == "gather" and n.attr("axis") == node.attr("axis")
             and n.type == types[cid]]
    return f" at {found[0].pos}" if len(found) == 1 and found[0].pos.line else ""
