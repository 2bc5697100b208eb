"""Updating in place: a temporary made element for element from one nothing reads afterwards takes its place.

A tile's values often go through a chain of temporaries, each computed from the
last element for element: a layer norm over the first axis makes `a = x + x`
on chip, then `d = a - mean(a)`, and from then on reads only `d`. Liveness
(lowering/liveness.py) keeps both buffers live through the statement that turns
one into the other, so the merged allocation gives them separate bytes: twice
the tile's footprint, and a second pass of lines through the cache. This pass
writes `d` over `a` instead: the statement becomes `a[i] = a[i] - m[i]` and
every later read of `d` reads `a` (layernorm_large, 2 threads: 0.95x the time,
its tile's buffers 512 -> 256 KiB).

A buffer B takes the place of a buffer A (both on chip, one dtype and shape)
when one Store `B[i] = f(..., A[i], ...)` is, within its region (the outermost
loop around it below the tiles, liveness's rule 3):

- A's last use: A is read at no index but the stored one in that Store, and no
  other statement of the region, nor any after it, touches A;
- B's first: no statement before the region touches B, and no other statement
  of the region writes it;
- one write per element: the loops around it in the region store each element
  of B at most once (an affine index whose coefficients, by size, each exceed
  the span of the smaller ones).

Each element of A is then read, in the one statement, just before the same
element is written with B's value, and never read as A again. Tile loops need
nothing: each tile has its own copy of the kernel's buffers. A chain folds
into one buffer (c from b from a: all three in a's bytes).
"""

from __future__ import annotations

from dataclasses import replace

from ..engine.schedule.index import affine
from .liveness import buffers_touched, placed_leaves, region_spans
from .loops import (
    Buffer,
    For,
    Load,
    LoopKernel,
    LoopProgram,
    Stmt,
    Store,
    flat_index,
    loads,
    map_leaf_loads,
    map_leaves,
)


def update_in_place(program: LoopProgram) -> LoopProgram:
    """A new program in which each temporary that can take its operand's place does."""
    return replace(program, kernels=[_kernel(k) for k in program.kernels])


def _kernel(kernel: LoopKernel) -> LoopKernel:
    while True:
        pair = _pair(kernel)
        if pair is None:
            return kernel
        b, a = pair
        kernel = replace(kernel, allocs=[x for x in kernel.allocs if x.name != b],
                         body=_rename(kernel.body, b, a))


def _pair(kernel: LoopKernel) -> tuple[str, str] | None:
    """(B, A): the first buffer B that may take the place of A, or None."""
    leaves = placed_leaves(kernel)
    on_chip = {b.name: b for b in kernel.allocs}
    span = region_spans(leaves)
    touched: dict[str, list[int]] = {}  # buffer -> the leaves touching it, in order
    written: dict[str, list[int]] = {}
    for i, (leaf, _, _) in enumerate(leaves):
        for name in buffers_touched(leaf):
            touched.setdefault(name, []).append(i)
        written.setdefault(leaf.buffer, []).append(i)
    for at, (leaf, region, loops) in enumerate(leaves):
        b = on_chip.get(leaf.buffer)
        if not isinstance(leaf, Store) or b is None or not _each_element_once(leaf, b, loops):
            continue
        first, last = span[region] if region is not None else (at, at)
        if touched[b.name][0] < first or any(first <= i <= last and i != at for i in written[b.name]):
            continue  # B touched before the region, or written beside this statement in it
        reads = list(loads(leaf.value))  # those inside gathered indices too
        for a in dict.fromkeys(on_chip.get(ld.buffer) for ld in reads):
            if (a is not None and a.name != b.name and (a.dtype, a.shape) == (b.dtype, b.shape)
                    and all(ld.index == leaf.index for ld in reads if ld.buffer == a.name)
                    and all(i < first or i == at for i in touched[a.name])):  # A's last use
                return b.name, a.name
    return None


def _each_element_once(leaf: Store, buffer: Buffer, loops: tuple[For, ...]) -> bool:
    """Whether the loops around `leaf` store each element of `buffer` at most once."""
    if not all(affine(ix) for ix in leaf.index):
        return False
    flat = flat_index(leaf.index, buffer.shape)
    span = 0
    for coef, extent in sorted((abs(flat.coef(u.var)), u.extent) for u in loops if u.extent > 1):
        if coef <= span:
            return False
        span += coef * (extent - 1)
    return True


def _rename(stmts: list[Stmt], old: str, new: str) -> list[Stmt]:
    def load(ld: Load) -> Load:
        return Load(new, ld.index) if ld.buffer == old else ld

    def leaf(s):
        s = map_leaf_loads(s, load)
        return replace(s, buffer=new) if s.buffer == old else s

    return map_leaves(stmts, leaf)
