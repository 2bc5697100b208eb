"""A loop over a tile of merged positions that reads them as `(a + v) // d` and `(a + v) % d`, with a
sum over taps inside it, written as one loop per row segment with the taps outside (a STATEMENTS
recognizer).

`for p { for r2 { for r3 { acc[c, p] += x[c, r2 + (a + p) // W, r3 + (b + p) % W] * w[c, r2, r3] } } }`,
a depthwise conv computed for a tile of positions that does not start or end on a row (MobileNetV2's
first blocks: 392 positions, three and a half rows of 112), divides and takes a remainder at every
tap of every position, and its innermost loop runs over the 3 taps: nothing vectorizes
(lowering/delinearize.py splits such a loop only where d divides its extent and the tile starts
on a row). Here the positions run in segments that stay on one row, cut at run time where `a + v`
crosses a multiple of d: within one the quotient is a constant and the remainder moves with v, and
the taps' loops go outside the segment, so the innermost loop walks a row of x contiguously and
vectorizes. A loop over one row already (delinearize's `p1_lo`, the same sum over taps inside it)
gets its taps outside too, as one segment. Taken where every read moving with the loop moves by one
element or two (a stride-2 conv) and rows are at least MIN_ROW_VECTORS vectors long. Each element still adds its taps in the same order
(only the order across elements changes), so the bits are the loops'.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...engine.ir.program import dtype_bytes
from ...engine.schedule.index import FloorDiv, Ix, Mod, affine
from ...lowering.loops import Accumulate, For, Load, index_vars, loads, map_indices
from .emit import KernelWriter

# Rows shorter than this many of the machine's vectors stay as written: over MobileNetV2's 7- and
# 14-position rows at 16 lanes the taps' nine passes over a short row were slower than the taps inside
# (docs/perf/2026-11-28-vision.md); its 28-position rows at 8 lanes are faster with them outside
# (docs/perf/2026-11-29-vision.md)
MIN_ROW_VECTORS = 2


@dataclass(frozen=True)
class Plan:
    loop: For
    taps: tuple[For, ...]  # the loops inside it, outermost first
    leaf: Accumulate
    atoms: tuple  # the FloorDiv and Mod of the loop's variable, in order
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    s = stmts[at]
    if not (isinstance(s, For) and s.kind == "serial" and isinstance(s.extent, int) and len(s.body) == 1):
        return None
    taps, inner = [], s.body[0]
    while isinstance(inner, For) and len(inner.body) == 1 and isinstance(inner.extent, int):
        taps.append(inner)
        inner = inner.body[0]
    if not (taps and isinstance(inner, Accumulate) and inner.op == "sum"):
        return None
    tap_vars = {t.var for t in taps}
    if (any(t.kind == "parallel" for t in taps) or not all(affine(ix) for ix in inner.index)
            or any(ix.coef(s.var) for ix in inner.index[:-1]) or inner.index[-1].coef(s.var) != 1
            or set().union(*(index_vars(ix) for ix in inner.index)) & tap_vars
            or any(ld.buffer == inner.buffer for ld in loads(inner.value))):
        return None  # each element's own accumulator, read by nothing else: the loops may be reordered
    atoms = row_atoms(s.var, tap_vars, list(loads(inner.value)))
    if atoms is None or (atoms[0].d if atoms else s.extent) < min_row(w.vector_bytes, w.buffers[inner.buffer].dtype):
        return None
    # taps outside pay only where the innermost loop then reads rows: every read moving with the
    # loop moves by one element, or two (a stride-2 conv's); a sum along a row read in columns
    # would read a line per element
    names = segment_names(atoms, s.var)
    value = map_indices(inner.value, lambda ix: ix.map_atoms(lambda t: names.get(t, Ix.var(t))))
    for ld in loads(value):
        flat = w.flat_index(ld.buffer, ld.index)
        if not affine(flat) or flat.coef(s.var) not in (0, 1, 2):
            return None
    if not any(w.flat_index(ld.buffer, ld.index).coef(s.var) for ld in loads(value)):
        return None
    return Plan(s, tuple(taps), inner, tuple(atoms))


def min_row(vector_bytes: int, dtype: str) -> int:
    """The shortest row whose taps go outside: MIN_ROW_VECTORS of the machine's vectors of `dtype`."""
    return MIN_ROW_VECTORS * vector_bytes // dtype_bytes(dtype)


def segment_names(atoms, var: str) -> dict:
    """Each atom as the emitted C names it: `st_q{i}` the quotient at the segment's start, and the
    remainder `st_r{i}` there plus how far `var` has gone into the segment."""
    return {t: Ix.var(f"st_q{i}") if isinstance(t, FloorDiv) else Ix.var(f"st_r{i}") + Ix.var(var) - Ix.var("st_s")
            for i, t in enumerate(atoms)}


def row_atoms(var: str, tap_vars: set[str], reads: list[Load]) -> list | None:
    """The distinct `(a + var) // d` and `(a + var) % d` of the reads' indices (one d, `a` free of
    `var` and the taps); None if some index divides `var` otherwise (or inside another atom)."""
    found: dict = {}
    d = None
    for ld in reads:
        for ix in ld.index:
            for t, _ in ix.terms:
                if isinstance(t, str):
                    continue
                if var not in t.axes():
                    continue
                if not (isinstance(t, (FloorDiv, Mod)) and affine(t.x) and t.x.coef(var) == 1
                        and not (index_vars(t.x - Ix.var(var)) & (tap_vars | {var})) and d in (None, t.d)):
                    return None
                d = t.d
                found.setdefault(t, None)
    return list(found)


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    v, n = plan.loop.var, plan.loop.extent
    add = w.lines.append
    d = plan.atoms[0].d if plan.atoms else 0
    add(f"{pad}for (int64_t st_s = 0, st_e; st_s < {n}; st_s = st_e) {{")
    inner = pad + "  "
    names = segment_names(plan.atoms, v)
    ends = []
    for i, t in enumerate(plan.atoms):  # each atom's quotient and remainder at the segment's start
        add(f"{inner}const int64_t st_n{i} = {w.ix(t.x.substitute({v: Ix.var('st_s')}))}, "
            f"st_q{i} = st_n{i} / {d}, st_r{i} = st_n{i} % {d};")
        ends.append(f"st_s + {d} - st_r{i}")
    # the segment ends where the first of them crosses a multiple of d (they move together), or at n
    add(f"{inner}st_e = {n};")
    for e in ends:
        add(f"{inner}if ({e} < st_e) st_e = {e};")

    def rewrite(ix: Ix) -> Ix:
        return ix.map_atoms(lambda t: names.get(t, Ix.var(t)))

    leaf = replace(plan.leaf, value=map_indices(plan.leaf.value, rewrite))
    for tap in plan.taps:
        add(f"{inner}for (int64_t {tap.var} = 0; {tap.var} < {tap.extent}; ++{tap.var}) {{")
        inner += "  "
    add(f"{inner}for (int64_t {v} = st_s; {v} < st_e; ++{v}) {w.leaf(leaf)}")
    for _ in plan.taps:
        inner = inner[:-2]
        add(f"{inner}}}")
    add(f"{pad}}}")
