"""Schedules: what one choice of e-nodes means as kernels.

A choice picks one e-node per e-class. Its values (non-placement e-nodes) and
the placements on their operand edges form the schedule:

- a *kernel* is rooted at every value that is a program output or is read
  through a `global` edge; it contains every value reached from its root
  through non-global edges (a value reached that way from two kernels is
  computed in both);
- an *instance* is one value computed inside a kernel, with its axis map: for
  each of its dimensions, the kernel axis it runs along (`p0, p1, ...` are the
  root's output axes, `r...` are axes reduced inside the kernel, None is a
  broadcast size-1 dimension). An `inline` value gets one instance per
  distinct indexing it is read with (recomputed, e.g. once inside a reduction
  and once outside it); `shared` and `local` values one per kernel.

The cost model (`cost.py`) prices kernels; lowering turns them into loops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .egraph_data import EGraphData, ENode
from .ir import TensorType, dtype_bytes
from .ops import is_elementwise

Label = str | None  # "p0".. a root axis, "r3".. a reduced axis, None a broadcast dim


@dataclass(frozen=True)
class Instance:
    cid: str  # the value's e-class
    node: ENode
    labels: tuple[Label, ...]  # one per dimension of the value
    placement: str  # how the kernel holds it: "root", "shared", "local" or "inline"
    key: int  # a number unique within the kernel
    operands: tuple[tuple[str, object], ...] = ()  # per operand: ("global", cid) | ("const", value) | (placement, key)
    operand_labels: tuple[tuple[Label, ...], ...] = ()  # the axis map each operand is read with


@dataclass
class Kernel:
    """A kernel's instances plus the aggregates the cost model reads (kept up to date as it grows)."""

    root: str  # e-class of the value it writes to global memory
    instances: list[Instance]  # the root is the first one created, key 0 of the walk's last return
    inputs: dict[str, tuple[Label, ...]]  # global values read (e-class -> axis map of the read)
    extents: dict[str, int]  # extent of every label
    input_uses: dict[str, int] = field(default_factory=dict)  # operand slots reading each global input
    problems: list[str] = field(default_factory=list)
    root_key: int = -1
    # where each global input is read: (consumer instance key, operand index, axis map)
    reads_at: dict[str, list[tuple[int, int, tuple[Label, ...]]]] = field(default_factory=dict)
    # aggregates: work[labels][op] = elements of `op` per element of a slice with these labels
    work: dict[tuple[Label, ...], dict[str, float]] = field(default_factory=dict)
    buffers: list[tuple[tuple[Label, ...], int]] = field(default_factory=list)  # (labels, bytes per element)
    matmuls: list[tuple[tuple[Label, ...], int]] = field(default_factory=list)  # (output labels, k)
    restrict: list[frozenset] = field(default_factory=list)  # label sets the tiled axes must lie in
    held: dict[str, int] = field(default_factory=dict)  # shared/local value -> its instance key
    # a held value read with another axis map: (op, its own map, the reader's map)
    indexings: list[tuple[str, tuple, tuple]] = field(default_factory=list)
    computed: dict[tuple[str, tuple[Label, ...]], int] = field(default_factory=dict)  # inline (value, labels)
    reduced: int = 0  # counter for fresh reduced-axis labels

    @property
    def problem(self) -> str:
        return "; ".join(dict.fromkeys(self.problems))

    @property
    def root_instance(self) -> Instance:
        return self.instances[self.root_key]

    def copy(self) -> "Kernel":
        return Kernel(
            self.root, list(self.instances), dict(self.inputs), dict(self.extents), dict(self.input_uses),
            list(self.problems), self.root_key, {k: list(v) for k, v in self.reads_at.items()},
            {k: dict(v) for k, v in self.work.items()}, list(self.buffers), list(self.matmuls),
            list(self.restrict), dict(self.held), list(self.indexings), dict(self.computed), self.reduced,
        )

    def ordered(self) -> list[Instance]:
        """Instances with every operand before its reader (growing a kernel appends producers last)."""
        done: dict[int, None] = {}

        def visit(key: int) -> None:
            if key in done:
                return
            for kind, ref in self.instances[key].operands:
                if kind not in ("global", "const"):
                    visit(ref)
            done[key] = None

        visit(self.root_key)
        return [self.instances[k] for k in done]


@dataclass
class Schedule:
    kernels: list[Kernel]
    outputs: list[str]
    types: dict[str, TensorType]
    params: dict[str, str] = field(default_factory=dict)  # e-class -> parameter name
    constants: dict[str, object] = field(default_factory=dict)  # an output that is a literal -> its value

    def kernel_of(self, cid: str) -> Kernel | None:
        return next((k for k in self.kernels if k.root == cid), None)


class CyclicChoice(Exception):
    """The choice makes a value depend on itself (an e-graph cycle): it denotes no program."""


def values_of(data: EGraphData, choice: dict[str, ENode], cid: str) -> tuple[str, ENode]:
    """The value e-class behind a (possibly placement) e-class, and its chosen e-node."""
    node = choice[cid]
    while node.is_placement:
        cid = node.children[0]
        node = choice[cid]
    return cid, node


