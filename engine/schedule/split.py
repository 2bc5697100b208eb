"""Kernel axes split where a held value's index divides them: a group's statistics made once per group.

A reshape between a reduction and its readers leaves div/mod in the kernel's indices. Group norm
over NCHW with 4 groups of 8 channels reduces each group (`mean(reshape(x, [8, 4, 2048]))`) and
normalizes each channel: in the kernel of the output's axes `p0, p1` (channels), the mean sits at
`[p0, p1 // 8]`. A held value's nest runs over the axes its index varies along, `p0` and `p1`: every
group's sums were made once for each of its 8 channels, and their reads of `x` copied on chip 8
times over.

Splitting `p1` into `p1h` (4 groups) and `p1l` (8 channels), `p1 = 8*p1h + p1l`, makes those indices
affine (`p1 // 8` is `p1h`, `p1 % 8` is `p1l`): the mean varies along `p1h` alone and is made once
per group, and a tile holds whole groups (the mean does not vary along `p1l`, so `p1l` is not
tiled). A split is proposed where a held value's index takes a parallel axis `a` of extent E (a
number) only through one quotient `a // d` or one remainder `a % d`, d a proper divisor of E: the
largest such d first, then again on the pieces. Reduced axes are not split: a group's 2048 elements
summed as 8 x 16 x 16 loops ran 5x slower than as one loop of 2048 (its inner loop is what the C
vectorizes); their reads through a reshape's digits are one block of consecutive elements, which
reads.py `region` and the flat addresses (index.py `flat_address`) see as such.

The cost model prices the kernel with its axes split against the kernel as formed and keeps the
cheaper (`cost.kernel_cost`); the plan records the splits (`KernelPlan.splits`), and lowering and
the printers split the kernel as the plan says (`planned_kernel`). A kernel reading through a
gather is left as it is.
"""

from __future__ import annotations

import functools

from ..ir.extent import is_symbolic
from .index import FloorDiv, Indirect, Ix, Mod, simplify
from .kernel import Axis, AxisKind, Instance, Kernel, Read

MAX_SPLITS = 8  # (an axis is split at most log2 of its extent times; 8 is more than any index needs)


def axis_splits(kernel: Kernel) -> tuple[tuple[str, int], ...]:
    """The splits (axis, divisor), in the order made, that leave no index of the kernel dividing an
    axis whole; () where there is none (or the kernel reads through a gather)."""
    if any(_gathered(ix) for ix in _indices(kernel)):
        return ()
    splits: list[tuple[str, int]] = []
    while len(splits) < MAX_SPLITS:
        found = _divided(kernel)
        if not found:
            break
        axis = next(iter(found))
        split = (axis, max(found[axis]))
        kernel = _split(kernel, *split)
        splits.append(split)
    return tuple(splits)


def split_axes(kernel: Kernel, splits: tuple[tuple[str, int], ...]) -> Kernel:
    """The kernel with each axis of `splits` split in turn: (a, d) makes `a` the two axes `ah` (its
    extent over d) and `al` (d), `a = d*ah + al`, in its place among the kernel's axes."""
    for axis, d in splits:
        kernel = _split(kernel, axis, d)
    return kernel


def split_text(kernel: Kernel, splits: tuple[tuple[str, int], ...]) -> str:
    """The splits as the schedule prints them: `p1 = 8*p1h + p1l`, one per split, in order."""
    parts = []
    for axis, d in splits:
        hi, lo = _names(kernel, axis)
        parts.append(f"{axis} = {d}*{hi} + {lo}")
        kernel = _split(kernel, axis, d)
    return ", ".join(parts)


def planned_kernel(kernel: Kernel, plan) -> Kernel:
    """The kernel a plan (plan.py `KernelPlan`) was made for: its axes split as the plan says."""
    return split_axes(kernel, plan.splits) if plan.splits else kernel


def _indices(kernel: Kernel):
    for inst in kernel.instances:
        yield from inst.index
        for index in inst.operand_index:
            yield from index
        for g in inst.guards:
            yield g.ix
    for r in kernel.reads:
        yield from r.index
        for g in r.guards:
            yield g.ix


# (cached: the search asks it of every index of every kernel it prices, and a kernel's indices are
# mostly those of the kernels it was joined from; a convolution's taps nest div/mod several deep)
@functools.lru_cache(maxsize=1 << 16)
def _gathered(ix: Ix) -> bool:
    return any(isinstance(t, Indirect) or isinstance(t, (FloorDiv, Mod)) and _gathered(t.x) for t, _ in ix.terms)


def _divided(kernel: Kernel) -> dict[str, set[int]]:
    """Each axis a held value's index takes only through one quotient or remainder (`a // d` alone,
    or `a % d` alone, d a proper divisor of its extent): the value's nest, over the axes its index
    varies along, makes each of its elements d (or extent / d) times over. In the kernel's axis
    order, with those divisors."""
    extents, kinds = kernel.extents, kernel.kinds
    found: dict[str, set[int]] = {}
    for inst in kernel.instances:
        if not inst.held:
            continue
        uses: dict[str, set] = {}
        for ix in inst.index:
            for t, _ in ix.terms:
                if isinstance(t, str):
                    uses.setdefault(t, set()).add(None)
                elif isinstance(t, (FloorDiv, Mod)) and t.x.label is not None:
                    uses.setdefault(t.x.label, set()).add((type(t), t.d))
                else:
                    for a in t.axes():
                        uses.setdefault(a, set()).add(None)
        for a, how in uses.items():
            if len(how) != 1 or None in how:
                continue
            ((_, d),) = how
            e = extents[a]
            if kinds[a] is AxisKind.PARALLEL and not is_symbolic(e) and not is_symbolic(d) and 1 < d < e \
                    and e % d == 0:
                found.setdefault(a, set()).add(d)
    return {a.name: found[a.name] for a in kernel.axes if a.name in found}


def _fresh(kernel: Kernel, name: str) -> str:
    taken = set(kernel.extents)
    while name in taken:
        name += "_"
    return name


def _names(kernel: Kernel, axis: str) -> tuple[str, str]:
    """The names of the two axes `axis` splits into: `ah` and `al` (a `_` added while taken)."""
    return _fresh(kernel, axis + "h"), _fresh(kernel, axis + "l")


def _split(kernel: Kernel, axis: str, d: int) -> Kernel:
    hi, lo = _names(kernel, axis)
    axes: list[Axis] = []
    for a in kernel.axes:
        axes += [Axis(hi, a.extent // d, a.kind), Axis(lo, d, a.kind)] if a.name == axis else [a]
    extents = {a.name: a.extent for a in axes}
    mapping = {axis: Ix.of({hi: d, lo: 1})}

    def at(ix: Ix) -> Ix:
        return simplify(ix.substitute(mapping), extents.__getitem__) if axis in set(ix.axes()) else ix

    def index(ixs: tuple[Ix, ...]) -> tuple[Ix, ...]:
        return tuple(at(ix) for ix in ixs)

    def guards(gs):
        return tuple(type(g)(at(g.ix), g.lo, g.hi) for g in gs)

    instances = tuple(Instance(i.cid, i.node, index(i.index), i.hold, i.key, i.operands,
                               tuple(index(t) for t in i.operand_index), i.owner, guards(i.guards))
                      for i in kernel.instances)
    reads = tuple(Read(r.cid, index(r.index), r.owner, r.site, guards(r.guards), r.shared) for r in kernel.reads)
    return Kernel(kernel.roots, kernel.stores, instances, reads, tuple(axes), kernel.problems)
