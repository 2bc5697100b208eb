"""The matmul nests lowering writes, recognized in loop IR:

    for i serial { for k reduce { for j serial { C[.., i, j] += mul(A(i, k), B[.., k, j]) } } }

with j contiguous in C and B; a product of one row (a decoder step's) may have no i loop at all:
`for k reduce { for j serial { C[.., j] += mul(A(k), B[.., k, j]) } }` is read as the nest of a
row loop of one iteration named ONE_ROW, which no index reads. The C backend turns such a nest
into its register-blocked micro-kernel (targets/c/micro_kernel.py); lowering's passes leave its
loops as they are (lowering/delinearize.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..engine.schedule.index import affine
from .loops import Accumulate, Checked, For, Ix, Load, Op, Select, index_vars, loads, map_indices

BLOCKED_DTYPES = ("f32", "f64", "i32")  # the accumulators a register-blocked micro-kernel is written for
ONE_ROW = "st_one_row"  # the row loop of a product written without one


@dataclass(frozen=True)
class MatmulNest:
    i: For
    k: For
    j: For
    acc: Accumulate
    a: object  # the factor without j (an expression)
    b: Load  # the factor contiguous along j
    units: tuple[str, ...] = ()  # loops of one iteration between i, k and j: constant 0


def match_matmul(stmt, dtype_of, shape_of=None) -> MatmulNest | None:
    """The i / k / j nest of one float `C[.., i, j] += A(i, k) * B[.., k, j]`, else None. With
    `shape_of` (a buffer's shape), two column loops walked as one span are one j (`_coalesced`)."""
    if not _single_for(stmt):
        return None
    if stmt.kind == "reduce":  # a product of one row: no row loop
        stmt = For(ONE_ROW, 1, "serial", [stmt])
    i = stmt
    units: list[str] = []
    k = through_units(i.body[0], units)
    if not _single_for(k):
        return None
    j = through_units(k.body[0], units)
    j = _coalesced(j, shape_of) if shape_of else j
    if not (isinstance(j, For) and len(j.body) == 1):
        return None
    acc = j.body[0]
    if not (isinstance(acc, Accumulate) and acc.op == "sum" and dtype_of(acc.buffer) in BLOCKED_DTYPES):
        return None
    v = acc.value
    if not (isinstance(v, Op) and v.op == "mul" and len(v.args) == 2 and v.dtype == dtype_of(acc.buffer)):
        return None
    if not (contiguous_in(acc.index, j.var) and (i.var == ONE_ROW or uses_var(acc.index, i.var))
            and not uses_var(acc.index, k.var)):
        return None
    if not all(affine(ix) for ix in acc.index):  # the blocks shift C's and B's indices by constants
        return None
    for a, b in (v.args, v.args[::-1]):
        if (isinstance(b, Load) and contiguous_in(b.index, j.var) and not uses_var(b.index, i.var)
                and all(affine(ix) for ix in b.index) and dtype_of(b.buffer) == v.dtype
                and not expr_uses(a, j.var) and acc.buffer not in _buffers(a) | {b.buffer}
                and expr_dtype(a, dtype_of) == v.dtype):
            return MatmulNest(i, k, j, acc, a, b, tuple(units))
    return None


def _coalesced(j, shape_of):
    """Two column loops that every access walks as one span (`8*p1 + p2`, p2 of extent 8: a tile of
    8 columns in each of 12 heads, contiguous in the accumulator and the weight's block) as one loop
    over the span, so the columns run in vectors, not scalar loops;
    any other statement as it is. Each index reads the span where it read the inner loop, the outer
    loop at 0: the same elements, as every access moves `extent` times as far per outer step."""
    if not (_single_for(j) and len(j.body[0].body) == 1 and isinstance(j.body[0].body[0], Accumulate)):
        return j
    inner = j.body[0]
    leaf = inner.body[0]
    accesses = [(leaf.buffer, leaf.index)] + [(ld.buffer, ld.index) for ld in loads(leaf.value)]
    for name, index in accesses:
        shape = shape_of(name)
        if not all(affine(ix) for ix in index) or (
                flat_coef(index, j.var, shape) != inner.extent * flat_coef(index, inner.var, shape)):
            return j
    span = f"{j.var}_{inner.var}"
    at = {j.var: Ix.constant(0), inner.var: Ix.var(span)}
    return For(span, j.extent * inner.extent, inner.kind, [map_indices(leaf, lambda ix: ix.substitute(at))])


def flat_coef(index: tuple[Ix, ...], var: str, shape: tuple[int, ...]) -> int:
    """Elements the flat address moves per step of `var`."""
    coef, stride = 0, 1
    for ix, extent in reversed(list(zip(index, shape))):
        coef += ix.coef(var) * stride
        stride *= extent
    return coef


def through_units(s, units: list[str]):
    """The first loop inside `s` that runs more than once, noting the one-iteration loops passed
    (a tiled axis whose tile is 1 still has its loop)."""
    while isinstance(s, For) and s.extent == 1 and len(s.body) == 1 and isinstance(s.body[0], For):
        units.append(s.var)
        s = s.body[0]
    return s


def _single_for(s) -> bool:
    return isinstance(s, For) and len(s.body) == 1 and isinstance(s.body[0], For)


def uses_var(index: tuple[Ix, ...], var: str) -> bool:
    """Whether any of `index` reads loop variable `var`."""
    return any(var in index_vars(ix) for ix in index)


def contiguous_in(index: tuple[Ix, ...], var: str) -> bool:
    """`var` moves only the last index, by one element per step."""
    return (bool(index) and index[-1].coef(var) == 1 and var not in index_vars(index[-1] - Ix.var(var))
            and not uses_var(index[:-1], var))


def expr_uses(e, var: str) -> bool:
    """Whether expression `e` reads loop variable `var` (a load's index, a concat's select)."""
    return any(uses_var(load.index, var) for load in loads(e)) or (isinstance(e, Select) and var in index_vars(e.ix))


def _buffers(e) -> set[str]:
    return {load.buffer for load in loads(e)}


def expr_dtype(e, dtype_of) -> str:
    """The dtype of expression `e`, `dtype_of` giving a buffer's."""
    if isinstance(e, Load):
        return dtype_of(e.buffer)
    if isinstance(e, Checked):  # a gather's checked read: the dtype of what it reads
        return expr_dtype(e.value, dtype_of)
    return e.dtype  # Op, Lit, Select


def shift_ix(index: tuple[Ix, ...], by: dict[str, int]) -> tuple[Ix, ...]:
    """Each index with loop variable v read as v + by[v]."""
    return tuple(replace(ix, const=ix.const + sum(c * by.get(v, 0) for v, c in ix.terms)) for ix in index)