def operand_edges(data: EGraphData, choice: dict[str, ENode], node: ENode) -> list[tuple[str, str]]:
    """(placement, value e-class) for each operand of a value e-node."""
    edges = []
    for child in node.children:
        pnode = choice[child]
        placement = pnode.op if pnode.is_placement else "global"
        value = pnode.children[0] if pnode.is_placement else child
        edges.append((placement, value))
    return edges


def build_schedule(data: EGraphData, choice: dict[str, ENode], form=None) -> Schedule:
    """Kernels of a choice, in an order where producers come before consumers."""
    roots: list[str] = []
    seen: set[str] = set()
    order: list[str] = []  # value classes, post-order (producers first)

    active: set[str] = set()

    def walk(cid: str) -> None:
        if cid in seen:
            if cid in active:
                raise CyclicChoice(cid)
            return
        seen.add(cid)
        active.add(cid)
        node = choice[cid]
        for placement, value in operand_edges(data, choice, node):
            walk(value)
            vnode = choice[value]
            if placement == "global" and vnode.op not in ("param", "const") and value not in roots:
                roots.append(value)
        order.append(cid)
        active.discard(cid)

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
    constants = {cid: choice[cid].attr("value") for cid in outputs if choice[cid].op == "const"}
    form = form or (lambda r: form_kernel(data, choice, r))
    kernels = [form(r) for r in roots]
    return Schedule(kernels, outputs, data.types, params, constants)


def form_kernel(data: EGraphData, choice: dict[str, ENode], root: str) -> Kernel:
    shape = data.types[root].shape
    kernel = Kernel(root, [], {}, {f"p{i}": d for i, d in enumerate(shape)})
    kernel.root_key = _Builder(data, choice, kernel).visit(root, tuple(f"p{i}" for i in range(len(shape))), "root")
    return kernel


def fuse_into(data: EGraphData, choice: dict[str, ENode], kernel: Kernel, producer: str,
              consumers: set[str]) -> Kernel:
    """`kernel` with `producer` computed inside it instead of read from global memory.

    `choice` is the new choice: the consumers of `producer` in this kernel read
    it through non-global edges, and nothing else changed. Only the producer's
    part is walked, so growing a kernel costs what is added to it.
    """
    new = kernel.copy()
    sites = [site for site in new.reads_at.pop(producer) if new.instances[site[0]].cid in consumers]
    kept = [site for site in kernel.reads_at[producer] if site not in sites]
    if kept:  # other consumers in this kernel still read it from global memory
        new.reads_at[producer] = kept
        new.input_uses[producer] = len(kept)
    else:
        del new.inputs[producer]
        del new.input_uses[producer]
    builder = _Builder(data, choice, new)
    for key, index, labels in sites:
        inst = new.instances[key]
        node = choice[inst.cid]
        edge, value = operand_edges(data, choice, node)[index]
        assert value == producer and edge != "global", (edge, value)
        consumer_labels = inst.labels
        ref = builder.edge(node, edge, value, labels, consumer_labels)
        operands = list(new.instances[key].operands)
        operands[index] = ref
        new.instances[key] = Instance(inst.cid, node, inst.labels, inst.placement, key, tuple(operands),
                                      inst.operand_labels)
    return new


