"""Bound weights in panels: a product streams its right operand one contiguous panel at a time.

The micro-kernel (targets/c/micro_kernel.py) walks a product's right operand B panel by panel: a
register block of P columns (48 f32: three 64-byte vectors) across every k, for each block of rows.
A weight laid out row-major (or in a block of its tile's rows, lowering/bind.py) puts the P
columns of consecutive k a whole row apart: each step of k reads 192 bytes and jumps 2-12 KB, and
a product of one row (a decoder step's) reads its weight at about half the bandwidth a contiguous
stream draws (docs/perf/2026-11-28-decode.md).

On a target whose weights are read in place (a cache: `Target.weights_in_place`), this pass lays
each bound weight a product reads as B out in panels, once, in the prologue that makes the bound
blocks: `B[.., k, j]` becomes `B_panels[.., j / P, k, j % P]`, and the product's nest

    for i { for k reduce { for j { C[.., i, j] += A(i, k) * B[.., k, j] } } }

becomes one nest per panel, each over one contiguous K x P region:

    for jp { for i { for k reduce { for j < P { C[.., i, P*jp + j] += A(i, k) * B_panels[.., jp, k, j] } } } }

which is the order the micro-kernel ran a left operand read where it is in already (`_panels`),
now with consecutive addresses. Only where every read of the weight is such a product's, its
columns are two or more whole panels (machine.panel_columns), and the left operand is read where it
is, or is one row of loads (a computed one is made once per block of rows, every panel inside: its
order stays, but a row read through div/mod, an attention's heads side by side, is only loads). No value
changes: each sum adds the same products in the same order.
"""

from __future__ import annotations

from dataclasses import replace

from ..engine.ir.program import dtype_bytes
from ..engine.schedule.machine import panel_columns, reads_left_in_place
from .bind import extend_prologue
from .loops import Buffer, For, Ix, Load, LoopKernel, LoopProgram, Stmt, Store, index_vars, leaves, loads, map_loads
from .matmul import ONE_ROW, MatmulNest, match_matmul


def lay_out_panels(program: LoopProgram) -> LoopProgram:
    """`program` with the products that read a bound weight as B reading it in panels (the module's
    docstring); the program itself when there is none."""
    bound = set(program.bound) | set(program.prologue.outputs if program.prologue else ())
    buffers = {b.name: b for b in program.params}
    dtype_of = {b.name: b.dtype for k in program.kernels for b in k.allocs}
    dtype_of.update({b.name: b.dtype for b in [*program.params, *program.intermediates, *program.output_buffers]})
    nests: dict[str, list[tuple[For, MatmulNest, int]]] = {}  # B -> (the product's statement, its nest, width)
    for k in program.kernels:
        for stmt, nest in _products(k.body, dtype_of):
            width = _panel_width(nest, bound, buffers)
            if width:
                nests.setdefault(nest.b.buffer, []).append((stmt, nest, width))
    reads = _read_counts(program)
    chosen = {name: found[0][2] for name, found in nests.items()
              if len({w for _, _, w in found}) == 1 and reads[name] == len(found)}
    if not chosen:
        return program
    panels = {name: Buffer(f"{name}_panels", "global", buffers[name].dtype, _panel_shape(buffers[name].shape, width))
              for name, width in chosen.items()}
    rewrites = {id(stmt): _in_panels(nest, chosen[name], panels[name].name)
                for name in chosen for stmt, nest, _ in nests[name]}
    kernels = [replace(k, body=_rewrite(k.body, rewrites)) for k in program.kernels]
    made = [_panel_kernel(buffers[name], panels[name], chosen[name]) for name in chosen]
    # a weight laid out is either bound or a block the prologue made: that block is then read only here
    prologue = extend_prologue(program, [buffers[n] for n in chosen if n in program.bound], made,
                               list(panels.values()), frozenset(chosen))
    kept = [b for b in program.params if b.name not in chosen]
    return replace(program, params=kept + list(panels.values()), kernels=kernels, prologue=prologue)


