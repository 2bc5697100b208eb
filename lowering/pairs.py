"""Bound byte weights laid out in pairs of k: an integer product reads its right operand's 16-bit pairs
with one widening load (targets/c/int_pairs.py).

MatMulInteger's product with a bound i8 or u8 weight (less a literal zero point for u8), as lowering
writes it, packs each tile's widened weight first (the cast makes B a computed operand) and then
multiplies:

    for k { for j { pack[k, j] = cast(w[.., k, j]) } }                   (i32: 4 bytes an element)
    for i { for k reduce { for j { C[.., i, j] += A(i, k) * pack[k, j] } } }

and a product on `vpmaddwd` makes B's pairs of k from the pack again (targets/c/int_rows.py): two
passes over the tile's B on every call, per tile and chunk of k, for what the weight's bytes fix
once. This pass lays the bytes out once, in the prologue that makes the bound blocks
(lowering/bind.py), so that a panel of W columns is one run along k and each column's two k of a
pair sit side by side:

    w_pairs[.., j // W, k // 2, j % W, k % 2] = w[.., k, j]

and the product reads `cast(w_pairs[..])` where it read the pack (the pack and its nest are gone).
A vector of lanes columns at a pair of k is then 2 x lanes consecutive bytes: `vpmovsxbw` (or
`vpmovzxbw`, and the zero point by `vpsubw`) gives the 16-bit pairs `vpmaddwd` multiplies by. W is
two of the machine's vectors of 32-bit lanes (16 columns at 32 bytes, 32 at 64): the register
block's panel. Bytes are moved, none changed; the plain loops and the numpy executor read them
through the new index and compute what they computed.

Only where K is even and the columns whole panels, the extents static, the weight (or its hoisted
block) bound, and the machine's vectors 32 or 64 bytes (lowering/passes.py): elsewhere the pack stays.
"""

from __future__ import annotations

from dataclasses import replace

from ..engine.ir.extent import is_symbolic
from ..engine.schedule.index import floordiv, indirect, mod, simplify, symbolic
from .bind import extend_prologue
from .loops import (
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
    leaves,
    loads,
    map_loads,
    perfect_nest,
)
from .matmul import match_matmul
from .overlap import stages, tile_loops

BYTES = ("i8", "u8")


def lay_out_pairs(program: LoopProgram, columns: int) -> LoopProgram:
    """`program` with the packs of its integer products' bound byte weights replaced by reads of
    blocks laid out in pairs of k, panels of `columns` (the module's docstring); the program itself
    when there is none."""
    if not program.bound:
        return program
    layout = _Layout(program, columns)
    kernels = [layout.kernel(k) for k in program.kernels]
    if not layout.made:
        return program
    read = {ld.buffer for k in kernels for leaf in leaves(k.body) for ld in loads(leaf.value)}
    made_before = set(program.prologue.outputs) if program.prologue else set()
    consumed = frozenset(n for n in layout.sources if n in made_before and n not in read)
    sources = [layout.buffers[n] for n in layout.sources if n in program.bound]
    prologue = extend_prologue(program, sources, layout.kernels, layout.made, consumed)
    kept = [b for b in program.params if b.name not in layout.sources or b.name in read]
    return replace(program, params=kept + layout.made, kernels=kernels, prologue=prologue)


