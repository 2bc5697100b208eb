"""Bound 4-bit weights laid out for 8-lane products: eight columns' nibbles side by side.

A product of one row reading a 4-bit weight dequantized where it is read (targets/c/nibble_dot.py)

    for k reduce { for j { C[.., j] += A(k) * ((cast(bitand(shr(b[j, k // 2], (k % 2) * 4), 15)) - Z) * S[j, k // 32]) } }

reads each column's bytes along k, two nibbles a byte. On a machine whose vectors are 8 floats
(AVX2) the recognizer summing such a column unpacks each 16 bytes into four vectors of 8 k, with
shifts, masks and conversions, and adds the four across lanes: about four vector instructions per
8 weights. This pass lays the bytes out once, in the prologue that makes the bound blocks
(lowering/bind.py), so that one 32-bit lane holds 8 nibbles of one column (k = 8w .. 8w + 7, the
column's own 4 bytes in their order) and 8 columns' lanes sit side by side, 32 bytes a word; the
recognizer sums SPAN groups of 8 columns at a time (4, or 2 or 1 where the groups do not divide by
4), and their words of one block of 32 k follow one another, so that it reads one stream:

    b_nibbles[.., j // (8 SPAN), k // 32, (j // 8) % SPAN, (k // 8) % 4, j % 8, (k // 2) % 4] = b[j, k // 2]

A mask then gives 8 columns' weights at one k with no shuffle (the recognizer's laid-out form).
A scale read once per block of 32 (`S[j, k // 32]`) is laid out likewise, 8 columns' scales of a
block side by side, where that takes no more bytes than the scales as given (a block of 64 would
repeat each scale): `S_nibbles[.., j // (8 SPAN), k // 32, (j // 8) % SPAN, j % 8]`. (Groups one
after another, each its own run along K, made 4 streams where the sums read one: 20-30% slower
when the weights come from memory, in a C harness of the 768 x 2304 product.)

Each byte and each scale is moved, not changed: the weight stays half a byte an element, and the
program computes what it computed (the numpy executor reads the blocks through the new index). Only
for products whose K is whole blocks of 32 and whose columns are whole groups of 8 (anything else
keeps its layout and the recognizer's other forms), only of bound weights (a parameter the caller
passes changes every call), and only where the machine's vectors are 32 bytes (lowering/passes.py):
AVX-512's form looks nibbles up in a 16-entry table and reads the weight as given.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..engine.ir.extent import is_symbolic
from ..engine.schedule.index import floordiv, indirect, mod, simplify, symbolic
from .bind import extend_prologue
from .execute import TileRun
from .loops import (
    Accumulate,
    Buffer,
    For,
    Ix,
    Lit,
    Load,
    LoopKernel,
    LoopProgram,
    Op,
    Stmt,
    Store,
    expr_vars,
    flat_index,
    index_loads,
    index_vars,
    leaves,
    loads,
    map_loads,
)

GROUP = 8  # columns side by side: a 32-bit lane each
BLOCK = 32  # k per block of the layout (a scale's, at the finest)
WORD = 8  # k a lane holds: four bytes, two nibbles each
SPANS = (4, 2, 1)  # groups of 8 columns the recognizer sums together (targets/c/nibble_dot.py), widest first


def lay_out_nibbles(program: LoopProgram) -> LoopProgram:
    """`program` with the 4-bit weights (and their scales) of its one-row products read from blocks
    laid out as the module's docstring says; the program itself when there is none."""
    if not program.bound:
        return program
    layout = _Layout(program)
    kernels = [replace(k, body=layout.stmts(k.body, [], k.name)) for k in program.kernels]
    if not layout.made:
        return program
    read = {ld.buffer for k in kernels for leaf in leaves(k.body) for ld in loads(leaf.value)}
    read |= {ld.buffer for k in kernels for leaf in leaves(k.body) for ix in leaf.index for ld in index_loads(ix)}
    prologue = extend_prologue(program, [layout.buffers[n] for n in layout.sources], layout.kernels, layout.made)
    kept = [b for b in program.params if b.name not in layout.sources or b.name in read]
    return replace(program, params=kept + layout.made, kernels=kernels, prologue=prologue)