def _products(stmts: list[Stmt], dtype_of: dict[str, str]):
    """(statement, matmul nest) of the products in `stmts`, outermost first (not the nests inside
    one: its k loop alone is a product of one row too)."""
    for s in stmts:
        if isinstance(s, For):
            nest = match_matmul(s, dtype_of.__getitem__)
            if nest is not None:
                yield s, nest
            else:
                yield from _products(s.body, dtype_of)


def _panel_width(nest: MatmulNest, bound: set[str], buffers: dict[str, Buffer]) -> int | None:
    """The panel width of a product whose B is a whole bound weight's last two axes (k then j) and
    whose A is read where it is (or, for one row, is a row of loads); else None."""
    b = nest.b
    weight = buffers.get(b.buffer)
    if weight is None or b.buffer not in bound or nest.units:
        return None
    if b.index[-2:] != (Ix.var(nest.k.var), Ix.var(nest.j.var)) or weight.shape[-2:] != (nest.k.extent, nest.j.extent):
        return None
    if not isinstance(nest.a, Load) or not (reads_left_in_place([nest.a.index]) or nest.i.extent == 1):
        return None  # (a left operand read through div/mod is made once per panel: one row of loads)
    own = {nest.i.var, nest.k.var, nest.j.var}
    if any(own & index_vars(ix) for ix in b.index[:-2]):
        return None
    return panel_columns(nest.j.extent, dtype_bytes(weight.dtype))


def _read_counts(program: LoopProgram) -> dict[str, int]:
    """How many loads of each buffer the kernels hold (a load in an accumulator's own index counts too)."""
    counts: dict[str, int] = {}
    for k in program.kernels:
        for leaf in leaves(k.body):
            for ld in loads(leaf.value):
                counts[ld.buffer] = counts.get(ld.buffer, 0) + 1
    return counts


def _panel_shape(shape: tuple[int, ...], width: int) -> tuple[int, ...]:
    *lead, rows, columns = shape
    return (*lead, columns // width, rows, width)


def _panel_kernel(weight: Buffer, panels: Buffer, width: int) -> LoopKernel:
    """The prologue's nest storing `weight` in panels: panels[.., jp, k, j] = weight[.., k, width*jp + j]."""
    names = [f"p{d}" for d in range(len(panels.shape))]
    *lead, jp, k, j = (Ix.var(v) for v in names)
    value = Load(weight.name, (*lead, k, Ix.var(names[-3]) * width + j))
    stmt: Stmt = Store(panels.name, (*lead, jp, k, j), value)
    for var, extent in reversed(list(zip(names, panels.shape))):
        stmt = For(var, extent, "serial", [stmt])
    return LoopKernel(f"bind_{panels.name}", [], [stmt])


def _rewrite(stmts: list[Stmt], rewrites: dict[int, For]) -> list[Stmt]:
    """`stmts` with each statement `rewrites` holds (by identity) replaced by its rewrite."""
    out = []
    for s in stmts:
        if id(s) in rewrites:
            out.append(rewrites[id(s)])
        elif isinstance(s, For):
            out.append(For(s.var, s.extent, s.kind, _rewrite(s.body, rewrites)))
        else:
            out.append(s)
    return out


def _in_panels(nest: MatmulNest, width: int, name: str) -> For:
    """The nest as one nest per panel of B's columns (the module's docstring)."""
    i, k, j, acc = nest.i, nest.k, nest.j, nest.acc
    jp = f"{j.var}_panel"
    column = Ix.var(jp) * width + Ix.var(j.var)
    at = {j.var: column}
    b = Load(name, (*nest.b.index[:-2], Ix.var(jp), Ix.var(k.var), Ix.var(j.var)))

    def swap(ld: Load) -> Load:
        return b if ld == nest.b else ld

    leaf = replace(acc, index=tuple(ix.substitute(at) for ix in acc.index), value=map_loads(acc.value, swap))
    nest_ = For(k.var, k.extent, k.kind, [For(j.var, width, j.kind, [leaf])])
    if i.var != ONE_ROW:
        nest_ = For(i.var, i.extent, i.kind, [nest_])
    return For(jp, j.extent // width, "serial", [nest_])
