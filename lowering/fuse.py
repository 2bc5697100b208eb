"""Row fusion: a tile's nests over the same rows become one loop over its rows.

Lowering writes a kernel's values one nest after the other, each over the
whole tile: a softmax tile of 64 rows takes its maximum (`for p0 .. { max
over r0 }`), then its exponentials (`for p0 .. { for p1 .. }`), their sum,
and the quotients, each a pass over the tile's 64 x 1024 values (256 KiB,
out of the first-level cache). Where every one of those nests runs over the
same row loop, and each row reads only what the same row of an earlier nest
wrote, their bodies run one row at a time instead: `for p0 { max;
exponentials; sum; quotients }`. A value then lives for one row, so a buffer
only those nests touch keeps one row (`[1, 1024]`: a row's 4 KiB stay in the
first-level cache, a row's maximum and sum are scalars the C keeps in
registers), on the stack.

A reduction over the rows joins the run too (a layer norm over the first
axis: `for r0 { sum += v[r0] }` after `for p0 { v[p0] = ... }`): its loop
becomes the row loop, each row adding its terms in the order the reduction's
own loop did, and a nest before it that the run does not touch (the sum's
initial value) moves ahead of the run.

Legal where every buffer the run's nests write is read and written by them
at the row the loop is on: the row variable, with coefficient 1, in one
dimension of its index (beside tile origins: `64*p0o + p0`), the same
dimension in every access, and in no other; or, not indexed by the row at
all, only accumulated into, by one nest of the run, and never read by it (a
sum over the rows).
Then no row reads another row's values, and fusing changes no value. Only
where on-chip memory is a cache (a scratchpad copies what a tile needs on
chip, not a row at a time).
"""

from __future__ import annotations

from dataclasses import replace

from .loops import (Accumulate, Buffer, For, Ix, LoopKernel, LoopProgram, Stmt, leaves, loads, map_indices,
                    map_leaf_loads, map_leaves)


def fuse_rows(program: LoopProgram) -> LoopProgram:
    """A new program whose kernels run each run of nests over the same rows as one row loop."""
    return replace(program, kernels=[_Fusion(k).run() for k in program.kernels])


class _Fusion:
    def __init__(self, kernel: LoopKernel):
        self.k = kernel
        self.allocs = {b.name: b for b in kernel.allocs}
        self.contracted: dict[str, set[int]] = {}  # on-chip buffer -> its row dimensions, now of one row

    def run(self) -> LoopKernel:
        body = self.stmts(self.k.body)
        if not self.contracted:
            return replace(self.k, body=body)
        body = [self.contract(s) for s in body]
        allocs = []
        for b in self.k.allocs:
            if b.name in self.contracted:
                shape = tuple(1 if d in self.contracted[b.name] else n for d, n in enumerate(b.shape))
                b = Buffer(b.name, "local", b.dtype, shape)  # one row of a tile: a temporary
            allocs.append(b)
        return replace(self.k, allocs=allocs, body=body)

    def stmts(self, stmts: list[Stmt]) -> list[Stmt]:
        """`stmts` with each run of consecutive nests over the same rows fused (inside tile loops)."""
        out: list[Stmt] = []
        i = 0
        while i < len(stmts):
            s = stmts[i]
            run, ahead = [s], []
            j = i + 1
            while j < len(stmts):
                if (nest := _over_rows(s, stmts[j])) is not None:
                    run.append(nest)
                elif j + 1 < len(stmts) and _over_rows(s, stmts[j + 1]) is not None and _apart(stmts[j], run):
                    ahead.append(stmts[j])  # (a reduction's initial value)
                else:
                    break
                j += 1
            fused = self.fused(run) if len(run) > 1 else None
            for loop in ahead + [fused] if fused is not None else stmts[i:j]:
                # inside tile loops, in turn; not inside a row loop (its nests fused again, per head
                # of attention, leave gcc's exponentials scalar)
                tiles = isinstance(loop, For) and loop.kind == "parallel"
                out.append(For(loop.var, loop.extent, loop.kind, self.stmts(loop.body)) if tiles else loop)
            i = j
        return out

    def fused(self, run: list[For]) -> For | None:
        """The run as one row loop, or None where a row would read another row's values."""
        row = run[0].var
        inside = [leaf for loop in run for leaf in leaves(loop.body)]
        nests: dict[str, set[int]] = {}  # buffer written -> the nests of the run writing it
        for k, loop in enumerate(run):
            for leaf in leaves([loop]):
                nests.setdefault(leaf.buffer, set()).add(k)
        written = set(nests)
        read = {ld.buffer for leaf in inside for ld in loads(leaf.value)}
        # sums over the rows: accumulated by one nest of the run alone (two nests adding to one sum
        # would interleave their terms), never stored to nor read by it
        summed = {name for name in written - read if len(nests[name]) == 1} - {
            leaf.buffer for leaf in inside if not isinstance(leaf, Accumulate)}
        dims: dict[str, int] = {}
        exact: dict[str, bool] = {}  # every access holds the row alone in its row dimension
        for name, index in _accesses(inside):
            if name not in written:
                continue
            found = [d for d, ix in enumerate(index) if ix.coef(row)]
            if not found and name in summed:  # a sum over the rows: each row adds its terms in turn
                continue
            if len(found) != 1 or index[found[0]].coef(row) != 1 or dims.setdefault(name, found[0]) != found[0]:
                return None
            exact[name] = exact.get(name, True) and index[found[0]] == Ix.var(row)
        elsewhere = {name for name, _ in _accesses([leaf for leaf in leaves(self.k.body)
                                                   if not any(leaf is x for x in inside)])}
        for name, d in dims.items():
            b = self.allocs.get(name)
            if b is not None and exact[name] and name not in elsewhere and b.shape[d] == run[0].extent:
                self.contracted.setdefault(name, set()).add(d)
        return For(row, run[0].extent, "serial", [s for loop in run for s in loop.body])

    def contract(self, s: Stmt) -> Stmt:
        """`s` with every access to a contracted buffer at its one row."""
        if isinstance(s, For):
            return For(s.var, s.extent, s.kind, [self.contract(b) for b in s.body])
        s = map_leaf_loads(s, lambda ld: replace(ld, index=self.at_row(ld.buffer, ld.index)))
        return replace(s, index=self.at_row(s.buffer, s.index))

    def at_row(self, name: str, index: tuple[Ix, ...]) -> tuple[Ix, ...]:
        rows = self.contracted.get(name, ())
        return tuple(Ix.constant(0) if d in rows else ix for d, ix in enumerate(index))


