"""A reduction's loops over consecutive elements run as one loop.

A reduction over several axes walks them as nested loops: group norm written with a 5-D reshape
(`mean(reshape(x, [N, G, C/G, H, W]), axes=[2, 3, 4])`) sums each group's 2048 elements as
`for r0 in 0..8 { for r1 in 0..16 { for r2 in 0..16 reduce ... } }`. The C vectorizes the
innermost loop: 16 elements a time, each time the accumulator loaded, its lanes combined and
stored again (0.124 ms where one loop of 2048 took 0.05). Where two nested reduce loops `a` (outer,
extent na) and `b` (extent nb) are only each other's body, and every access inside reads its buffer
at a flat address (the C's, lowering/loops.py `flat_index`) that takes them as `nb*c*a + c*b`, the
two run as one loop `a` over na*nb, reading `a // nb` and `a % nb` where they read `a` and `b`: the
flat addresses take those digits back to `c*a` (index.py `flat_address`), so the C walks one run of
consecutive elements. The elements are summed in the same order. A product's loops (the matrix
unit's, and the micro-kernel's), loops reading through a gathered index, a pipelined kernel's loops
and loops of a symbolic extent are left as they are; it runs after the remainder tiles are made
(lowering/remainder.py copies a tile's loops over what whole tiles leave of a symbolic axis).
"""

from __future__ import annotations

from dataclasses import replace

from ..engine.ir.extent import is_symbolic
from ..engine.schedule.index import FloorDiv, Indirect, Ix, Mod
from .loops import Accumulate, For, Lit, Load, LoopProgram, Op, Stmt, flat_index, leaves, loads, map_indices


def merge_reduce_loops(program: LoopProgram) -> LoopProgram:
    """`program` with each pair of nested reduce loops over consecutive elements run as one."""
    kernels = []
    for k in program.kernels:
        if k.pipelined:  # (the C runs a pipelined kernel's row loops as overlap.py found them)
            kernels.append(k)
            continue
        buffers = {b.name: b for b in program.params + program.intermediates + program.output_buffers + k.allocs}
        rebuilt: dict[int, For] = {}
        body = _stmts(k.body, lambda name: buffers[name].shape, rebuilt)
        # (the remainder tiles are known by identity, lowering/remainder.py: a rebuilt one stays one)
        kernels.append(replace(k, body=body, tails=[rebuilt.get(id(t), t) for t in k.tails]))
    return replace(program, kernels=kernels)


def _stmts(stmts: list[Stmt], shape_of, rebuilt: dict[int, For]) -> list[Stmt]:
    out = []
    for s in stmts:
        if isinstance(s, For):
            old = s
            s = For(s.var, s.extent, s.kind, _stmts(s.body, shape_of, rebuilt))
            while _mergeable(s, shape_of):
                s = _merge(s)
            rebuilt[id(old)] = s
        out.append(s)
    return out


def _mergeable(loop: For, shape_of) -> bool:
    if loop.kind != "reduce" or len(loop.body) != 1:
        return False
    inner = loop.body[0]
    if not isinstance(inner, For) or inner.kind != "reduce":
        return False
    a, b, nb = loop.var, inner.var, inner.extent
    if is_symbolic(loop.extent) or is_symbolic(nb):
        return False  # (a remainder tile's loop: its extent is what is left of a symbolic axis)
    for leaf in leaves(inner.body):
        if not isinstance(leaf, Accumulate) or leaf.unit != "vector" or not _plain(leaf.value):
            return False
        for name, index in [(leaf.buffer, leaf.index)] + [(ld.buffer, ld.index) for ld in loads(leaf.value)]:
            flat = flat_index(index, shape_of(name))
            if any(not isinstance(t, str) and {a, b} & set(t.axes()) for t, _ in flat.terms):
                return False
            if any(isinstance(t, Indirect) for ix in index for t, _ in ix.terms):
                return False
            if flat.coef(a) != nb * flat.coef(b):
                return False
    return True


def _plain(e) -> bool:
    """Loads, literals and arithmetic alone (no concat's select, gather's check or index value)."""
    if isinstance(e, Op):
        return all(map(_plain, e.args))
    return isinstance(e, (Load, Lit))


def _merge(loop: For) -> For:
    inner = loop.body[0]
    a, b, nb = loop.var, inner.var, inner.extent
    at = {a: Ix.var(FloorDiv(Ix.var(a), nb)), b: Ix.var(Mod(Ix.var(a), nb))}
    body = [map_indices(s, lambda ix: ix.substitute(at)) if not isinstance(s, For) else _substitute(s, at)
            for s in inner.body]
    return For(a, loop.extent * nb, "reduce", body)


def _substitute(loop: For, at: dict[str, Ix]) -> For:
    return For(loop.var, loop.extent, loop.kind,
               [_substitute(s, at) if isinstance(s, For) else map_indices(s, lambda ix: ix.substitute(at))
                for s in loop.body])
