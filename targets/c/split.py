"""An innermost loop whose statement reads a concat along it, written as one loop per piece, each
reading only its own operand: no select per element, no index out of range, and it vectorizes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...lowering.loops import Accumulate, Checked, For, Ix, Op, Select, Store, index_vars
from . import strided_row, vector_loop
from .emit import KernelWriter


@dataclass(frozen=True)
class Plan:
    loop: For
    leaf: Store | Accumulate
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    s = stmts[at]
    if not (isinstance(s, For) and s.kind != "parallel" and len(s.body) == 1
            and isinstance(s.body[0], (Store, Accumulate))):
        return None
    leaf = s.body[0]
    if select_on(leaf.value, s.var) is None:
        return None
    return Plan(s, leaf)


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    pieces(w, plan.loop, plan.leaf, "0", str(plan.loop.extent), pad)


def pieces(w: KernelWriter, loop: For, leaf, start: str, end: str, pad: str) -> None:
    """`loop` over start..end-1, cut where its first select changes sides, each piece cut again."""
    sel = select_on(leaf.value, loop.var)
    if sel is None:
        row = vector_loop.piece(w, loop, leaf)
        if row is not None:  # a piece of exponentials (a padded SiLU's row): in vectors
            vector_loop.plain_row(w, row, start, end, pad)
            return
        value = strided_row.vector_row(w, loop, leaf) if strided_row.enabled(w) else None
        if value is not None:  # a piece reading along another axis: in gathers
            w.lines += strided_row.row_lines(w, loop.var, leaf, value, start, end, pad)
            return
        w.lines.append(f"{pad}for (int64_t {loop.var} = {start}; {loop.var} < {end}; ++{loop.var}) " + w.leaf(leaf))
        return
    cut = open_cut(w, sel, loop.var, start, end, pad)
    pieces(w, loop, replace_select(leaf, sel, sel.low), start, cut, pad + "  ")
    pieces(w, loop, replace_select(leaf, sel, sel.high), cut, end, pad + "  ")
    w.lines.append(f"{pad}}}")


def open_cut(w: KernelWriter, sel: Select, var: str, start: str, end: str, pad: str) -> str:
    """Open a block declaring where `var` (over start..end-1) crosses to `sel`'s high side; its name."""
    c = sel.ix.coef(var)
    rest = sel.ix - Ix.var(var, c)
    cut = f"cut_{var}_{len(w.lines)}"
    # the first i with c*i + rest >= split: ceil((split - rest) / c), kept inside [start, end]
    first = f"(({sel.split} - ({w.ix(rest)})) + {c - 1}) / {c}" if c > 1 else f"{sel.split} - ({w.ix(rest)})"
    w.lines.append(f"{pad}{{ int64_t {cut} = ST_CLAMP((int64_t)({first}), (int64_t)({start}), (int64_t)({end}));")
    return cut


def select_on(e, var: str):
    """The first Select in `e` whose condition moves with `var` by a positive step (splittable)."""
    if isinstance(e, Select):
        if var in index_vars(e.ix) and e.ix.coef(var) > 0 and var not in index_vars(e.ix - Ix.var(var, e.ix.coef(var))):
            return e
        return select_on(e.low, var) or select_on(e.high, var)
    if isinstance(e, Op):
        for a in e.args:
            found = select_on(a, var)
            if found is not None:
                return found
    if isinstance(e, Checked):
        return select_on(e.value, var)
    return None


def replace_select(leaf, sel: Select, by):
    """`leaf` with the Select `sel` (by identity) replaced by one of its sides."""
    if isinstance(leaf, Store):
        return Store(leaf.buffer, leaf.index, replace_in(leaf.value, sel, by))
    return dataclasses.replace(leaf, value=replace_in(leaf.value, sel, by))


def replace_in(e, sel: Select, by):
    """Expression `e` with the Select `sel` (by identity) replaced by `by`."""
    if e is sel:
        return by
    if isinstance(e, Op):
        return Op(e.op, tuple(replace_in(a, sel, by) for a in e.args), e.dtype)
    if isinstance(e, Select):
        return Select(e.ix, e.split, replace_in(e.low, sel, by), replace_in(e.high, sel, by), e.dtype)
    if isinstance(e, Checked):
        return Checked(e.check, replace_in(e.value, sel, by))
    return e
