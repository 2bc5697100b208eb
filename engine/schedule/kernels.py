"""Schedules: what one choice of e-nodes means as kernels.

A choice picks one e-node per e-class. Its values (non-placement e-nodes) and
the placements on their operand edges form the schedule.

Kernel formation, in two steps:

1. *Walk.* Every value that is a program output or is read through a
   `global` edge is a root. From each root, a walk follows non-global edges
   to the values it computes. Each value computed is an *instance* at an
   *index*: one `Ix` per dimension of the value, over the kernel's axes
   (`p0, p1, ...` the root's output axes, `r0, ...` axes reduced inside the
   kernel). Operands are read through the op's index map (`maps.py`):
   transposes, reshapes, slices, concats and gathers move no data, they only
   change where the next value is read. An `inline` value gets one instance
   per nest that uses it and per index it is read at (recomputed); a
   `shared` or `local` value one instance per kernel (held on chip). Global
   reads are recorded with the nest that performs them (`Read.owner`).
2. *Merge.* A value held (`shared`/`local`) by two kernels, a root that
   another kernel computes, and an input two kernels read through `shared`
   edges join those kernels into one (DESIGN: a kernel is a group of ops
   joined by non-global edges). The second kernel's axes are renamed so the
   common value sits at the same index in both (`_merge`), matched through
   gathered indices too: a gather's Indirect atom names the indices tensor
   and where it is read (`maps.GatherRef`), not the gather, so two kernels
   reading one token's row share its axes. A kernel may so write several
   values (`Kernel.roots`): a value fused into a kernel and needed elsewhere
   is written by the kernel that computes it.

The result is plain immutable data. The cost model (`cost.py`) decides tiling
and prices kernels from it; lowering turns it into loops.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property

from ..ir.frozen import cached_hash
from ..ir.ops import ACCUMULATING, is_injective
from ..ir.program import TensorType
from ..rewrite.egraph_data import EGraphData, ENode
from .index import FloorDiv, Indirect, Ix, Mod, bounds
from .maps import GatherRef, Guard, operand_maps


class Placement(StrEnum):
    """How a producer -> consumer edge is held (README, "Schedule vocabulary")."""

    GLOBAL = "global"
    SHARED = "shared"
    LOCAL = "local"
    INLINE = "inline"


class Hold(StrEnum):
    """How a kernel holds a value it computes."""

    ROOT = "root"  # in a nest of its own, written to global memory
    SHARED = "shared"  # on chip for the whole tile
    LOCAL = "local"  # on chip, forwarded tile by tile
    INLINE = "inline"  # an expression inside the nest that reads it, recomputed per use


class AxisKind(StrEnum):
    PARALLEL = "parallel"  # an output axis: may be tiled
    REDUCE = "reduce"  # an axis a reduction or matmul sums over inside the kernel


# by name, for the kernel walk (a dict lookup, not an enum call per edge)
_PLACEMENTS = {p.value: p for p in Placement}
_HOLDS = {h.value: h for h in Hold}


# An operand reference: ("global", cid) | ("const", value) | (hold, instance key)
Operand = tuple[str, object]


def index_axes(index: tuple[Ix, ...]) -> tuple[str, ...]:
    """The axes an index varies along, in first-use order."""
    return tuple(dict.fromkeys(a for ix in index for a in ix.axes()))


def indirect_atoms(index: tuple[Ix, ...]) -> Iterator[Indirect]:
    """The gathered indices an index evaluates: its Indirect atoms, those inside div/mod and those
    inside a gathered index (a gather of gathered indices)."""
    for ix in index:
        for t, _ in ix.terms:
            if isinstance(t, Indirect):
                yield t
                if isinstance(t.value, GatherRef):
                    yield from indirect_atoms(t.value.index)
            elif isinstance(t, (FloorDiv, Mod)):
                yield from indirect_atoms((t.x,))


@cached_hash
@dataclass(frozen=True)
class Instance:
    cid: str  # the value's e-class
    node: ENode
    index: tuple[Ix, ...]  # where each of its elements sits: one Ix per dimension, over kernel axes
    hold: Hold
    key: int  # its position in Kernel.instances
    operands: tuple[Operand, ...] = ()
    operand_index: tuple[tuple[Ix, ...], ...] = ()  # where each operand is read
    owner: int = -1  # the held instance whose nest computes it (itself, unless inline)
    guards: tuple[Guard, ...] = ()  # computed only where these hold (inside a concat piece)

    @property
    def held(self) -> bool:
        return self.hold is not Hold.INLINE

    def renumbered(self, key: int, owner: int, operands: tuple[Operand, ...]) -> "Instance":
        """This instance under another key, owner and operand references (as `Read.moved`)."""
        return Instance(self.cid, self.node, self.index, self.hold, key, operands, self.operand_index, owner,
                        self.guards)

    @cached_property
    def axes(self) -> tuple[str, ...]:
        """The kernel axes its value varies along, in first-use order; a matmul's columns last (its
        accumulator's rows contiguous, as the micro-kernel wants, also where a batch dimension is
        a part of the columns' axis: a grouped Conv's groups)."""
        axes = index_axes(self.index)
        if self.node.op == "matmul" and self.index:
            cols = set(self.index[-1].axes())
            axes = tuple(a for a in axes if a not in cols) + tuple(a for a in axes if a in cols)
        return axes

    @property
    def gathered(self) -> Indirect:
        """A gather's Indirect atom: where it reads its table along its axis (maps.py's gather)."""
        ((atom, _),) = self.operand_index[0][self.node.attr("axis")].terms
        return atom


def packed_operand(kernel: Kernel, inst: Instance) -> tuple[str, ...]:
    """The axes of the tile buffer a matmul's right operand is packed into before the product
    (columns innermost), or () when the product reads it where it is.

    The product streams vectors of its right operand along the columns. A computed operand (a
    bias add, a softmax, a value read through a transpose) would be evaluated, or gathered with a
    stride, once per block of rows; packed, it is computed once per tile and read contiguously. A
    global value read with the columns as its last index needs no packing."""
    kind, _ = inst.operands[1]
    if inst.node.op != "matmul" or kind == "const" or not inst.index or len(inst.operand_index[1]) < 2:
        return ()  # (a vector right operand has no columns)
    columns = tuple(inst.index[-1].axes())
    if not columns:
        return ()
    if kind == "global":
        read = next(r for r in kernel.reads if r.site == (inst.key, 1))
        if read.index and read.index[-1] == inst.index[-1] and not set(columns) & set(index_axes(read.index[:-1])):
            return ()
    elif kind != "inline":
        return ()  # held on chip over its own axes
    axes = index_axes(inst.operand_index[1])
    return tuple(a for a in axes if a not in columns) + tuple(a for a in axes if a in columns)


@cached_hash
@dataclass(frozen=True)
class Read:
    """A global value read inside a kernel: at `index`, under `guards`, in the nest of `owner`."""

    cid: str
    index: tuple[Ix, ...]
    owner: int
    site: tuple[int, int]  # (consumer instance key, operand position)
    guards: tuple[Guard, ...] = ()
    shared: bool = False  # an input read through a `shared` edge: joins the kernels that read it so

    @cached_property
    def axes(self) -> tuple[str, ...]:
        return index_axes(self.index)

    def moved(self, owner: int, site: tuple[int, int] | None = None) -> "Read":
        """This read in another nest (and at another site): `dataclasses.replace` without its
        introspection, which kernel merging calls millions of times on a large program."""
        return Read(self.cid, self.index, owner, self.site if site is None else site, self.guards, self.shared)


@dataclass(frozen=True)
class Axis:
    name: str
    extent: int
    kind: AxisKind


@cached_hash
@dataclass(frozen=True)
class Kernel:
    roots: tuple[str, ...]  # the values it writes to global memory (the first sets the axes)
    stores: tuple[int, ...]  # the instance writing each root
    instances: tuple[Instance, ...]
    reads: tuple[Read, ...]
    axes: tuple[Axis, ...]
    problems: tuple[str, ...] = ()

    @property
    def root(self) -> str:
        return self.roots[0]

    @property
    def root_instance(self) -> Instance:
        return self.instances[self.stores[0]]

    @cached_property
    def extents(self) -> dict[str, int]:
        return {a.name: a.extent for a in self.axes}

    @cached_property
    def kinds(self) -> dict[str, AxisKind]:
        return {a.name: a.kind for a in self.axes}

    @cached_property
    def inputs(self) -> dict[str, list[Read]]:
        """The global values it reads, each with its reads, in first-read order."""
        out: dict[str, list[Read]] = {}
        for r in self.reads:
            out.setdefault(r.cid, []).append(r)
        return out

    @property
    def problem(self) -> str:
        return "; ".join(dict.fromkeys(self.problems))

    @cached_property
    def gathers(self) -> dict[Indirect, int]:
        """Each Indirect atom -> the first gather instance reading through it: the one whose
        indices operand lowering evaluates for it (every such gather reads the same index value)."""
        out: dict[Indirect, int] = {}
        for inst in self.instances:
            if inst.node.op == "gather":
                out.setdefault(inst.gathered, inst.key)
        return out

    def inlined(self, key: int) -> list[int]:
        """`key` and the instances its expression computes inline (through inline operands, each once)."""
        seen: dict[int, None] = {}
        stack = [key]
        while stack:
            k = stack.pop()
            if k not in seen:
                seen[k] = None
                stack.extend(ref for kind, ref in self.instances[k].operands if kind == "inline")
        return list(seen)

    @cached_property
    def readers(self) -> dict[int, list[int]]:
        """For each instance, the instances reading it through a fused edge."""
        out: dict[int, list[int]] = {}
        for inst in self.instances:
            for kind, ref in inst.operands:
                if kind not in ("global", "const"):
                    out.setdefault(ref, []).append(inst.key)
        return out

    def ordered(self) -> list[Instance]:
        """Instances with every operand before its reader, stores in root order."""
        done: dict[int, None] = {}

        def visit(key: int) -> None:
            if key in done:
                return
            inst = self.instances[key]
            for kind, ref in inst.operands:
                if kind not in ("global", "const"):
                    visit(ref)
            for atom in indirect_atoms(inst.index):
                kind, ref = self.instances[self.gathers[atom]].operands[1]  # the gather's indices operand
                if kind not in ("global", "const"):
                    visit(ref)
            done[key] = None

        for key in self.stores:
            visit(key)
        return [self.instances[k] for k in done]


@dataclass
class Schedule:
    kernels: list[Kernel]
    outputs: list[str]
    types: dict[str, TensorType]
    params: dict[str, str] = field(default_factory=dict)  # e-class -> parameter name
    constants: dict[str, object] = field(default_factory=dict)  # an output that is a literal -> its value

    def kernel_of(self, cid: str) -> Kernel | None:
        return next((k for k in self.kernels if cid in k.roots), None)


class CyclicChoice(Exception):
    """The choice makes a value depend on itself (an e-graph cycle), or its kernels depend on each
    other: it denotes no runnable program."""


def values_of(data: EGraphData, choice: dict[str, ENode], cid: str) -> tuple[str, ENode]:
    """The value e-class behind a (possibly placement) e-class, and its chosen e-node."""
    node = choice[cid]
    while node.is_placement:
        cid = node.children[0]
        node = choice[cid]
    return cid, node


def operand_edges(choice: dict[str, ENode], node: ENode) -> list[tuple[Placement, str]]:
    """(placement, value e-class) for each operand of a value e-node."""
    edges = []
    for child in node.children:
        pnode = choice[child]
        if pnode.is_placement:
            edges.append((_PLACEMENTS[pnode.op], pnode.children[0]))
        else:
            edges.append((Placement.GLOBAL, child))
    return edges


def find_roots(data: EGraphData, choice: dict[str, ENode]) -> tuple[list[str], list[str], dict[str, str]]:
    """(roots in producer-first order, outputs, params by e-class) of a choice."""
    roots: list[str] = []
    seen: set[str] = set()
    active: set[str] = set()
    order: list[str] = []

    def walk(cid: str) -> None:
        stack = [(cid, False)]
        while stack:
            c, done = stack.pop()
            if done:
                active.discard(c)
                order.append(c)
                continue
            if c in seen:
                if c in active:
                    raise CyclicChoice(c)
                continue
            seen.add(c)
            active.add(c)
            stack.append((c, True))
            for placement, value in reversed(operand_edges(choice, choice[c])):
                if placement is Placement.GLOBAL and choice[value].op not in ("param", "const") \
                        and value not in roots:
                    roots.append(value)
                stack.append((value, False))

    outputs = []
    for r in data.roots:
        cid, _ = values_of(data, choice, r)
        outputs.append(cid)
        walk(cid)
    for cid in outputs:
        if choice[cid].op not in ("param", "const") and cid not in roots:
            roots.append(cid)
    position = {cid: i for i, cid in enumerate(order)}
    roots.sort(key=position.__getitem__)
    params = {cid: choice[cid].attr("name") for cid in order if choice[cid].op == "param"}
    return roots, outputs, params


def build_schedule(data: EGraphData, choice: dict[str, ENode], form=None) -> Schedule:
    """Kernels of a choice, producers before consumers (`form(root)` forms one root's kernel)."""
    roots, outputs, params = find_roots(data, choice)
    constants = {cid: choice[cid].attr("value") for cid in outputs if choice[cid].op == "const"}
    form = form or (lambda r: form_kernel(data, choice, r))
    kernels = merge_kernels([form(r) for r in roots], set(outputs))
    return Schedule(kernels, outputs, data.types, params, constants)


def form_kernel(data: EGraphData, choice: dict[str, ENode], root: str) -> Kernel:
    """The kernel of one root: its walk (step 1 of the module docstring)."""
    shape = data.types[root].shape
    b = _Builder(data, choice)
    for i, d in enumerate(shape):
        b.axes.append(Axis(f"p{i}", d, AxisKind.PARALLEL))
    key = b.visit(root, tuple(Ix.var(f"p{i}") for i in range(len(shape))), Hold.ROOT, -1, ())
    return _with_owners(Kernel((root,), (key,), tuple(b.instances), tuple(b.reads), tuple(b.axes),
                               tuple(b.problems)))


def _with_owners(k: Kernel) -> Kernel:
    """Every global read once per nest that makes it: an inline value is an expression inside each
    nest that reads it (directly or through other inline values), so its reads happen in each of
    them (the cost model stages what two nests read)."""
    nests: dict[int, set[int]] = {}
    for inst in k.instances:
        if inst.held:
            for key in k.inlined(inst.key):
                nests.setdefault(key, set()).add(inst.key)
    # a gather's indices are read wherever its index is evaluated: in the nests that read through
    # it, and in the nest of a value held at a gathered index
    evaluates: dict[Indirect, set[int]] = {}
    read_at: dict[int, list[tuple[Ix, ...]]] = {}
    for r in k.reads:
        read_at.setdefault(r.site[0], []).append(r.index)
    for inst in k.instances:
        reads_at = read_at.get(inst.key, ())
        for atom in set(indirect_atoms(inst.index)).union(*(indirect_atoms(index) for index in reads_at)):
            evaluates.setdefault(atom, set()).update(nests.get(inst.key, ()))
    reads = []
    for r in dict.fromkeys(r.moved(-1) for r in k.reads):
        owners = set(nests.get(r.site[0], ()))
        if r.site[1] == 1 and k.instances[r.site[0]].node.op == "gather":
            owners |= evaluates.get(k.instances[r.site[0]].gathered, set())
        reads.extend(r.moved(owner) for owner in sorted(owners))
    return replace(k, reads=tuple(reads))


class _Builder:
    """Walks a kernel's values from the root through non-global edges."""

    def __init__(self, data: EGraphData, choice: dict[str, ENode]):
        self.types = data.types
        self.choice = choice
        self.instances: list[Instance | None] = []
        self.reads: list[Read] = []
        self.axes: list[Axis] = []
        self.problems: list[str] = []
        self.held: dict[str, int] = {}  # shared/local value -> its instance
        self.computed: dict[tuple, int] = {}  # inline (value, index, guards) -> its instance

    def fresh(self, extent: int) -> str:
        name = f"r{sum(a.kind is AxisKind.REDUCE for a in self.axes)}"
        self.axes.append(Axis(name, extent, AxisKind.REDUCE))
        return name

    def extent(self, axis: str) -> int:
        return next(a.extent for a in self.axes if a.name == axis)

    def visit(self, cid: str, index: tuple[Ix, ...], hold: Hold, owner: int, guards: tuple[Guard, ...]) -> int:
        if hold in (Hold.SHARED, Hold.LOCAL) and cid in self.held:
            # read again, perhaps at another index: the cost model checks that the two differ only
            # by whole axes (cost.alias_problem), which the buffer holds whole
            return self.held[cid]
        memo = (cid, index, guards)
        if hold is Hold.INLINE and memo in self.computed:
            return self.computed[memo]
        node = self.choice[cid]
        key = len(self.instances)
        self.instances.append(None)  # reserve the key: operands may refer to it before this returns
        if hold is not Hold.INLINE:
            owner = key
            if guards:
                self.problems.append(f"{node.op} is held on chip but read inside a concat piece")
        edges = operand_edges(self.choice, node)
        indices = edges[1][1] if node.op == "gather" else ""  # what its Indirect atom reads
        maps = operand_maps(node.op, node.attrs, index, [self.types[c].shape for c in node.children],
                            self.types[cid].shape, self.fresh, self.extent, indices)
        operands = []
        for i, ((edge, value), m) in enumerate(zip(edges, maps)):
            vnode = self.choice[value]
            under = guards + m.guards
            if vnode.op == "const":
                operands.append(("const", vnode.attr("value")))
            elif edge is Placement.GLOBAL or vnode.op == "param":
                shared = edge is Placement.SHARED and vnode.op == "param"
                self.reads.append(Read(value, m.index, owner, (key, i), under, shared))
                operands.append(("global", value))
            else:
                self.check_edge(node, edge, vnode, m.index, index)
                operands.append((edge.value, self.visit(value, m.index, _HOLDS[edge.value], owner, under)))
        self.instances[key] = Instance(cid, node, index, hold, key, tuple(operands),
                                       tuple(m.index for m in maps), owner, guards)
        if hold in (Hold.SHARED, Hold.LOCAL):
            self.held[cid] = key
        elif hold is Hold.INLINE:
            self.computed[memo] = key
        return key

    def check_edge(self, consumer: ENode, edge: Placement, producer: ENode, read_at, consumer_index) -> None:
        if edge is Placement.INLINE and not is_injective(producer.op):
            self.problems.append(f"inline needs an injective producer, not {producer.op}")
        if edge is Placement.LOCAL and consumer.op not in ACCUMULATING and set(
                a for ix in read_at for a in ix.axes()) < set(a for ix in consumer_index for a in ix.axes()):
            self.problems.append(f"local value {producer.op} is broadcast by its consumer {consumer.op}; use shared")


# ---------------------------------------------------------------------------
# step 2: merging kernels joined by held values, computed roots and shared inputs


def merge_kernels(kernels: list[Kernel], outputs: set[str]) -> list[Kernel]:
    """Kernels joined into one where they compute the same value (or one computes another's root),
    or where both read an input through `shared` edges; in producer-first order.

    A join is made only when the two kernels' axes can be matched up on the common value
    (`_unify`) and the result does not make two kernels each wait for the other; otherwise each
    computes the value itself (recomputation)."""
    group = list(range(len(kernels)))
    merged: dict[int, Kernel] = dict(enumerate(kernels))
    writer = {cid: i for i, k in enumerate(kernels) for cid in k.roots}
    # group -> the groups whose values it reads from global memory (acyclic, kept so as merges go)
    reads_from = {i: {writer[r.cid] for r in k.reads if r.cid in writer} for i, k in enumerate(kernels)}
    for i, j in _joins(kernels):
        gi, gj = group[i], group[j]
        if gi == gj or gi in reads_from[gi] or gj in reads_from[gj]:
            continue
        # joined, they would read from global memory what they write (a path from one to the
        # other), or two kernels would each wait for the other (a longer cycle): both need a path
        if _reaches(reads_from, gi, gj) or _reaches(reads_from, gj, gi):
            continue
        joined = _merge(merged[gi], merged[gj])
        if joined is None:
            continue
        group = [gi if g == gj else g for g in group]
        merged[gi] = joined
        del merged[gj]
        reads_from[gi] |= reads_from.pop(gj)
        for ds in reads_from.values():
            if gj in ds:
                ds.discard(gj)
                ds.add(gi)
    return _order(list(merged.values()), outputs)


def _reaches(edges: dict[int, set[int]], start: int, goal: int) -> bool:
    """Whether `goal` is reachable from `start` along `edges`."""
    seen = {start}
    stack = [start]
    while stack:
        for nxt in edges.get(stack.pop(), ()):
            if nxt == goal:
                return True
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def _joins(kernels: list[Kernel]) -> list[tuple[int, int]]:
    """Pairs of kernels computing a common value, or reading an input through `shared` edges."""
    first: dict[str, int] = {}
    joins = []
    for i, k in enumerate(kernels):
        for cid in dict.fromkeys(inst.cid for inst in k.instances if inst.node.op not in ("param", "const")):
            j = first.setdefault(cid, i)
            if j != i:
                joins.append((j, i))
        for cid in dict.fromkeys(r.cid for r in k.reads if r.shared):
            j = first.setdefault("input " + cid, i)
            if j != i:
                joins.append((j, i))
    return list(dict.fromkeys(joins))


def _full(inst: Instance) -> bool:
    """An instance that covers its value's every element exactly once: one distinct parallel axis of
    the value's extent per dimension (size-1 dimensions may read 0), outside any concat piece."""
    if inst.guards:
        return False
    seen = set()
    for ix in inst.index:
        if ix.is_const and ix.const == 0:
            continue
        label = ix.label
        if label is None or label in seen:
            return False
        seen.add(label)
    return True


def _merge(a: Kernel, b: Kernel) -> Kernel | None:
    """One kernel doing the work of both: b's axes renamed so that a value both compute (or an
    input both read through `shared` edges) sits at the same index in both, instances
    deduplicated; None when no renaming keeps every stored value whole."""
    mapping = _unify(a, b)
    if mapping is None:
        return None
    return _concat(a, _rename(b, mapping, len(a.instances)))


def _unify(a: Kernel, b: Kernel) -> dict[str, Ix] | None:
    """A renaming of b's axes (to expressions over a's) under which a common value or shared input
    has the same index in both and every value b stores still covers its elements once; b's other
    axes get fresh names."""
    in_a: dict[str, list[Instance]] = {}
    for inst in a.instances:
        in_a.setdefault(inst.cid, []).append(inst)
    pairs = []
    for inst in b.instances:
        for mine in in_a.get(inst.cid, ()):
            if inst.key in b.stores and not _full(mine):
                continue  # b's root would be computed only where a reads it
            pairs.append((mine.index, inst.index, inst.key in b.stores))
    pairs.sort(key=lambda p: not p[2])  # a root of b first: its index is all of b's axes
    a_reads = {r.cid: r.index for r in a.reads if r.shared}
    pairs += [(a_reads[r.cid], r.index, False) for r in b.reads if r.shared and r.cid in a_reads]
    for mine, theirs, _ in pairs:
        mapping = _solve(mine, theirs)
        if mapping is None or not _covers(mapping, a, b):
            continue
        full = _complete(mapping, a, b)
        if all(_full_index(tuple(ix.substitute(full) for ix in b.instances[key].index)) for key in b.stores):
            return full
    return None


def _covers(mapping: dict[str, Ix], a: Kernel, b: Kernel) -> bool:
    """Every axis of b that `mapping` binds still runs over exactly its own range under a's axes,
    and a reduced axis of b becomes one of a's axes of its own: b's work is neither cut short nor
    shifted (a concat piece's offset read, x[p0 - 1]) nor, for a reduction, repeated."""
    extent = {ax.name: ax.extent for ax in a.axes}.__getitem__
    targets = set()
    for ax in b.axes:
        new = mapping.get(ax.name)
        if new is None:
            continue
        if bounds(new, extent) != (0, ax.extent - 1):
            return False
        if ax.kind is AxisKind.REDUCE:
            if new.label is None or new.label in targets:
                return False
            targets.add(new.label)
    return True


def _full_index(index: tuple[Ix, ...]) -> bool:
    labels = [ix.label for ix in index if not (ix.is_const and ix.const == 0)]
    return all(lab is not None for lab in labels) and len(set(labels)) == len(labels)


def _solve(target: tuple[Ix, ...], source: tuple[Ix, ...]) -> dict[str, Ix] | None:
    """Axes of b mapped so that `source` becomes `target`. An axis of b is bound where it stands
    alone in a dimension of `source`, or in the index of a gathered index matched with a read of
    the same indices in `target` (`_bind`); then every axis of `source` must be bound, and the
    substitution must make `source` equal to `target` (a constant, a div/mod or an offset only
    checked, never solved for)."""
    if len(target) != len(source):
        return None
    mapping: dict[str, Ix] = {}
    if not all(_bind(t, s, mapping) for t, s in zip(target, source)):
        return None
    if any(a not in mapping for s in source for a in s.axes()):
        return None
    if tuple(s.substitute(mapping) for s in source) != tuple(target):
        return None
    return mapping


def _bind(target: Ix, source: Ix, mapping: dict[str, Ix]) -> bool:
    """Bind what `source` determines of b's axes to match `target`; False on a contradiction."""
    label = source.label
    if label is not None:
        return mapping.setdefault(label, target) == target
    s, t = _gathered(source), _gathered(target)
    if s is not None and t is not None and s.extent == t.extent and s.value.indices == t.value.indices \
            and len(s.value.index) == len(t.value.index):
        return all(_bind(ti, si, mapping) for ti, si in zip(t.value.index, s.value.index))
    return True


def _gathered(ix: Ix) -> Indirect | None:
    """The Indirect atom when `ix` is exactly one gathered index (a gather's table position)."""
    if len(ix.terms) == 1 and ix.const == 0 and ix.terms[0][1] == 1:
        atom = ix.terms[0][0]
        if isinstance(atom, Indirect) and isinstance(atom.value, GatherRef):
            return atom
    return None


def _complete(mapping: dict[str, Ix], a: Kernel, b: Kernel) -> dict[str, Ix]:
    """b's unmapped axes renamed: a parallel one to a parallel axis of a of its extent that nothing
    of b maps to (siblings then share a tile loop: the attention block's k and v projections,
    joined on x, tile their columns together), the others apart from a's."""
    taken = {ax.name for ax in a.axes}
    full = dict(mapping)
    bound = {ix.label for ix in mapping.values()}
    free = [ax for ax in a.axes if ax.kind is AxisKind.PARALLEL and ax.name not in bound]
    for ax in b.axes:
        if ax.name in full or ax.kind is not AxisKind.PARALLEL:
            continue
        twin = next((other for other in free if other.extent == ax.extent), None)
        if twin is not None:
            free.remove(twin)
            full[ax.name] = Ix.var(twin.name)
    for ax in b.axes:
        if ax.name in full:
            continue
        n = 0
        prefix = "p" if ax.kind is AxisKind.PARALLEL else "r"
        while f"{prefix}{n}" in taken:
            n += 1
        taken.add(f"{prefix}{n}")
        full[ax.name] = Ix.var(f"{prefix}{n}")
    return full


def _rename(k: Kernel, mapping: dict[str, Ix], offset: int) -> Kernel:
    """k with its axes substituted and its instance keys shifted by `offset`."""

    def ix(i: Ix) -> Ix:
        return i.substitute(mapping)

    def idx(t):
        return tuple(ix(i) for i in t)

    def guards(gs):
        return tuple(Guard(ix(g.ix), g.lo, g.hi) for g in gs)

    def ops(operands):
        return tuple((kind, ref + offset if kind not in ("global", "const") else ref) for kind, ref in operands)

    instances = tuple(
        Instance(inst.cid, inst.node, idx(inst.index), inst.hold, inst.key + offset, ops(inst.operands),
                 tuple(idx(t) for t in inst.operand_index), inst.owner + offset, guards(inst.guards))
        for inst in k.instances)
    reads = tuple(Read(r.cid, idx(r.index), r.owner + offset, (r.site[0] + offset, r.site[1]), guards(r.guards),
                       r.shared) for r in k.reads)
    axes = []
    for ax in k.axes:
        new = mapping[ax.name]
        if new.label is not None and new.label != ax.name:
            axes.append(Axis(new.label, ax.extent, ax.kind))
        elif new.label == ax.name:
            axes.append(ax)
    return Kernel(k.roots, tuple(s + offset for s in k.stores), instances, reads, tuple(axes), k.problems)


def _concat(a: Kernel, b: Kernel) -> Kernel:
    """a and b (b already renamed and re-keyed) as one kernel. What both compute at the same
    index becomes one instance, as within one walk: a held or stored value, and an inline value
    (recomputed once per index); the duplicate's reads move to the one kept."""
    instances = list(a.instances) + list(b.instances)
    stored = set(a.stores) | set(b.stores)
    same: dict[int, int] = {}
    seen: dict[tuple, int] = {}
    for inst in instances:
        sig = (inst.cid, inst.index, inst.guards, inst.held or inst.key in stored)
        if sig in seen:
            same[inst.key] = seen[sig]
        else:
            seen[sig] = inst.key
    axes = {ax.name: ax for ax in a.axes}
    for ax in b.axes:
        axes.setdefault(ax.name, ax)
    roots = list(a.roots)
    stores = list(a.stores)
    for cid, key in zip(b.roots, b.stores):
        key = same.get(key, key)
        if cid not in roots:
            roots.append(cid)
            stores.append(key)
    if same:
        instances = _redirect(instances, same)
    kernel = Kernel(tuple(roots), tuple(stores), tuple(instances), a.reads + b.reads, tuple(axes.values()),
                    a.problems + b.problems)
    return _with_owners(_compact(kernel))


def _redirect(instances: list[Instance], same: dict[int, int]) -> list[Instance]:
    """Operand references to a duplicate instance pointed at the one kept; the kept one takes the
    strongest hold of the two (shared/local over root)."""
    out = []
    for inst in instances:
        operands = tuple((kind, same.get(ref, ref) if kind not in ("global", "const") else ref)
                         for kind, ref in inst.operands)
        out.append(inst.renumbered(inst.key, same.get(inst.owner, inst.owner), operands))
    for dup, kept in same.items():
        if out[dup].hold in (Hold.SHARED, Hold.LOCAL) and out[kept].hold is Hold.ROOT:
            out[kept] = replace(out[kept], hold=out[dup].hold)
    return out


def _compact(k: Kernel) -> Kernel:
    """Drop instances no store reaches (duplicates redirected away), renumbering keys."""
    reach: dict[int, None] = {}
    stack = list(k.stores)
    while stack:
        key = stack.pop()
        if key in reach:
            continue
        reach[key] = None
        inst = k.instances[key]
        stack.extend(ref for kind, ref in inst.operands if kind not in ("global", "const"))
    if len(reach) == len(k.instances):
        return k
    keep = sorted(reach)
    new = {old: i for i, old in enumerate(keep)}
    # indices need no renumbering: a gathered index names the indices it reads, not a gather
    instances = []
    for old in keep:
        inst = k.instances[old]
        operands = tuple((kind, new[ref] if kind not in ("global", "const") else ref) for kind, ref in inst.operands)
        instances.append(inst.renumbered(new[old], new.get(inst.owner, -1), operands))
    reads = tuple(r.moved(new.get(r.owner, -1), (new[r.site[0]], r.site[1]))
                  for r in k.reads if r.site[0] in new)
    used = {a for inst in instances for t in (inst.index, *inst.operand_index) for i in t for a in i.axes()}
    axes = tuple(a for a in k.axes if a.name in used)
    return Kernel(k.roots, tuple(new[s] for s in k.stores), tuple(instances), reads, axes, k.problems)


def _order(kernels: list[Kernel], outputs: set[str]) -> list[Kernel]:
    """Kernels in an order where each runs after the kernels whose values it reads; a cycle among
    them (two kernels each reading what the other writes) denotes no runnable program."""
    writer = {cid: i for i, k in enumerate(kernels) for cid in k.roots}
    deps = [{writer[r.cid] for r in k.reads if r.cid in writer and writer[r.cid] != i}
            for i, k in enumerate(kernels)]
    for i, k in enumerate(kernels):
        if any(writer.get(r.cid) == i for r in k.reads):
            raise CyclicChoice(k.root)
    order: list[int] = []
    state = [0] * len(kernels)

    def visit(i: int) -> None:
        stack = [(i, False)]
        while stack:
            j, done = stack.pop()
            if done:
                state[j] = 2
                order.append(j)
                continue
            if state[j] == 2:
                continue
            if state[j] == 1:
                raise CyclicChoice(kernels[j].root)
            state[j] = 1
            stack.append((j, True))
            stack.extend((d, False) for d in sorted(deps[j], reverse=True) if state[d] != 2)

    for i in range(len(kernels)):
        if state[i] == 0:
            visit(i)
    return [kernels[i] for i in order]
