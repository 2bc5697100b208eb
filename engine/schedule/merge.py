"""Kernel formation, step 2: merging the kernels formed by the walk (`form.py`).

A value held (`shared`/`local`) by two kernels, a root that another kernel computes, and an input
two kernels read through `shared` edges join those kernels into one (DESIGN: a kernel is a group of
ops joined by non-global edges). The second kernel's axes are renamed so the common value sits at
the same index in both (`merge_pair`), matched through gathered indices too: a gather's Indirect atom
names the indices tensor and where it is read (`maps.GatherRef`), not the gather, so two kernels
reading one token's row share its axes. A kernel may so write several values (`Kernel.roots`): a
value fused into a kernel and needed elsewhere is written by the kernel that computes it.
"""

from __future__ import annotations

from dataclasses import replace

from .index import Indirect, Ix, bounds
from .kernel import Axis, AxisKind, CyclicChoice, Hold, Instance, Kernel, Read, with_owners
from .maps import GatherRef, Guard


def merge_kernels(kernels: list[Kernel], outputs: set[str], join=None) -> list[Kernel]:
    """Kernels joined into one where they compute the same value (or one computes another's root),
    or where both read an input through `shared` edges; in producer-first order.

    A join is made only when the two kernels' axes can be matched up on the common value
    (`_unify`) and the result does not make two kernels each wait for the other; otherwise each
    computes the value itself (recomputation). `join(a, b)` joins two (`merge_pair`, or the
    search's memo of it: space.py `Space.join`)."""
    join = join or merge_pair
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
        joined = join(merged[gi], merged[gj])
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
    return order_kernels(list(merged.values()), outputs)


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
        for cid in dict.fromkeys(inst.cid for inst in k.instances
                                 if inst.node.op not in ("param", "const") and inst.key not in k.index_only):
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


def merge_pair(a: Kernel, b: Kernel) -> Kernel | None:
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
        return tuple(ref.rekeyed(lambda key: key + offset) for ref in operands)

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
    return with_owners(_compact(kernel))


def _redirect(instances: list[Instance], same: dict[int, int]) -> list[Instance]:
    """Operand references to a duplicate instance pointed at the one kept; the kept one takes the
    strongest hold of the two (shared/local over root)."""
    out = []
    for inst in instances:
        operands = tuple(ref.rekeyed(lambda key: same.get(key, key)) for ref in inst.operands)
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
        stack.extend(ref.key for ref in inst.operands if ref.held)
    if len(reach) == len(k.instances):
        return k
    keep = sorted(reach)
    new = {old: i for i, old in enumerate(keep)}
    # indices need no renumbering: a gathered index names the indices it reads, not a gather
    instances = []
    for old in keep:
        inst = k.instances[old]
        operands = tuple(ref.rekeyed(new.__getitem__) for ref in inst.operands)
        instances.append(inst.renumbered(new[old], new.get(inst.owner, -1), operands))
    reads = tuple(r.moved(new.get(r.owner, -1), (new[r.site[0]], r.site[1]))
                  for r in k.reads if r.site[0] in new)
    used = {a for inst in instances for t in (inst.index, *inst.operand_index) for i in t for a in i.axes()}
    axes = tuple(a for a in k.axes if a.name in used)
    return Kernel(k.roots, tuple(new[s] for s in k.stores), tuple(instances), reads, axes, k.problems)


def order_kernels(kernels: list[Kernel], outputs: set[str]) -> list[Kernel]:
    """Kernels in an order where each runs after the kernels whose values it reads; a cycle among
    them (two kernels each reading what the other writes) denotes no runnable program."""
    writer = {cid: i for i, k in enumerate(kernels) for cid in k.roots}
    deps = [{writer[c] for c in k.read_values if c in writer and writer[c] != i} for i, k in enumerate(kernels)]
    for i, k in enumerate(kernels):
        if any(writer.get(c) == i for c in k.read_values):
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
