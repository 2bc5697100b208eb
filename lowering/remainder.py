"""The remainder tile of a symbolic axis: tiles of `t` along an axis of extent `n` (a symbol) leave
`n - t * (n // t)` positions after the whole tiles, between 0 and t - 1 of them.

The plan tiles a symbolic axis in powers of two (engine/schedule/plan.py `divisors`), with no tile
count known at compile time. Lowering writes the tile loop over the whole tiles, `for p0o in
0..n // t`, and after it the *tail*: the same body once more with the tile loop's variable at
`n // t` and every loop over the axis inside the tile running over what is left, in a tile loop
of one tile. One compiled kernel serves every size; at a size `t` divides, the tail's loops run
zero times (a tile that divides the axis at every size, `t` of `t * n`, has no tail).

It is the last pass: the passes before it (forwarding, fusion, merged allocations) shape the tile's
body once, and the tail is a copy of what they made. (A kernel with a remainder is not pipelined:
engine/schedule/plan.py.)
"""

from __future__ import annotations

from ..engine.ir.extent import Extent, dim_of
from ..engine.schedule.index import Ix
from .loops import For, LoopKernel, LoopProgram, Stmt, map_indices_deep


def remainder_tiles(program: LoopProgram) -> LoopProgram:
    """Each kernel's tile loops along symbolic axes (`LoopKernel.remainders`) followed by their tails."""
    for k in program.kernels:
        for axis, tile, extent in k.remainders:
            k.body = _after(k.body, axis, tile, extent, k.tails)
    return program


def _after(stmts: list[Stmt], axis: str, t: int, extent: int, tails: list) -> list[Stmt]:
    out: list[Stmt] = []
    for s in stmts:
        if isinstance(s, For) and s.var == axis + "o":
            # a loop of one tile, of the tile loop's kind: a parallel one is a tile of its own, with
            # its own on-chip buffers (targets/c/tiles.py), not statements beside the tiles; where
            # that tile is only the tile loops of the axes inside, those loops are the remainder's
            # (its column tiles spread over the cores as the whole tiles' do)
            rest = tail(s.body, axis, t, extent)
            inner = len(rest) == 1 and isinstance(rest[0], For) and rest[0].kind == "parallel" == s.kind
            added = rest if inner else [For(s.var, 1, s.kind, rest)]
            tails.extend(added)
            out += [s] + added
        elif isinstance(s, For):
            out.append(For(s.var, s.extent, s.kind, _after(s.body, axis, t, extent, tails)))
        else:
            out.append(s)
    return out


def tail(stmts: list[Stmt], axis: str, tile: int, extent: int) -> list[Stmt]:
    """`stmts` (a tile loop's body along `axis`, tiled by `tile`, of symbolic `extent`) for the
    remainder tile."""
    whole = extent // tile
    # what is left: at most tile - 1, the value the printers' decisions take it at (its value at the
    # planning size, often 0, would tell them nothing)
    rest = Extent(dim_of(extent - tile * whole), tile - 1)
    at = {axis + "o": Ix.constant(whole)}

    def stmt(s: Stmt) -> Stmt:
        if isinstance(s, For):
            n = rest if s.var == axis and s.extent == tile else s.extent
            return For(s.var, n, s.kind, [stmt(b) for b in s.body])
        # (every index, those inside a gather's index value too: an iota's position read there)
        return map_indices_deep(s, lambda ix: ix.substitute(at))

    return [stmt(s) for s in stmts]


def whole_tiles(k: LoopKernel) -> list[Stmt]:
    """`k`'s body without its remainder tiles (the loops `remainder_tiles` added)."""
    tails = {id(s) for s in k.tails}

    def keep(stmts: list[Stmt]) -> list[Stmt]:
        return [For(s.var, s.extent, s.kind, keep(s.body)) if isinstance(s, For) else s
                for s in stmts if id(s) not in tails]

    return keep(k.body)
