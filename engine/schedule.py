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

from dataclasses import dataclass, field

from .egraph_data import EGraphData, ENode
from .ir import TensorType
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
    root: str  # e-class of the value it writes to global memory
    instances: list[Instance]  # in dependency order; the last one is the root
    inputs: dict[str, tuple[Label, ...]]  # global values read (e-class -> axis map of the read)
    extents: dict[str, int]  # extent of every label
    input_uses: dict[str, int] = field(default_factory=dict)  # operand slots reading each global input
    problem: str = ""  # why the kernel cannot be built as a tiled loop nest, if it cannot

    @property
    def root_instance(self) -> Instance:
        return self.instances[-1]


@dataclass
class Schedule:
    kernels: list[Kernel]
    outputs: list[str]
    types: dict[str, TensorType]
    params: dict[str, str] = field(default_factory=dict)  # e-class -> parameter name

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
    form = form or (lambda r: form_kernel(data, choice, r))
    kernels = [form(r) for r in roots]
    return Schedule(kernels, outputs, data.types, params)


def form_kernel(data: EGraphData, choice: dict[str, ENode], root: str) -> Kernel:
    types = data.types
    shape = types[root].shape
    extents: dict[str, int] = {f"p{i}": d for i, d in enumerate(shape)}
    instances: list[Instance] = []
    inputs: dict[str, tuple[Label, ...]] = {}
    input_uses: dict[str, int] = {}
    held: dict[str, Instance] = {}  # shared/local instances, one per value
    problems: list[str] = []
    counter = [0]

    def fresh_reduced(extent: int) -> str:
        label = f"r{counter[0]}"
        counter[0] += 1
        extents[label] = extent
        return label

    computed: dict[tuple[str, tuple[Label, ...]], int] = {}  # inline values with the same indexing: computed once

    def visit(cid: str, labels: tuple[Label, ...], placement: str) -> int:
        if placement in ("shared", "local") and cid in held:
            inst = held[cid]
            if inst.labels != labels:
                problems.append(f"{placement} value {choice[cid].op} is read with two different indexings")
            return inst.key
        if placement == "inline" and (cid, labels) in computed:
            return computed[(cid, labels)]
        node = choice[cid]
        operands = []
        read_labels = operand_labels(node, labels, types, cid, fresh_reduced, problems)
        for (edge, value), child_labels in zip(operand_edges(data, choice, node), read_labels):
            vnode = choice[value]
            if vnode.op == "const":
                operands.append(("const", vnode.attr("value")))
            elif edge == "global" or vnode.op == "param":
                prev = inputs.get(value)
                if prev is not None and prev != child_labels:
                    # read twice with different indexings: stage the union (the whole slice of both)
                    child_labels = tuple(a if a == b else _wider(a, b) for a, b in zip(prev, child_labels))
                inputs[value] = child_labels
                input_uses[value] = input_uses.get(value, 0) + 1
                operands.append(("global", value))
            else:
                if edge == "inline" and not vnode_elementwise(vnode):
                    problems.append(f"inline needs an elementwise producer, not {vnode.op}")
                if edge == "local" and vnode_elementwise(node) and set(filter(None, child_labels)) < set(
                    filter(None, labels)
                ):
                    problems.append(f"local value {vnode.op} is broadcast by its consumer {node.op}; use shared")
                operands.append((edge, visit(value, child_labels, edge)))
        key = len(instances)
        inst = Instance(cid, node, labels, placement, key, tuple(operands), tuple(read_labels))
        instances.append(inst)
        if placement in ("shared", "local"):
            held[cid] = inst
        elif placement == "inline":
            computed[(cid, labels)] = key
        return key

    visit(root, tuple(f"p{i}" for i in range(len(shape))), "root")
    return Kernel(root, instances, inputs, extents, input_uses, "; ".join(dict.fromkeys(problems)))


def _wider(a: Label, b: Label) -> Label:
    return a if a is not None else b


def vnode_elementwise(node: ENode) -> bool:
    return is_elementwise(node.op)


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
