"""Loops over a merged axis, split where their indices divide them.

A reshape merges axes ([1, 3072, 16, 16] <-> [1, 3072, 256]): a loop over the merged axis reads
the unmerged one as `v // 16` and `v % 16` (SegFormer's depthwise conv, computed for a tile of
tokens, reads its padded [18, 18] plane at `(4*p1o + r0 + p1 // 16, r1 + p1 % 16)`). A div and a
mod in every index keep the C compiler from vectorizing the loop, and cost two operations per
element. Where every div and mod of a loop's variable `v` (extent E) is `v // d` or `v % d` for
one d dividing E, the loop runs as two, `v_hi` over E / d and `v_lo` over d, with
`v = d * v_hi + v_lo`: the div and mod are gone, and the inner loop walks one row of the plane.
Elements are visited in the same order, so
nothing a later stage relies on changes but the indices' form.
"""

from __future__ import annotations

from dataclasses import replace

from ..engine.schedule.index import FloorDiv, Indirect, Ix, Mod, simplify_in
from .loops import For, LoopProgram, Stmt, expr_vars, leaves, map_indices
from .matmul import match_matmul


def split_merged_loops(program: LoopProgram) -> LoopProgram:
    """`program` with its loops over merged axes split: serial loops only, not a tile loop (the
    runtime hands them out) nor a reduction's, and no loop of a product's i / k / j nest, which the
    C backend runs as its register-blocked micro-kernel (split, a conv's k over taps-first rows would
    run one element at a time)."""
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
        d = _divisor(loop) if loop.kind == "serial" else None
        out.append(_split(loop, d, around) if d else loop)
    return out


def _divisor(loop: For) -> int | None:
    """The one d every div and mod of the loop's variable is by (each of the bare variable), when
    it divides the extent; None otherwise, or when the variable is read inside a gathered index."""
    found: set[int] = set()
    ok = True

    def visit(ix: Ix) -> Ix:
        nonlocal ok
        for t, _ in ix.terms:
            if isinstance(t, (FloorDiv, Mod)):
                if t.x == Ix.var(loop.var):
                    found.add(t.d)
                elif loop.var in set(t.x.axes()):
                    ok = False
                else:
                    visit(t.x)
            elif isinstance(t, Indirect) and loop.var in expr_vars(t.value):
                ok = False
        return ix

    for leaf in leaves(loop.body):
        map_indices(leaf, visit)
    if not ok or len(found) != 1:
        return None
    (d,) = found
    return d if 1 < d < loop.extent and loop.extent % d == 0 else None


def _split(loop: For, d: int, around: dict[str, int]) -> For:
    hi, lo = f"{loop.var}_hi", f"{loop.var}_lo"
    spans = dict(around, **{hi: loop.extent // d, lo: d})
    at = {loop.var: Ix.var(hi, d) + Ix.var(lo)}

    def span(a: str) -> tuple[int, int]:
        return (0, spans[a] - 1) if a in spans else (0, 2**62)

    def rewrite(ix: Ix) -> Ix:
        return simplify_in(ix.substitute(at), span) if loop.var in set(ix.axes()) else ix

    body = _rewrite(loop.body, rewrite, spans)
    return For(hi, loop.extent // d, loop.kind, [For(lo, d, loop.kind, body)])


def _rewrite(stmts: list[Stmt], fn, spans: dict[str, int]) -> list[Stmt]:
    out = []
    for s in stmts:
        if isinstance(s, For):
            spans[s.var] = s.extent
            out.append(For(s.var, s.extent, s.kind, _rewrite(s.body, fn, spans)))
        else:
            out.append(map_indices(s, fn))
    return out
