"""A computed left operand whose k runs through a concat, made in one loop per piece of k.

A conv's product reads its windows as a concat of taps along k (the im2col), and its chunk of k as a
select on the chunk: `a_pre[r][k] = k / 64 < 2 ? (k / 64 < 1 ? x0[..] : x1[..]) : x2[..]` for every row and
k. The micro-kernel makes A once per block of rows (micro_kernel.py `precompute_a`), rows inside
each k; with the selects every element ran the whole chain of compares and branches, as long as the
block's multiply-adds of that k on 64 output channels (ResNet-18's 3x3 convs at 38-44 GFLOP/s, a
Zen 3 core's peak about 100: docs/perf/2026-11-29-vision.md). Cut where k crosses each split (as
split.py cuts an innermost loop), every piece reads one operand with a plain load.

Selects whose condition moves with k by a positive step, alone or through a floor quotient
(`k / 64 < 2` is `k < 128`), are cut where k crosses them. A condition constant between the
multiples of a quotient's divisor (a padded conv's tap `((192 * r0o + k) / 128) % 3 < 2`, the
chunk's `r0o / 2 < 1`, which does not move with k at all) is decided once per segment of k between
those multiples, the segment's pieces chosen by an `if` (ResNet-18's 3x3 convs whose windows read
a padded input, k in chunks of 192: 4-17% faster each, the convs 101.0 -> 94.8 ms at 1 thread: the
same loops built with and without, docs/perf/2026-11-29-vision.md). Conditions on the row variable
(the block's rows are shifted copies of it: the condition differs by row) stay selects, and what is
below them is not cut. Each element is the same expression of the same loads: the same bits.
"""

from __future__ import annotations

from ...engine.schedule.index import FloorDiv, Mod
from ...lowering.loops import Checked, Ix, Op, Select, index_vars
from .split import replace_in