class _Layout:
    def __init__(self, program: LoopProgram):
        self.buffers = {b.name: b for b in program.params}
        self.bound = set(program.bound)
        self.made: list[Buffer] = []
        self.kernels: list[LoopKernel] = []
        self.sources: list[str] = []  # the bound parameters a block is made from
        self.blocks: dict[tuple, str] = {}  # (source, index, loops) -> its block

    def stmts(self, stmts: list[Stmt], around: list[For], kernel: str) -> list[Stmt]:
        out = []
        for s in stmts:
            if isinstance(s, For):
                s = self.product(s, around, kernel) or For(s.var, s.extent, s.kind,
                                                             self.stmts(s.body, around + [s], kernel))
            out.append(s)
        return out

    def product(self, k: For, around: list[For], kernel: str) -> For | None:
        """`k` reading its nibbles (and scales) from laid-out blocks when it is such a product; else None."""
        if not (k.kind == "reduce" and isinstance(k.extent, int) and k.extent % BLOCK == 0 and len(k.body) == 1):
            return None
        j = k.body[0]
        if not (isinstance(j, For) and isinstance(j.extent, int) and j.extent % GROUP == 0 and len(j.body) == 1
                and isinstance(j.body[0], Accumulate)):
            return None
        acc = j.body[0]
        v = acc.value
        if not (acc.op == "sum" and isinstance(v, Op) and v.op == "mul" and v.dtype == "f32" and len(v.args) == 2):
            return None
        weights = [e for e in v.args if j.var in expr_vars(e)]
        if len(weights) != 1:
            return None
        nibbles = [ld for ld in _nibble_reads(weights[0], k.var) if self.takes(ld, k, j, around, 2)]
        if len(nibbles) != 1:
            return None
        scales = [ld for ld in loads(weights[0]) if self.buffers.get(ld.buffer) is not None
                  and self.buffers[ld.buffer].dtype == "f32" and self.takes(ld, k, j, around, BLOCK)]
        read = self.block(nibbles[0], k, j, around, kernel, nibbles=True)
        if read is None:
            return None
        moved = {nibbles[0]: read} | {ld: self.block(ld, k, j, around, kernel, nibbles=False) for ld in scales}
        moved = {ld: to for ld, to in moved.items() if to is not None}
        return For(k.var, k.extent, k.kind, [For(j.var, j.extent, j.kind, [
            replace(acc, value=map_loads(v, lambda ld: moved.get(ld, ld)))])])

    def takes(self, ld: Load, k: For, j: For, around: list[For], every: int) -> bool:
        """A read of a bound parameter, by j and k and loops around, that reads one element for
        `every` consecutive k from a multiple of `every` (2: a byte of two nibbles; BLOCK: a block's
        scale), and a different one for each column."""
        if ld.buffer not in self.bound or ld.buffer not in self.buffers:
            return False
        if any(indirect(ix) or symbolic(ix) for ix in ld.index):
            return False
        used = expr_vars(ld)
        outer = {lp.var: lp for lp in around}
        if not ({j.var, k.var} <= used and used - {j.var, k.var} <= outer.keys()):
            return False
        if any(is_symbolic(outer[v].extent) for v in used - {j.var, k.var}):
            return False
        flat = flat_index(ld.index, self.buffers[ld.buffer].shape)
        js, ks = np.arange(j.extent)[:, None], np.arange(k.extent)[None, :]
        at = _at(flat, {j.var: js, k.var: ks})
        start = _at(flat, {j.var: js, k.var: ks - ks % every})
        return bool(np.array_equal(at, start) and len(np.unique(at[:, 0])) == j.extent)

    def block(self, ld: Load, k: For, j: For, around: list[For], kernel: str, nibbles: bool) -> Load | None:
        """The read of `ld` from its laid-out block (made in the prologue once for every such read);
        None where the block would take more bytes than its source."""
        used = expr_vars(ld) - {j.var, k.var}
        outer = [lp for lp in around if lp.var in used]
        groups, blocks = j.extent // GROUP, k.extent // BLOCK
        span = next(n for n in SPANS if groups % n == 0)
        inner = ((groups // span, blocks, span, BLOCK // WORD, GROUP, WORD // 2) if nibbles
                 else (groups // span, blocks, span, GROUP))
        source = self.buffers[ld.buffer]
        shape = tuple(lp.extent for lp in outer) + inner
        if int(np.prod(shape)) > int(np.prod(source.shape)):
            return None
        key = (ld.buffer, ld.index, tuple((lp.var, lp.extent) for lp in outer), j.extent, k.extent, nibbles)
        if key not in self.blocks:
            name = f"{ld.buffer}_{kernel}_nibbles{len(self.blocks)}"
            block = Buffer(name, "global", source.dtype, shape)
            names = [f"nb{d}" for d in range(len(inner))]
            g, w1, gi, *rest = (Ix.var(n) for n in names)
            if nibbles:
                w2, c, m = rest
                at = {j.var: g * (GROUP * span) + gi * GROUP + c, k.var: w1 * BLOCK + w2 * WORD + m * 2}
            else:
                (c,) = rest
                at = {j.var: g * (GROUP * span) + gi * GROUP + c, k.var: w1 * BLOCK}
            extents = {lp.var: lp.extent for lp in outer} | dict(zip(names, inner))
            index = tuple(simplify(ix.substitute(at), extents.__getitem__) for ix in ld.index)
            stmt: Stmt = Store(name, tuple(Ix.var(lp.var) for lp in outer) + tuple(Ix.var(n) for n in names),
                               Load(ld.buffer, index))
            for var, extent in reversed(list(extents.items())):
                stmt = For(var, extent, "serial", [stmt])
            self.kernels.append(LoopKernel(f"bind_{name}", [], [stmt]))
            self.made.append(block)
            if ld.buffer not in self.sources:
                self.sources.append(ld.buffer)
            self.blocks[key] = name
        extents = {j.var: j.extent, k.var: k.extent}
        jv, kv = Ix.var(j.var), Ix.var(k.var)
        spans = floordiv(jv, GROUP * span, extents.__getitem__)
        group = mod(floordiv(jv, GROUP, extents.__getitem__), span, extents.__getitem__)
        column, block_of_k = mod(jv, GROUP, extents.__getitem__), floordiv(kv, BLOCK, extents.__getitem__)
        if nibbles:
            word = mod(floordiv(kv, WORD, extents.__getitem__), BLOCK // WORD, extents.__getitem__)
            byte = mod(floordiv(kv, 2, extents.__getitem__), WORD // 2, extents.__getitem__)
            tail = (spans, block_of_k, group, word, column, byte)
        else:
            tail = (spans, block_of_k, group, column)
        return Load(self.blocks[key], tuple(Ix.var(lp.var) for lp in outer) + tail)


def _nibble_reads(e, k: str):
    """The loads `e` reads as `bitand(shr(load, shift), 15)` in u8 with a shift that is 0 at even k
    and 4 at odd k."""
    if not isinstance(e, Op):
        return
    if e.op == "bitand" and e.dtype == "u8" and len(e.args) == 2:
        shifted, mask = e.args
        if (isinstance(mask, Lit) and mask.value == 15 and isinstance(shifted, Op) and shifted.op == "shr"
                and isinstance(shifted.args[0], Load) and _alternates(shifted.args[1], k)):
            yield shifted.args[0]
            return
    for a in e.args:
        yield from _nibble_reads(a, k)


def _alternates(shift, k: str) -> bool:
    """`shift` is an expression of literals and k alone whose value is (k % 2) * 4 (over two k)."""
    if any(True for _ in loads(shift)) or expr_vars(shift) - {k}:
        return False
    ks = np.arange(4, dtype=np.int64)
    with np.errstate(all="ignore"):
        got = TileRun({}, set()).expr(shift, {k: ks}, {})
    return bool(np.array_equal(np.broadcast_to(got, ks.shape), (ks % 2) * 4))


def _at(flat: Ix, grid: dict) -> np.ndarray:
    """`flat` over the grid's variables, every other at 0."""
    return np.asarray(TileRun({}, set()).index(flat, {v: 0 for v in index_vars(flat)} | grid, {}))
