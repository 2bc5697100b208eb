"""Loops over a merged axis, split where their indices divide them.

A reshape merges axes ([1, 3072, 16, 16] <-> [1, 3072, 256]): a loop over the merged axis reads
the unmerged one as `v // 16` and `v % 16` (SegFormer's depthwise conv, computed for a tile of
tokens, reads its padded [18, 18] plane at `(4*p1o + r0 + p1 // 16, r1 + p1 % 16)`). A div and a
mod in every index keep the C compiler from vectorizing the loop, and cost two operations per
element. Where every div and mod of a loop's variable `v` (extent E) is `v // d` or `v % d` for
one d dividing E, the loop runs as two, `v_hi` over E / d and `v_lo` over d, with
`v = d * v_hi + v_lo`: the div and mod are gone, and the inner loop walks one row of the plane.
Divisors in a chain (`v // 49`, `(v // 7) % 7`, `v % 7`: a 7x7 conv's k over (channel, row,
column)) split it into a loop per digit the same way (`digits`, `split_digits`; the C backend's
micro-kernel walks a computed A's k so too). Elements are visited in the same order, so
nothing a later stage relies on changes but the indices' form.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from ..engine.schedule.index import FloorDiv, Indirect, Ix, Mod, simplify_in
from .loops import Accumulate, For, LoopProgram, Stmt, expr_vars, leaves, map_indices
from .matmul import match_matmul

# A reduction's loop is split only where it is innermost (one sum, max or min) and its innermost digit
# runs at least this many elements: a group norm's sums over [channels of a group, positions] that read
# a per-channel bias as `b[r // positions]` (a division per element: no vector), not a window's taps.
REDUCE_ROW = 64


def split_merged_loops(program: LoopProgram) -> LoopProgram:
    """`program` with its loops over merged axes split: serial loops, and an innermost reduction's
    where its digits are long (`REDUCE_ROW`: the same elements visited in the same order; the C
    backend's vector sums then reassociate each row's sum, as they did the one loop's, so its bits
    may differ within the tolerance); not a tile loop (the runtime hands them out), and no loop of a
    product's i / k / j nest, which the C backend runs as its register-blocked micro-kernel (split, a
    conv's k over taps-first rows would run one element at a time)."""
    kernels = []
    for k in program.kernels:
        buffers = {b.name: b for b in program.params + program.intermediates + program.output_buffers + k.allocs}
        kernels.append(replace(k, body=_stmts(k.body, {}, lambda name: buffers[name].dtype)))
    return replace(program, kernels=kernels)


def _stmts(stmts: list[Stmt], around: dict[str, int], dtype_of) -> list[Stmt]:
    out = []
    for s in stmts:
        if not isinstance(s, For) or match_matmul(s, dtype_of) is not None:
            out.append(s)
            continue
        inside = dict(around, **{s.var: s.extent})
        loop = For(s.var, s.extent, s.kind, _stmts(s.body, inside, dtype_of))
        chain = _divisor(loop) if loop.kind == "serial" or _long_sum(loop) else None
        if chain and loop.kind == "reduce" and chain[0] < REDUCE_ROW:
            chain = None
        out.append(_split(loop, chain, around) if chain else loop)
    return out


def _long_sum(loop: For) -> bool:
    """Whether `loop` is a reduction's innermost loop: its one statement an Accumulate."""
    return loop.kind == "reduce" and len(loop.body) == 1 and isinstance(loop.body[0], Accumulate)


def _divisor(loop: For) -> tuple[int, ...] | None:
    """The divisors every div and mod of the loop's variable is by (see `digits`); None where there
    are none, or the variable is read otherwise inside an atom or a gathered index."""
    found = [ix for leaf in leaves(loop.body) for ix in indices_in(leaf)]
    if any(isinstance(t, Indirect) and loop.var in expr_vars(t.value) for ix in found for t, _ in ix.terms):
        return None
    return digits(found, loop.var, loop.extent)


def indices_in(e) -> list[Ix]:
    """Every index `e` (a statement or an expression) holds, as `map_indices` visits them."""
    found: list[Ix] = []
    map_indices(e, lambda ix: found.append(ix) or ix)
    return found


def digits(indices, var: str, extent: int) -> tuple[int, ...] | None:
    """The chain d1 < d2 < ... (each dividing the next, the last dividing `extent`) at which `var`
    splits into digits (`var % d1`, `(var // d1) % (d2 / d1)`, ..., `var // dn`) when every div and
    mod of it in these indices is one of those (`var // d`, `var % d`, `(var // d) % e`: a reshape's
    split of a merged axis, a conv's k = (channel, row, column) of its window); None otherwise."""
    found: set[int] = set()
    ok = True
    bare = Ix.var(var)

    def visit(ix: Ix) -> None:
        nonlocal ok
        for t, _ in ix.terms:
            if not isinstance(t, (FloorDiv, Mod)):
                continue
            if t.x == bare:
                found.add(t.d)
            elif isinstance(t, Mod) and len(t.x.terms) == 1 and not t.x.const and t.x.terms[0][1] == 1 \
                    and isinstance(t.x.terms[0][0], FloorDiv) and t.x.terms[0][0].x == bare:
                found.update((t.x.terms[0][0].d, t.x.terms[0][0].d * t.d))
            elif var in set(t.x.axes()):
                ok = False
            else:
                visit(t.x)

    for ix in indices:
        visit(ix)
    chain = tuple(sorted(d for d in found if d < extent))
    if not ok or not chain or chain[0] < 2 or any(b % a for a, b in itertools.pairwise(chain)) or extent % chain[-1]:
        return None
    return chain


def split_digits(var: str, extent: int, chain: tuple[int, ...]) -> tuple[list[tuple[str, int]], Ix]:
    """The loops (name, extent), outermost first, that walk `var` digit by digit at `chain`, and `var`
    as their sum: `var_hi` over extent / dn outermost, then `var_d{n-1}` ... `var_lo` over d1."""
    bounds = (1, *chain, extent)
    names = [f"{var}_lo"] + [f"{var}_d{i}" for i in range(1, len(chain))] + [f"{var}_hi"]
    loops = [(names[i], bounds[i + 1] // bounds[i]) for i in range(len(names))]
    at = Ix.constant(0)
    for i, name in enumerate(names):
        at = at + Ix.var(name, bounds[i])
    return loops[::-1], at


def substituted(var: str, at: Ix, spans: dict[str, int]):
    """A rewrite of indices: `var` replaced by `at`, simplified where each axis ranges over its extent
    in `spans` (read when the rewrite runs; an axis not in it over any size)."""
    def span(a: str) -> tuple[int, int]:
        return (0, spans[a] - 1) if a in spans else (0, 2**62)

    def rewrite(ix: Ix) -> Ix:
        return simplify_in(ix.substitute({var: at}), span) if var in set(ix.axes()) else ix

    return rewrite


def _split(loop: For, chain: tuple[int, ...], around: dict[str, int]) -> For:
    loops, at = split_digits(loop.var, loop.extent, chain)
    spans = dict(around, **dict(loops))
    body = _rewrite(loop.body, substituted(loop.var, at, spans), spans)
    for name, n in reversed(loops):
        body = [For(name, n, loop.kind, body)]
    return body[0]


def _rewrite(stmts: list[Stmt], fn, spans: dict[str, int]) -> list[Stmt]:
    out = []
    for s in stmts:
        if isinstance(s, For):
            spans[s.var] = s.extent
            out.append(For(s.var, s.extent, s.kind, _rewrite(s.body, fn, spans)))
        else:
            out.append(map_indices(s, fn))
    return out