class _Builder:
    """Walks a kernel's values from the root through non-global edges, accounting as it goes."""

    def __init__(self, data: EGraphData, choice: dict[str, ENode], kernel: Kernel):
        self.data = data
        self.types = data.types
        self.choice = choice
        self.k = kernel

    def fresh(self, extent: int) -> str:
        label = f"r{self.k.reduced}"
        self.k.reduced += 1
        self.k.extents[label] = extent
        return label

    def visit(self, cid: str, labels: tuple[Label, ...], placement: str) -> int:
        k = self.k
        if placement in ("shared", "local") and cid in k.held:
            inst = k.instances[k.held[cid]]
            if inst.labels != labels:  # fine unless they differ along a tiled axis: cost.py decides
                k.indexings.append((self.choice[cid].op, inst.labels, labels))
            return inst.key
        if placement == "inline" and (cid, labels) in k.computed:
            return k.computed[(cid, labels)]
        node = self.choice[cid]
        key = len(k.instances)
        k.instances.append(None)  # reserve the key: operands may be read by key before this returns
        read_labels = operand_labels(node, labels, self.types, cid, self.fresh, k.problems)
        operands = []
        for index, ((edge, value), child_labels) in enumerate(zip(operand_edges(self.data, self.choice, node),
                                                                   read_labels)):
            vnode = self.choice[value]
            if vnode.op == "const":
                operands.append(("const", vnode.attr("value")))
            elif edge == "global" or vnode.op == "param":
                self.read_global(value, child_labels, key, index)
                operands.append(("global", value))
            else:
                operands.append(self.edge(node, edge, value, child_labels, labels))
        inst = Instance(cid, node, labels, placement, key, tuple(operands), tuple(read_labels))
        k.instances[key] = inst
        if placement in ("shared", "local"):
            k.held[cid] = key
        elif placement == "inline":
            k.computed[(cid, labels)] = key
        self.account(inst)
        return key

    def edge(self, consumer: ENode, edge: str, value: str, labels, consumer_labels) -> tuple[str, int]:
        vnode = self.choice[value]
        if edge == "inline" and not is_elementwise(vnode.op):
            self.k.problems.append(f"inline needs an elementwise producer, not {vnode.op}")
        if edge == "local" and is_elementwise(consumer.op) and set(filter(None, labels)) < set(
            filter(None, consumer_labels)
        ):
            self.k.problems.append(f"local value {vnode.op} is broadcast by its consumer {consumer.op}; use shared")
        return (edge, self.visit(value, labels, edge))

    def read_global(self, value: str, labels, key: int, index: int) -> None:
        k = self.k
        k.reads_at.setdefault(value, []).append((key, index, labels))
        prev = k.inputs.get(value)
        if prev is not None and prev != labels:
            # read twice with different indexings: stage the union (the whole slice of both)
            labels = tuple(a if a == b else _wider(a, b) for a, b in zip(prev, labels))
        k.inputs[value] = labels
        k.input_uses[value] = k.input_uses.get(value, 0) + 1

    def account(self, inst: Instance) -> None:
        """Add what this instance costs per element of its slice to the kernel's aggregates."""
        k = self.k
        op = inst.node.op
        if op in ("param", "const"):
            return
        if op == "matmul":
            k.matmuls.append((inst.labels, self.types[inst.node.children[0]].shape[-1]))
            k.restrict.append(frozenset(inst.labels))
        else:
            factor = 1.0
            if op in ("sum", "mean", "max", "min"):
                in_shape = self.types[inst.node.children[0]].shape
                factor = float(math.prod(in_shape[a] for a in inst.node.attr("axes")))
                k.restrict.append(frozenset(inst.labels))
            if op == "reshape":
                k.restrict.append(frozenset(inst.operand_labels[0]))
            ops = k.work.setdefault(inst.labels, {})
            ops[op] = ops.get(op, 0.0) + factor
        accumulates = op in ("sum", "mean", "max", "min", "matmul")
        if inst.placement in ("shared", "local") or (inst.placement == "root" and accumulates):
            k.buffers.append((inst.labels, dtype_bytes(self.types[inst.cid].dtype)))


def _wider(a: Label, b: Label) -> Label:
    return a if a is not None else b


def operand_labels(node: ENode, out: tuple[Label, ...], types, cid: str, fresh, problems: list[str]):
    """The axis map of each operand of `node`, given the axis map `out` of its result."""
    op = node.op
    shapes = [types[c].shape for c in node.children]
    out_shape = types[cid].shape
    if op in ("param", "const"):
        return []
    if op in ("sum", "mean", "max", "min"):
        (in_shape,) = shapes
        axes = node.attr("axes")
        keep = node.attr("keepdims")
        it = iter(out)
        labels = []
        for i, d in enumerate(in_shape):
            if i in axes:
                labels.append(fresh(d))
                if keep:
                    next(it)
            else:
                labels.append(next(it))
        return [tuple(labels)]
    if op == "matmul":
        a, b = shapes
        k = fresh(a[-1])
        a2 = len(a) == 1
        b2 = len(b) == 1
        lab = list(out)
        n_label = None if b2 else lab.pop()
        m_label = None if a2 else lab.pop()
        batch = lab
        la = _broadcast_into(a[:-2], batch) + ([m_label] if not a2 else []) + [k]
        lb = _broadcast_into(b[:-2], batch) + [k] + ([n_label] if not b2 else [])
        la = [None if (d == 1 and lab_ is not None and not lab_.startswith("r")) else lab_ for d, lab_ in zip(a, la)]
        lb = [None if (d == 1 and lab_ is not None and not lab_.startswith("r")) else lab_ for d, lab_ in zip(b, lb)]
        return [tuple(la), tuple(lb)]
    if op == "transpose":
        perm = node.attr("perm")
        labels: list[Label] = [None] * len(perm)
        for i, p in enumerate(perm):
            labels[p] = out[i]
        return [tuple(labels)]
    if op == "reshape":
        # Dimensions of a common prefix keep their axes; the rest are re-indexed
        # through the flat index inside the tile (see parallel_axes).
        (in_shape,) = shapes
        labels = []
        for i, d in enumerate(in_shape):
            same = i < len(out_shape) and all(in_shape[j] == out_shape[j] for j in range(i + 1))
            labels.append(out[i] if same else fresh(d))
        return [tuple(labels)]
    # elementwise, where, cast, broadcast_to: numpy broadcasting, trailing axes aligned
    result = []
    for s in shapes:
        off = len(out_shape) - len(s)
        result.append(tuple(None if (d == 1 and out_shape[j + off] != 1) else out[j + off] for j, d in enumerate(s)))
    return result


def _broadcast_into(batch_shape, out_batch: list[Label]) -> list[Label]:
    off = len(out_batch) - len(batch_shape)
    return [out_batch[j + off] for j in range(len(batch_shape))]
