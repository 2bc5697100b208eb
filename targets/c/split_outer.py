"""A loop around a loop nest whose statement reads a concat along the outer loop, written as one loop per
piece, each piece's nest reading only its own operand (a STATEMENTS recognizer; split.py cuts an
innermost loop the same way).

`for h { for w { out[..] = h < 1 ? pad[..] : h < 113 ? f(x[..]) : pad[..] } }`, the input of a 3x3
conv or pool padded along its rows, chose a side at every element: the selects kept the inner loop
from vectorizing, and a value with a branch of its own (a ReLU6's NaN-aware max and min) ran as
branches that mispredicted on half the elements (figures: docs/perf/2026-11-28-vision.md). Cut where
the outer variable crosses each split, every piece's nest holds one side, and the inner loop is again
plain (or split.py's along its own variable). Only selects whose condition moves with the outer
variable alone are cut here (a condition that also moves with an inner variable has no single
crossing point).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...lowering.loops import Accumulate, For, Ix, Store, index_vars
from .emit import KernelWriter
from .split import open_cut, replace_select, select_on

# At most this many pieces: a pad's borders and middle are 3; each piece copies the nest, and an im2col's
# concats of taps along the outer loop, cut too, made ResNet-18's C more than gcc compiled in 300 s
MAX_PIECES = 4


@dataclass(frozen=True)
class Plan:
    loop: For
    taken: int = 1


def chain(s: For) -> tuple[list[For], Store | Accumulate] | None:
    """The loops of `s`'s body down to its one leaf (each loop's only statement the next), and the leaf."""
    inner, loops = s.body, []
    while len(inner) == 1 and isinstance(inner[0], For):
        loops.append(inner[0])
        inner = inner[0].body
    if not loops or len(inner) != 1 or not isinstance(inner[0], (Store, Accumulate)):
        return None
    return loops, inner[0]


def outer_select(s: For):
    """The first select of the leaf that moves with `s.var` (by a positive step) and no inner variable."""
    found = chain(s)
    if found is None:
        return None
    loops, leaf = found
    sel = select_on(leaf.value, s.var)
    if sel is None:
        return None
    rest = sel.ix - Ix.var(s.var, sel.ix.coef(s.var))
    return None if index_vars(rest) & {f.var for f in loops} else sel


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    s = stmts[at]
    if not (isinstance(s, For) and s.kind != "parallel" and 1 < count(s) <= MAX_PIECES):
        return None
    if isinstance(chain(s)[1], Accumulate):  # (a product over windows of taps: the micro-kernel's, which
        return None                          # packs the windows' rows; cut, the strided conv lost its a_pre)
    return Plan(s)


def count(loop: For) -> int:
    """How many pieces `pieces` cuts `loop` into (1: none)."""
    sel = outer_select(loop)
    if sel is None:
        return 1
    _, leaf = chain(loop)
    return sum(count(with_leaf(loop, replace_select(leaf, sel, side))) for side in (sel.low, sel.high))


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    pieces(w, plan.loop, "0", str(plan.loop.extent), pad, loops)


def with_leaf(s: For, leaf) -> For:
    """`s` with the leaf of its chain replaced."""
    body = s.body[0]
    return For(s.var, s.extent, s.kind, [with_leaf(body, leaf) if isinstance(body, For) else leaf])


def pieces(w: KernelWriter, loop: For, start: str, end: str, pad: str, loops: tuple[For, ...]) -> None:
    """`loop` over start..end-1, cut where its first outer select changes sides, each piece cut again."""
    sel = outer_select(loop)
    if sel is None:
        w.lines.append(f"{pad}for (int64_t {loop.var} = {start}; {loop.var} < {end}; ++{loop.var}) {{")
        w.block(loop.body, len(pad) // 2 + 1, loops + (loop,))
        w.lines.append(f"{pad}}}")
        return
    _, leaf = chain(loop)
    cut = open_cut(w, sel, loop.var, start, end, pad)
    pieces(w, with_leaf(loop, replace_select(leaf, sel, sel.low)), start, cut, pad + "  ", loops)
    pieces(w, with_leaf(loop, replace_select(leaf, sel, sel.high)), cut, end, pad + "  ", loops)
    w.lines.append(f"{pad}}}")