class _Layout:
    def __init__(self, program: LoopProgram, columns: int):
        self.columns = columns
        self.buffers = {b.name: b for b in program.params}
        self.globals = {b.name: b for b in program.params + program.intermediates + program.output_buffers}
        self.bound = set(program.bound) | set(program.prologue.outputs if program.prologue else ())
        self.made: list[Buffer] = []
        self.kernels: list[LoopKernel] = []
        self.sources: list[str] = []  # the bound buffers a block is made from
        self.blocks: dict[tuple, str] = {}  # (source, index, outer loops, K, N) -> its block

    def kernel(self, k: LoopKernel) -> LoopKernel:
        self.name = k.name
        self.allocs = {b.name: b for b in k.allocs}
        self.readers = _read_counts(k.body)
        self.dropped: set[str] = set()
        body = self.stmts(k.body, [])
        made = replace(k, body=body, allocs=[b for b in k.allocs if b.name not in self.dropped])
        on_chip = {b.name for b in made.allocs}
        if made.pipelined and any(stages(lp, on_chip) is None for lp in tile_loops(made)):
            made = replace(made, pipelined=False)  # (its reads' stage was the pack: lowering/overlap.py)
        return made

    def stmts(self, stmts: list[Stmt], around: list[For]) -> list[Stmt]:
        out = list(stmts)
        for at, s in enumerate(stmts):
            if isinstance(s, For):
                out[at] = For(s.var, s.extent, s.kind, self.stmts(s.body, around + [s]))
        for at, s in enumerate(out):
            made = self.product(out, at, around)
            if made is not None:
                pack_at, product = made
                out[at] = product
                out[pack_at] = None
        return [s for s in out if s is not None]

    def product(self, stmts: list, at: int, around: list[For]) -> tuple[int, For] | None:
        """(the pack's place, the product reading the laid-out block) where stmts[at] is an i32 product
        whose B is a pack of a bound byte weight made by an earlier statement of `stmts`; else None."""
        s = stmts[at]
        if not isinstance(s, For):
            return None
        dtype_of = self.dtype_of
        nest = match_matmul(s, dtype_of)
        if nest is None or dtype_of(nest.acc.buffer) != "i32" or nest.b.buffer not in self.allocs:
            return None
        pack = nest.b.buffer
        if self.readers.get(pack, 0) != 1:
            return None
        writer = [i for i, t in enumerate(stmts[:at]) if isinstance(t, For) and _writes(t, pack)]
        if len(writer) != 1:
            return None
        value = _pack_value(stmts[writer[0]], pack, nest.b.index)
        if value is None:
            return None
        source = _byte_read(value)
        n_k, n_j = nest.k.extent, nest.j.extent
        if (source is None or source.buffer not in self.bound or source.buffer not in self.buffers
                or self.buffers[source.buffer].dtype not in BYTES or any(is_symbolic(x) for x in (n_k, n_j)) or n_k % 2 or n_j % self.columns):
            return None
        if any(indirect(ix) or symbolic(ix) for ix in source.index):
            return None
        outer = {lp.var: lp for lp in around}
        used = expr_vars(source) - {nest.k.var, nest.j.var}
        if not used <= outer.keys() or any(is_symbolic(outer[v].extent) for v in used):
            return None
        read = self.block(source, nest.k, nest.j, [lp for lp in around if lp.var in used])
        b = map_loads(value, lambda ld: read if ld == source else ld)
        acc = nest.acc
        v = acc.value
        args = tuple(b if arg is nest.b else arg for arg in v.args)
        product = _replace_leaf(s, replace(acc, value=Op(v.op, args, v.dtype)))
        self.dropped.add(pack)
        return writer[0], product

    def dtype_of(self, name: str) -> str:
        return self.allocs[name].dtype if name in self.allocs else self.globals[name].dtype

    def block(self, ld: Load, k: For, j: For, outer: list[For]) -> Load:
        """The read of `ld` from its block laid out in pairs (made in the prologue once for every such read)."""
        w = self.columns
        inner = (j.extent // w, k.extent // 2, w, 2)
        key = (ld.buffer, ld.index, tuple((lp.var, lp.extent) for lp in outer), k.var, j.var, k.extent, j.extent)
        if key not in self.blocks:
            name = f"{ld.buffer}_{self.name}_pairs{len(self.blocks)}"
            source = self.buffers[ld.buffer]
            names = [f"pr{d}" for d in range(len(inner))]
            panel, pair, column, half = (Ix.var(n) for n in names)
            at = {j.var: panel * w + column, k.var: pair * 2 + half}
            extents = {lp.var: lp.extent for lp in outer} | dict(zip(names, inner))
            index = tuple(simplify(ix.substitute(at), extents.__getitem__) for ix in ld.index)
            stmt: Stmt = Store(name, tuple(Ix.var(v) for v in extents), Load(ld.buffer, index))
            for var, extent in reversed(list(extents.items())):
                stmt = For(var, extent, "serial", [stmt])
            self.kernels.append(LoopKernel(f"bind_{name}", [], [stmt]))
            self.made.append(Buffer(name, "global", source.dtype, tuple(extents.values())))
            if ld.buffer not in self.sources:
                self.sources.append(ld.buffer)
            self.blocks[key] = name
        extents = {j.var: j.extent, k.var: k.extent}
        jv, kv = Ix.var(j.var), Ix.var(k.var)
        tail = (floordiv(jv, w, extents.__getitem__), floordiv(kv, 2, extents.__getitem__),
                mod(jv, w, extents.__getitem__), mod(kv, 2, extents.__getitem__))
        return Load(self.blocks[key], tuple(Ix.var(lp.var) for lp in outer) + tail)


def _read_counts(stmts: list[Stmt]) -> dict[str, int]:
    """How many statements read each buffer."""
    out: dict[str, int] = {}
    for leaf in leaves(stmts):
        for name in {ld.buffer for ld in loads(leaf.value)}:
            out[name] = out.get(name, 0) + 1
    return out


def _writes(s: For, name: str) -> bool:
    return any(leaf.buffer == name for leaf in leaves([s]))


def _pack_value(s: For, pack: str, read: tuple[Ix, ...]):
    """The value the nest `s` stores in `pack` at the index `read` (the product's read of it), when
    `s` is one nest storing the whole pack at its own loops' variables, else None."""
    nest = perfect_nest(s)
    if nest is None:
        return None
    loops, leaf = nest
    own = [_var(ix) for ix in leaf.index]
    if not (isinstance(leaf, Store) and leaf.buffer == pack and len(own) == len(read) == len(loops)
            and set(own) == {lp.var for lp in loops}):
        return None
    at = dict(zip(own, read))
    return map_loads(leaf.value, lambda ld: Load(ld.buffer, tuple(ix.substitute(at) for ix in ld.index)))


def _var(ix: Ix) -> str | None:
    """The loop an index is, when it is one loop's variable alone."""
    if ix.const == 0 and len(ix.terms) == 1 and isinstance(ix.terms[0][0], str) and ix.terms[0][1] == 1:
        return ix.terms[0][0]
    return None


def _byte_read(value) -> Load | None:
    """The byte load `value` widens: `cast(w, i32)`, or that less or plus an integer literal."""
    if isinstance(value, Op) and value.op in ("sub", "add") and value.dtype == "i32" and len(value.args) == 2:
        x, z = value.args
        if not (isinstance(z, Lit) and z.dtype == "i32" and not isinstance(z.value, bool)
                and float(z.value).is_integer()):
            return None
        value = x
    if (isinstance(value, Op) and value.op == "cast" and value.dtype == "i32" and len(value.args) == 1
            and isinstance(value.args[0], Load)):
        return value.args[0]
    return None


def _replace_leaf(s: Stmt, leaf: Stmt) -> Stmt:
    """`s` (a chain of loops around one statement) with `leaf` as that statement."""
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, [_replace_leaf(s.body[0], leaf)])
    return leaf
