"""Kernel formation, step 1: the walk from each root (the kernel model is `kernel.py`).

Every value that is a program output or is read through a `global` edge is a root. From each root,
a walk follows non-global edges to the values it computes, each an instance at an index over the
kernel's axes. Operands are read through the op's index map (`maps.py`): transposes, reshapes,
slices, concats and gathers move no data, they only change where the next value is read. An
`inline` value gets one instance per nest that uses it and per index it is read at (recomputed); a
`shared` or `local` value one instance per kernel (held on chip). Global reads are recorded with the
nest that performs them (`Read.owner`). `build_schedule` then merges the kernels (`merge.py`).
"""

from __future__ import annotations

from typing import NamedTuple

from ..ir.ops import is_injective
from ..rewrite.egraph_data import EGraphData, ENode
from ..rewrite.placement import PLACEMENT_OF_NAME, Placement
from .index import Ix
from .kernel import (
    Axis,
    AxisKind,
    CyclicChoice,
    Hold,
    Instance,
    Kernel,
    Read,
    Schedule,
    const_ref,
    global_ref,
    held_ref,
    with_owners,
)
from .maps import Guard, operand_maps
from .merge import merge_kernels

# by name, for the kernel walk (a dict lookup, not an enum call per edge)
_HOLDS = {h.value: h for h in Hold}


def values_of(data: EGraphData, choice: dict[str, ENode], cid: str) -> tuple[str, ENode]:
    """The value e-class behind a (possibly placement) e-class, and its chosen e-node."""
    node = choice[cid]
    while node.is_placement:
        cid = node.children[0]
        node = choice[cid]
    return cid, node


class Edge(NamedTuple):
    """An operand edge of a value e-node: the value e-class it reads, and how it is held."""

    placement: Placement
    value: str


def operand_edges(choice: dict[str, ENode], node: ENode) -> list[Edge]:
    """The edge of each operand of a value e-node."""
    edges = []
    for child in node.children:
        pnode = choice[child]
        if pnode.is_placement:
            edges.append(Edge(PLACEMENT_OF_NAME[pnode.op], pnode.children[0]))
        else:
            edges.append(Edge(Placement.GLOBAL, child))
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


def build_schedule(data: EGraphData, choice: dict[str, ENode], form=None, join=None) -> Schedule:
    """Kernels of a choice, producers before consumers (`form(root)` forms one root's kernel, `join`
    joins two: merge.py `merge_kernels`)."""
    roots, outputs, params = find_roots(data, choice)
    constants = {cid: choice[cid].attr("value") for cid in outputs if choice[cid].op == "const"}
    form = form or (lambda r: form_kernel(data, choice, r))
    kernels = merge_kernels([form(r) for r in roots], set(outputs), join)
    return Schedule(kernels, outputs, data.types, params, constants)


def form_kernel(data: EGraphData, choice: dict[str, ENode], root: str) -> Kernel:
    """The kernel of one root: its walk (step 1 of the module docstring)."""
    shape = data.types[root].shape
    b = _Builder(data, choice)
    for i, d in enumerate(shape):
        b.axes.append(Axis(f"p{i}", d, AxisKind.PARALLEL))
        b.extents[f"p{i}"] = d
    key = b.visit(root, tuple(Ix.var(f"p{i}") for i in range(len(shape))), Hold.ROOT, -1, ())
    return with_owners(Kernel((root,), (key,), tuple(b.instances), tuple(b.reads), tuple(b.axes),
                               tuple(b.problems)))



class _Builder:
    """Walks a kernel's values from the root through non-global edges."""

    def __init__(self, data: EGraphData, choice: dict[str, ENode]):
        self.types = data.types
        self.choice = choice
        self.instances: list[Instance | None] = []
        self.reads: list[Read] = []
        self.axes: list[Axis] = []
        self.extents: dict[str, int] = {}  # (each axis's, looked up by every reshape's simplification)
        self.problems: list[str] = []
        self.held: dict[str, int] = {}  # shared/local value -> its instance
        self.computed: dict[tuple, int] = {}  # inline (value, index, guards) -> its instance

    def fresh(self, extent: int) -> str:
        name = f"r{sum(a.kind is AxisKind.REDUCE for a in self.axes)}"
        self.axes.append(Axis(name, extent, AxisKind.REDUCE))
        self.extents[name] = extent
        return name

    def extent(self, axis: str) -> int:
        return self.extents[axis]

    def visit(self, cid: str, index: tuple[Ix, ...], hold: Hold, owner: int, guards: tuple[Guard, ...]) -> int:
        if hold in (Hold.SHARED, Hold.LOCAL) and cid in self.held:
            # read again, perhaps at another index: the cost model checks that the two differ only
            # by whole axes (facts.alias_problem), which the buffer holds whole
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
                self.problems.append(f"the {node.op}'s result would be kept on chip inside one piece of a concat "
                                     f"(computed for that piece's positions only), which a held value cannot be")
        edges = operand_edges(self.choice, node)
        indices = edges[1].value if node.op == "gather" else ""  # what its Indirect atom reads
        maps = operand_maps(node.op, node.attrs, index, [self.types[c].shape for c in node.children],
                            self.types[cid].shape, self.fresh, self.extent, indices)
        operands = []
        for i, ((edge, value), m) in enumerate(zip(edges, maps)):
            vnode = self.choice[value]
            under = guards + m.guards
            if vnode.op == "const":
                operands.append(const_ref(vnode.attr("value")))
            elif edge is Placement.GLOBAL or vnode.op == "param":
                shared = edge is Placement.SHARED and vnode.op == "param"
                self.reads.append(Read(value, m.index, owner, (key, i), under, shared))
                operands.append(global_ref(value))
            else:
                self.check_edge(edge, vnode)
                held_as = _HOLDS[edge.value]
                operands.append(held_ref(self.visit(value, m.index, held_as, owner, under), held_as))
        self.instances[key] = Instance(cid, node, index, hold, key, tuple(operands),
                                       tuple(m.index for m in maps), owner, guards)
        if hold in (Hold.SHARED, Hold.LOCAL):
            self.held[cid] = key
        elif hold is Hold.INLINE:
            self.computed[memo] = key
        return key

    def check_edge(self, edge: Placement, producer: ENode) -> None:
        # The rules say `inline ... where injective(?p)`, but of an e-class, which may also hold a
        # non-injective node equal to it; extraction chooses nodes. (A `local` edge's consumer never
        # broadcasts it: the rule language has every rule that makes one say not_broadcast.)
        if edge is Placement.INLINE and not is_injective(producer.op):
            self.problems.append(f"it would recompute a {producer.op} at each use, and only injective values "
                                 f"(elementwise, layout and movement ops) are recomputed")