# At most this many pieces of k (each piece is the rows' expressions again): a 3x3 conv's windows
# are 9 (3 taps along k within a chunk, 3 chosen by the chunk); more would grow the C unmeasured
MAX_PIECES = 16


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
    if not isinstance(term, FloorDiv) or a <= 0 or not _affine_in(term.x, k, row):
        return None
    x, d = term.x, term.d
    # a * floor(x / d) + c0 < split  <=>  floor(x / d) < ceil((split - c0) / a)  <=>  x < d * that
    return x, d * -(-(split - ix.const) // a)


def _affine_in(x: Ix, k: str, row: str) -> bool:
    """x = c*k + rest with c > 0 and rest free of k and the row variable."""
    return x.coef(k) > 0 and not ({k, row} & index_vars(x - Ix.var(k, x.coef(k))))


def segments(ix: Ix, k: str, row: str) -> frozenset[tuple[Ix, int]] | None:
    """The (x, d) whose multiples of d (as x moves with k) bound the segments of k on which `ix` is
    constant (none: constant throughout); None where it moves with k or the row variable otherwise."""
    out: set = set()
    for t, _ in ix.terms:
        if isinstance(t, str):
            if t in (k, row):
                return None
        elif isinstance(t, FloorDiv) and _affine_in(t.x, k, row):
            out.add((t.x, t.d))
        elif isinstance(t, (FloorDiv, Mod)):  # a quotient or remainder of something constant on segments
            inner = segments(t.x, k, row)
            if inner is None:
                return None
            out |= inner
        else:  # a gather's index
            return None
    return frozenset(out)


def first_select(e, k: str, row: str):
    """The first select in `e` that is cut: ("cut", sel, x, s) for one cut where k crosses x < s,
    ("segment", sel, bounds) for one constant on segments of k; None where there is none."""
    if isinstance(e, Select):
        found = k_split(e, k, row)
        if found is not None:
            return ("cut", e, *found)
        bounds = segments(e.ix, k, row)
        # (a select left as it is keeps what is below it: cut there, each piece holds it again)
        return ("segment", e, bounds) if bounds is not None else None
    if isinstance(e, Op):
        for arg in e.args:
            found = first_select(arg, k, row)
            if found is not None:
                return found
    if isinstance(e, Checked):
        return first_select(e.value, k, row)
    return None


def _tree(e, k: str, row: str, budget: list[int]):
    """`e`'s decision tree: ("leaf", e) or (found, low tree, high tree); None past MAX_PIECES leaves."""
    found = first_select(e, k, row)
    if found is None:
        budget[0] -= 1
        return ("leaf", e) if budget[0] >= 0 else None
    sel = found[1]
    low = _tree(replace_in(e, sel, sel.low), k, row, budget)
    high = _tree(replace_in(e, sel, sel.high), k, row, budget) if low is not None else None
    return None if high is None else (found, low, high)


def _bounds(tree) -> set:
    """The segments' bounds of every segment select in the tree."""
    if tree[0] == "leaf":
        return set()
    found, low, high = tree
    return (set(found[2]) if found[0] == "segment" else set()) | _bounds(low) | _bounds(high)


def precompute_lines(kernel, a, k: str, row: str, rows: int, start: str, end: str, at: str, pad: str,
                     at_row) -> list[str] | None:
    """The rows-inside loops making a_pre[r][at] (C: k's position) = A at row r for k in start..end,
    one per piece (within segments of k where some condition is constant per segment); None where A
    has no select to cut (or too many)."""
    tree = _tree(a, k, row, [MAX_PIECES])
    if tree is None or tree[0] == "leaf":
        return None
    lines: list[str] = []
    bounds = sorted(_bounds(tree), key=str)
    if bounds:  # segments: st_kp .. st_kn - 1, cut at the next multiple of each divisor
        lines.append(f"{pad}for (int64_t st_kp = {start}, st_kn; st_kp < {end}; st_kp = st_kn) {{")
        lines.append(f"{pad}  st_kn = {end};")
        for x, d in bounds:
            c = x.coef(k)
            rest = kernel.ix(x - Ix.var(k, c))
            here = kernel.ix(x.substitute({k: Ix.var("st_kp")}))
            # the first k with c*k + rest >= d * (floor(x(st_kp) / d) + 1)
            lines.append(f"{pad}  {{ const int64_t st_kb = ({d} * (({here}) / {d} + 1) - ({rest}) + {c - 1}) / {c}; "
                         f"if (st_kb < st_kn) st_kn = st_kb; }}")
        _emit(kernel, tree, k, row, rows, "st_kp", "st_kn", at, pad + "  ", at_row, lines, True)
        lines.append(f"{pad}}}")
    else:
        _emit(kernel, tree, k, row, rows, start, end, at, pad, at_row, lines, False)
    return lines


def _emit(kernel, tree, k, row, rows, lo, hi, at, pad, at_row, lines, segmented) -> None:
    if tree[0] == "leaf":
        lines.append(f"{pad}for (int64_t {k} = {lo}; {k} < {hi}; ++{k}) {{")
        for r in range(rows):
            lines.append(f"{pad}  {at_row(row, r, f'a_pre[{r}][{at}] = {kernel.expr(tree[1])};')}")
        lines.append(f"{pad}}}")
        return
    found, low, high = tree
    if found[0] == "segment":  # decided at the segment's first k (constant over it)
        sel = found[1]
        here = sel.ix.substitute({k: Ix.var("st_kp")}) if segmented else sel.ix
        lines.append(f"{pad}if ({kernel.ix(here)} < {sel.split}) {{")
        _emit(kernel, low, k, row, rows, lo, hi, at, pad + "  ", at_row, lines, segmented)
        lines.append(f"{pad}}} else {{")
        _emit(kernel, high, k, row, rows, lo, hi, at, pad + "  ", at_row, lines, segmented)
        lines.append(f"{pad}}}")
        return
    _, _, x, s = found
    c = x.coef(k)
    rest = x - Ix.var(k, c)
    # the first k with c*k + rest >= s: ceil((s - rest) / c), kept inside lo..hi (as split.open_cut writes it)
    first = f"(({s} - ({kernel.ix(rest)})) + {c - 1}) / {c}" if c > 1 else f"{s} - ({kernel.ix(rest)})"
    cut = f"st_kc{len(lines)}"
    lines.append(f"{pad}{{ const int64_t {cut} = ST_CLAMP((int64_t)({first}), (int64_t)({lo}), (int64_t)({hi}));")
    _emit(kernel, low, k, row, rows, lo, cut, at, pad + "  ", at_row, lines, segmented)
    _emit(kernel, high, k, row, rows, cut, hi, at, pad + "  ", at_row, lines, segmented)
    lines.append(f"{pad}}}")