def _alike(a: Stmt, b: Stmt) -> bool:
    """Two loops over as many rows (more than one), neither a product's nest."""
    return (isinstance(a, For) and isinstance(b, For) and a.extent == b.extent > 1
            and not _product(a) and not _product(b))


def _same_rows(a: Stmt, b: Stmt) -> bool:
    return _alike(a, b) and a.kind == b.kind == "serial" and a.var == b.var


def _over_rows(a: Stmt, b: Stmt) -> For | None:
    """`b` as a nest over `a`'s rows: `b` itself where it runs over the same rows, a reduction over
    as many rows (its accumulators not indexed by its loop) with its loop read as `a`'s; else None."""
    if _same_rows(a, b):
        return b
    if not (_alike(a, b) and a.kind == "serial" and b.kind == "reduce"):
        return None
    inside = list(leaves([b]))
    if (not all(isinstance(leaf, Accumulate) and not any(ix.coef(b.var) for ix in leaf.index) for leaf in inside)
            or a.var in _bound(b.body)):  # (renamed, b's own loop of that name would capture it)
        return None
    row = {b.var: Ix.var(a.var)}
    return For(a.var, a.extent, "serial",
               map_leaves(b.body, lambda leaf: map_indices(leaf, lambda ix: ix.substitute(row))))


def _bound(stmts: list[Stmt]) -> set[str]:
    """The loop variables of every loop among `stmts` and inside them."""
    return {s.var for s in stmts if isinstance(s, For)} | {v for s in stmts if isinstance(s, For) for v in _bound(s.body)}


def _apart(s: Stmt, run: list[For]) -> bool:
    """Whether `s` may run before the nests of `run`: it writes nothing they read or write, and reads
    nothing they write."""
    mine, theirs = list(leaves([s])), [leaf for loop in run for leaf in leaves([loop])]
    written = {leaf.buffer for leaf in theirs}
    touched = {name for name, _ in _accesses(theirs)}
    return (not {leaf.buffer for leaf in mine} & touched
            and not {name for name, _ in _accesses(mine)} - {leaf.buffer for leaf in mine} & written)


def _product(loop: For) -> bool:
    """Whether the nest holds a product's multiply-accumulate: its rows stay one nest, which the C
    target blocks several rows at a time in registers (a row at a time, it would lose that)."""
    return any(isinstance(leaf, Accumulate) and leaf.unit == "matrix" for leaf in leaves([loop]))


def _accesses(leaf_list) -> list[tuple[str, tuple[Ix, ...]]]:
    """(buffer, index) of every write and read of the leaves."""
    return [(leaf.buffer, leaf.index) for leaf in leaf_list] + [
        (ld.buffer, ld.index) for leaf in leaf_list for ld in loads(leaf.value)]
