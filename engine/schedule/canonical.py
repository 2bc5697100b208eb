"""Kernels equal up to which values they name: formed, joined and priced once.

A transformer repeats one layer; its twelve copies form the same kernels over other e-classes (other
weights, other activations of the same types, other literals where the layer's quantization scales
are written as literals). `kernel_shape` writes a kernel with its e-classes and literals numbered in
the order it meets them (parameters without their names), beside the types of those classes: two
kernels of one shape are the same computation on other buffers, so the cost model's answer for one
(its plan and price) is the other's with the classes renamed (`renamed_cost`). `group_shape` does
the same for kernels taken together (two kernels joined: merge.py `merge_pair`), and
`renamed_kernel` turns one kernel of a shape into another's. The search (space.py `Space.form`,
`Space.join`, `Space.price_kernel`) so works out a layer's kernels once and the other layers' by
renaming.

A kernel reading through a gather is not given a shape (None): its index terms are ordered by the
text of the gathered class (index.py `_order`), so a renamed copy would not be the kernel the other
layer forms. It is worked out as it is.
"""

from __future__ import annotations

from dataclasses import replace

from ..rewrite.egraph_data import ENode
from .cost import KernelCost
from .kernel import Kernel, Read, Ref, RefKind

Shape = tuple  # (the kernel's structure with its classes numbered, the types of those classes)


def literal_key(value) -> tuple:
    """A literal as the shapes number it, beside the classes: by its type and its text, so -0.0 and
    0.0, or 1 and 1.0, are two literals and every NaN one. Literals are numbered, not written, so
    that a quantized layer's scales and zero points (other literals in each layer) leave the kernels
    of one shape: pricing reads no literal's value, and renaming puts each layer's own back."""
    if type(value) in (bool, int, float):
        return ("literal", type(value).__name__, repr(value))
    return ("literal", "object", value)  # (none is made today: the e-graph's literals are Python numbers)


def literal_value(key: tuple):
    """The literal `literal_key` numbered."""
    _, kind, text = key
    return {"bool": lambda t: t == "True", "int": int, "float": float}.get(kind, lambda v: v)(text)


def kernel_shape(kernel: Kernel, types: dict) -> tuple[Shape, tuple] | None:
    """(the kernel's shape, its e-classes and literals (`literal_key`) in the order numbered), or None
    where it has none (a gather)."""
    numbered = _numbered([kernel])
    if numbered is None:
        return None
    structures, names = numbered
    return (structures, tuple(types.get(c) for c in names)), names


def group_shape(kernels: list[Kernel], types: dict, outputs: set[str]) -> tuple[Shape, tuple] | None:
    """The shape of kernels taken together (one numbering: which reads which), with which of their
    classes are outputs: what merging them depends on (merge.py `merge_kernels`)."""
    numbered = _numbered(kernels)
    if numbered is None:
        return None
    structures, names = numbered
    return (structures, tuple(types.get(c) for c in names), tuple(c in outputs for c in names)), names


def _numbered(kernels: list[Kernel]) -> tuple[tuple, tuple] | None:
    """Each kernel's structure over one numbering of their classes and literals, and what was
    numbered, in order; None where one is a gather."""
    number: dict = {}
    structures = []
    for kernel in kernels:
        structure = _structure(kernel, number)
        if structure is None:
            return None
        structures.append(structure)
    return tuple(structures), tuple(number)


def _structure(kernel: Kernel, number: dict[str, int]) -> tuple | None:
    """The kernel with its classes and literals numbered by `number` (extended as they are met); None
    for a gather."""
    def cid(c) -> int:
        return number.setdefault(c, len(number))

    def node(n: ENode) -> tuple:
        attrs = n.attrs if n.op != "param" else ()  # (a parameter is a class like any other: its name aside)
        return n.ctor, n.op, tuple(map(cid, n.children)), attrs

    def ref(r: Ref) -> tuple:
        if r.kind is RefKind.HELD:
            return r.kind, r.target, r.hold
        return r.kind, cid(r.target if r.kind is RefKind.GLOBAL else literal_key(r.target)), r.hold

    if any(inst.node.op == "gather" for inst in kernel.instances):
        return None  # (its Indirect atoms, the only index terms naming a class, come from its gathers)
    roots = tuple(map(cid, kernel.roots))
    instances = tuple((cid(inst.cid), node(inst.node), inst.index, inst.hold, inst.key, tuple(map(ref, inst.operands)),
                       inst.operand_index, inst.owner, inst.guards) for inst in kernel.instances)
    reads = tuple((cid(r.cid), r.index, r.owner, r.site, r.guards, r.shared) for r in kernel.reads)
    return roots, kernel.stores, instances, reads, kernel.axes, kernel.problems


def renamed_kernel(kernel: Kernel, names: dict, nodes: dict[str, ENode]) -> Kernel:
    """`kernel` over the classes (and literals, `literal_key`) `names` maps its own to, each instance
    computing its class by the e-node `nodes` gives: the kernel those classes form, where they have
    `kernel`'s shape."""
    def ref(r: Ref) -> Ref:
        if r.kind is RefKind.GLOBAL:
            return Ref(RefKind.GLOBAL, names[r.target])
        if r.kind is RefKind.CONST:
            return Ref(RefKind.CONST, literal_value(names[literal_key(r.target)]))
        return r

    instances = tuple(i.renamed(names[i.cid], nodes[names[i.cid]], tuple(map(ref, i.operands)))
                      for i in kernel.instances)
    return Kernel(tuple(names[c] for c in kernel.roots), kernel.stores, instances,
                  tuple(_read(r, names) for r in kernel.reads), kernel.axes, kernel.problems)


def renamed_cost(cost: KernelCost, names: dict[str, str]) -> KernelCost:
    """`cost` of a kernel, for the kernel of the same shape whose classes `names` maps it to.

    A plan names classes where it says how inputs are read (resident, staged, streamed); everything
    else in it (axes, tiles, instance keys) is the same in both kernels."""
    plan = cost.plan
    plan = replace(
        plan, resident=frozenset(names[c] for c in plan.resident),
        resident_in_place=frozenset(names[c] for c in plan.resident_in_place),
        staged=tuple(replace(s, cid=names[s.cid]) for s in plan.staged),
        streamed=tuple(((names[c], nest), tuple(_read(r, names) for r in reads))
                       for (c, nest), reads in plan.streamed))
    return KernelCost(plan, cost.price)


def _read(r: Read, names: dict[str, str]) -> Read:
    return Read(names[r.cid], r.index, r.owner, r.site, r.guards, r.shared)

