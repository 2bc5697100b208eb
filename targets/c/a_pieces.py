"""A computed left operand whose k runs through a concat, made in one loop per piece of k.

A conv's product reads its windows as a concat of taps along k (the im2col), and its chunk of k as a
select on the chunk: `a_pre[r][k] = k / 64 < 2 ? (k / 64 < 1 ? x0[..] : x1[..]) : x2[..]` for every row and
k. The micro-kernel makes A once per block of rows (micro_kernel.py `_precompute_a`), rows inside
each k; with the selects every element ran the whole chain of compares and branches, as long as the
block's multiply-adds of that k on 64 output channels (ResNet-18's 3x3 convs at 38-44 GFLOP/s, a
Zen 3 core's peak about 100: docs/perf/2026-11-29-vision.md). Cut where k crosses each split (as
split.py cuts an innermost loop), every piece reads one operand with a plain load.

Only selects whose condition moves with k by a positive step, alone or through a floor quotient
(`k / 64 < 2` is `k < 128`), and with nothing else that moves inside the loop (the block's rows
are shifted copies of the row variable: a condition on it differs by row) are cut. Each element is
the same expression of the same loads: the same bits.
"""

from __future__ import annotations

from ...engine.schedule.index import FloorDiv
from ...lowering.loops import Checked, Ix, Op, Select, index_vars
from .split import replace_in

# At most this many pieces of k (each piece is the rows' expressions again): a 3x3 conv's chunk of
# k holds 3 taps; more would grow the C without a measured gain
MAX_PIECES = 8


def k_split(sel: Select, k: str, row: str) -> tuple[Ix, int] | None:
    """(x, s) with `sel`'s condition the same as `x < s`, x = c*k + rest moving with k by c > 0
    and rest with neither k nor the row variable; None where it is not such a condition."""
    ix, split = sel.ix, sel.split
    if ix.coef(k) > 0:
        rest = ix - Ix.var(k, ix.coef(k))
        return (ix, split) if not ({k, row} & index_vars(rest)) else None
    if len(ix.terms) != 1:  # a * (x // d) + const < split
        return None
    term, a = ix.terms[0]
    if not isinstance(term, FloorDiv) or a <= 0:
        return None
    x, d = term.x, term.d
    if x.coef(k) <= 0 or {k, row} & index_vars(x - Ix.var(k, x.coef(k))):
        return None
    # a * floor(x / d) + c0 < split  <=>  floor(x / d) < ceil((split - c0) / a)  <=>  x < d * that
    return x, d * -(-(split - ix.const) // a)


def first_select(e, k: str, row: str) -> tuple[Select, Ix, int] | None:
    """The first select in `e` that `k_split` can cut, with its condition as x < s."""
    if isinstance(e, Select):
        found = k_split(e, k, row)
        if found is not None:
            return (e, *found)
        return first_select(e.low, k, row) or first_select(e.high, k, row)
    if isinstance(e, Op):
        for arg in e.args:
            found = first_select(arg, k, row)
            if found is not None:
                return found
    if isinstance(e, Checked):
        return first_select(e.value, k, row)
    return None


def pieces(e, k: str, row: str, depth: int = 0) -> list[tuple[list[tuple[Ix, int, bool]], object]]:
    """The pieces of k: each (its bounds, as (x, s, high side?) conditions, and `e` on them with no
    cuttable select); [] where there would be more than MAX_PIECES."""
    found = first_select(e, k, row)
    if found is None:
        return [([], e)]
    if 2 ** (depth + 1) > MAX_PIECES:
        return []
    sel, x, s = found
    out = []
    for high, side in ((False, sel.low), (True, sel.high)):
        inner = pieces(replace_in(e, sel, side), k, row, depth + 1)
        if not inner:
            return []
        out += [([(x, s, high), *conds], value) for conds, value in inner]
    return out


def bounds(kernel, conds: list[tuple[Ix, int, bool]], k: str, start: str, end: str) -> tuple[str, str]:
    """C of the first and the end of the k that satisfy every condition, within start..end."""
    lo, hi = start, end
    for x, s, high in conds:
        c = x.coef(k)
        rest = x - Ix.var(k, c)
        # the first k with c*k + rest >= s: ceil((s - rest) / c), as split.open_cut writes it
        first = f"(({s} - ({kernel.ix(rest)})) + {c - 1}) / {c}" if c > 1 else f"{s} - ({kernel.ix(rest)})"
        cut = f"ST_CLAMP((int64_t)({first}), (int64_t)({start}), (int64_t)({end}))"
        if high:  # (k from the cut on)
            lo = f"({lo} > {cut} ? {lo} : {cut})" if lo != start else cut
        else:
            hi = f"({hi} < {cut} ? {hi} : {cut})" if hi != end else cut
    return lo, hi


def precompute_lines(kernel, a, k: str, row: str, rows: int, start: str, end: str, at: str, pad: str,
                     at_row) -> list[str] | None:
    """The rows-inside loops making a_pre[r][at] (C: k's position) = A at row r for k in start..end, one per piece;
    None where A has no select to cut (or too many)."""
    cut = pieces(a, k, row)
    if len(cut) < 2:
        return None
    lines = []
    for conds, value in cut:
        lo, hi = bounds(kernel, conds, k, start, end)
        lines.append(f"{pad}for (int64_t {k} = {lo}; {k} < {hi}; ++{k}) {{")
        for r in range(rows):
            lines.append(f"{pad}  {at_row(row, r, f'a_pre[{r}][{at}] = {kernel.expr(value)};')}")
        lines.append(f"{pad}}}")
    return lines
