"""Index expressions: where a value's element sits, as a function of loop or kernel axes.

An `Ix` is an integer expression `sum(coef * term) + const` whose terms are
axis names (strings) or *atoms*:

    FloorDiv(x, d)     floor(x / d)       a reshape splitting or merging axes
    Mod(x, d)          x mod d            (the other half of that split)
    Indirect(v, n)     the value v, an index read from a tensor, taken
                       modulo n when negative (numpy's negative indices);
                       a gather's index

Every injective op is an index map in these terms (a permutation for
transpose, div/mod for reshape, offset and stride for slice, a shift per
piece for concat, an indirect load for gather), so both the kernel model
(engine/schedule/kernel.py, over kernel axes) and the loop nests (lowering/loops.py,
over loop variables) use this one type.

`simplify` knows each axis's extent and removes the div/mod a split or merge
of contiguous axes introduces (`(4*h + d) // 4 = h` when `0 <= d < 4`),
takes a factor of the divisor out first where the rest stays below it
(`(64*p + r) // 1024 = p // 16` when `0 <= r < 64`: [2, 16, 64] read as
[32, 64] rows), and folds `4 * (x // 4) + x % 4` back to `x`, so reshapes of
contiguous data stay affine and vectorize, and an index varies only along
the axes it really depends on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, Union

from ..ir.dims import exact_div
from ..ir.extent import Extent, dim_of, is_symbolic
from ..ir.frozen import cached_hash, cached_repr

Term = Union[str, "FloorDiv", "Mod", "Indirect"]


def _order(tc: tuple) -> tuple:
    """Canonical term order: axes before atoms, larger coefficients first (`32*p1o + p1`)."""
    term, coef = tc
    return (0, -abs(coef), term) if isinstance(term, str) else (1, -abs(coef), repr(term))


@cached_repr
@cached_hash
@dataclass(frozen=True)
class Ix:
    """sum(coef * term) + const, terms in a canonical order (so equal expressions compare equal)."""

    terms: tuple[tuple[Term, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(terms: dict | None = None, const: int = 0) -> "Ix":
        merged: dict = {}
        for t, c in (terms or {}).items():
            if c:
                merged[t] = merged.get(t, 0) + c
        return Ix(tuple(sorted(((t, c) for t, c in merged.items() if c), key=_order)), const)

    @staticmethod
    def var(name: Term, coef: int = 1, const: int = 0) -> "Ix":
        return Ix.of({name: coef}, const)

    @staticmethod
    def constant(value: int) -> "Ix":
        return Ix((), value)

    def __add__(self, other: "Ix | int") -> "Ix":
        if isinstance(other, int):
            return Ix(self.terms, self.const + other)
        merged = dict(self.terms)
        for t, c in other.terms:
            merged[t] = merged.get(t, 0) + c
        return Ix.of(merged, self.const + other.const)

    def __sub__(self, other: "Ix | int") -> "Ix":
        return self + (other * -1 if isinstance(other, Ix) else -other)

    def __mul__(self, k: int) -> "Ix":
        return Ix.of({t: c * k for t, c in self.terms}, self.const * k)

    @property
    def is_const(self) -> bool:
        return not self.terms

    @property
    def label(self) -> str | None:
        """The axis name when this is exactly one axis (coefficient 1, no offset)."""
        if len(self.terms) == 1 and self.const == 0 and isinstance(self.terms[0][0], str) and self.terms[0][1] == 1:
            return self.terms[0][0]
        return None

    @property
    def stepped(self) -> tuple[str, int] | None:
        """(axis, step) when this is step * axis + const for one axis with step > 0; else None."""
        if len(self.terms) == 1 and isinstance(self.terms[0][0], str) and self.terms[0][1] > 0:
            return self.terms[0]
        return None

    def coef(self, name: str) -> int:
        return dict(self.terms).get(name, 0)

    @cached_property
    def axis_names(self) -> tuple[str, ...]:
        """Every axis name this expression depends on, once each, in first-use order."""
        return tuple(dict.fromkeys(self.axes()))

    def axes(self) -> Iterator[str]:
        """Every axis name this expression depends on (inside atoms too), with repeats."""
        for t, _ in self.terms:
            if isinstance(t, str):
                yield t
            else:
                yield from t.axes()

    def substitute(self, mapping: dict[str, "Ix"]) -> "Ix":
        """Each axis `a` replaced by `mapping[a]` (axes not in it stay); `self` itself when that
        changes nothing (kernel merging renames mostly to the same names)."""
        if all(a not in mapping or mapping[a].label == a for a in self.axes()):
            return self
        merged: dict = {}
        const = self.const
        for t, c in self.terms:
            if not isinstance(t, str):
                t = t.substitute(mapping)
            elif t in mapping:
                m = mapping[t]
                const += m.const * c
                for t2, c2 in m.terms:
                    merged[t2] = merged.get(t2, 0) + c2 * c
                continue
            merged[t] = merged.get(t, 0) + c
        return Ix.of(merged, const)

    def map_atoms(self, fn: Callable[[Term], "Ix"]) -> "Ix":
        """Each atom replaced by fn(atom) (axes stay)."""
        out = Ix.constant(self.const)
        for t, c in self.terms:
            out = out + (Ix.var(t, c) if isinstance(t, str) else fn(t) * c)
        return out

    def __str__(self) -> str:
        parts = [_term_text(t) if c == 1 else f"{c}*{_term_text(t, alone=False)}" for t, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")

    @property
    def plain(self) -> bool:
        """One axis alone (`p1`), which needs no parentheses around it."""
        return not self.const and len(self.terms) == 1 and self.terms[0][1] == 1 and isinstance(self.terms[0][0], str)


def _term_text(t: Term, alone: bool = True) -> str:
    """An atom's text; a quotient or remainder multiplied by a coefficient in parentheses (`8*(p1 // 8)`)."""
    if isinstance(t, str):
        return t
    return str(t) if alone or not isinstance(t, _ByConstant) else f"({t})"


@cached_repr
@cached_hash
@dataclass(frozen=True)
class _ByConstant:
    """An expression's floor quotient or remainder by a positive constant (`symbol` says which)."""

    x: Ix
    d: int
    symbol: ClassVar[str]

    def axes(self) -> Iterator[str]:
        return self.x.axes()

    def substitute(self, mapping: dict[str, Ix]) -> "_ByConstant":
        return type(self)(self.x.substitute(mapping), self.d)

    def __str__(self) -> str:
        return f"{self.x if self.x.plain else f'({self.x})'} {self.symbol} {self.d}"


class FloorDiv(_ByConstant):
    symbol = "//"


class Mod(_ByConstant):
    symbol = "%"


@cached_repr
@cached_hash
@dataclass(frozen=True)
class Indirect:
    """An index read from a tensor: `value` (an expression of the level that holds it: a kernel
    instance reference in the schedule, a loop-nest expression after lowering), in [-extent, extent);
    negative values count from the end. `site` names the gather for run-time range errors."""

    value: object
    extent: int
    site: int = 0

    def axes(self) -> Iterator[str]:
        value = self.value
        if hasattr(value, "axes"):
            yield from value.axes()

    def substitute(self, mapping: dict[str, Ix]) -> "Indirect":
        value = self.value.substitute(mapping) if hasattr(self.value, "substitute") else self.value
        return Indirect(value, self.extent, self.site)

    def __str__(self) -> str:
        return f"idx<{self.extent}>({self.value})"


# ---------------------------------------------------------------------------
# ranges and simplification


def bounds(ix: Ix, extent: Callable[[str], int]) -> tuple[int, int]:
    """Inclusive (lo, hi) of `ix` when every axis `a` ranges over [0, extent(a))."""
    return interval(ix, _from_zero(extent))


def _from_zero(extent: Callable[[str], int]) -> Callable[[str], tuple[int, int]]:
    return lambda a: (0, extent(a) - 1)


def interval(ix: Ix, span: Callable[[str], tuple[int, int]]) -> tuple[int, int]:
    """Inclusive (lo, hi) of `ix` when every axis `a` ranges over the inclusive span(a)."""
    lo = hi = ix.const
    for t, c in ix.terms:
        tlo, thi = _term_interval(t, span)
        lo += min(c * tlo, c * thi)
        hi += max(c * tlo, c * thi)
    return lo, hi


def _term_interval(t: Term, span) -> tuple[int, int]:
    if isinstance(t, str):
        return span(t)
    if isinstance(t, FloorDiv):
        lo, hi = interval(t.x, span)
        if is_symbolic(t.d):  # (bounds that hold for every divisor d >= 1)
            return (0, hi) if lo >= 0 else (lo, max(hi, 0))
        return lo // t.d, hi // t.d
    if isinstance(t, Mod):
        lo, hi = interval(t.x, span)
        if is_symbolic(t.d):
            return 0, t.d - 1
        if lo // t.d == hi // t.d:
            return lo % t.d, hi % t.d
        return 0, t.d - 1
    return 0, t.extent - 1


def simplify(ix: Ix, extent: Callable[[str], int]) -> Ix:
    """`ix` with the div/mod atoms that ranges decide taken out (see the module docstring)."""
    return simplify_in(ix, _from_zero(extent))


def simplify_in(ix: Ix, span: Callable[[str], tuple[int, int]]) -> Ix:
    """`simplify` where each axis ranges over the inclusive span(a), not only from 0: a concat's
    side, read only where the concat's index is below (or from) its split, knows that much more
    (Llama's rotate_half: `(r + 736) // 768` is 1 where r >= 32).

    An index with div/mod atoms is simplified once per span of its axes (what the answer depends
    on): a chain of reshapes nests each one's atoms in the next one's index, and the search forms
    the chain's kernels again and again (ResNet-18's whole-program starts: a fifth of its search)."""
    if all(isinstance(t, str) for t, _ in ix.terms):
        return _simplify_in(ix, span)
    key = (ix, tuple(span(a) for a in ix.axis_names))
    out = _SIMPLIFIED.get(key)
    if out is None:
        if len(_SIMPLIFIED) >= SIMPLIFIED_KEPT:
            _SIMPLIFIED.clear()
        out = _SIMPLIFIED[key] = _simplify_in(ix, span)
    return out


_SIMPLIFIED: dict = {}
SIMPLIFIED_KEPT = 1 << 16  # simplified indices kept (emptied when full)


def _simplify_in(ix: Ix, span: Callable[[str], tuple[int, int]]) -> Ix:
    out = Ix.constant(ix.const)
    for t, c in ix.terms:
        if isinstance(t, FloorDiv):
            out = out + _floordiv(simplify_in(t.x, span), t.d, span) * c
        elif isinstance(t, Mod):
            out = out + _mod(simplify_in(t.x, span), t.d, span) * c
        else:
            out = out + Ix.var(t, c)
    return _recombine(out)


def floordiv(x: Ix, d: int, extent: Callable[[str], int]) -> Ix:
    """floor(x / d), exact: terms whose coefficient d divides come out; the rest stays an atom
    unless its range lies within one multiple of d, or a factor of d can be taken out first
    (`_factor`: `(64*a + b) // 1024 = a // 16` when `0 <= b < 64`)."""
    return _floordiv(x, d, _from_zero(extent))


def _floordiv(x: Ix, d: int, span) -> Ix:
    if is_symbolic(d):
        whole, rest = _by_symbolic(x, d, span)
        return Ix.of(whole) if rest is None else Ix.of(whole) + Ix.var(FloorDiv(rest, d))
    if d == 1:
        return x
    whole = {t: c // d for t, c in x.terms if c % d == 0}
    q, r = divmod(x.const, d)
    rest = Ix.of({t: c for t, c in x.terms if c % d}, r)
    lo, hi = interval(rest, span)
    if lo // d == hi // d:
        return Ix.of(whole, q + lo // d)
    factored = _factor(rest, d, span)
    if factored is not None:
        m, outer, _ = factored
        return Ix.of(whole, q) + _floordiv(outer, d // m, span)
    return Ix.of(whole, q) + Ix.var(FloorDiv(rest, d))


def mod(x: Ix, d: int, extent: Callable[[str], int]) -> Ix:
    """x mod d (non-negative), exact: coefficients and the constant reduced mod d; the atom goes
    when the rest's range lies within one period, or a factor of d comes out as in `floordiv`."""
    return _mod(x, d, _from_zero(extent))


def _mod(x: Ix, d: int, span) -> Ix:
    if is_symbolic(d):
        whole, rest = _by_symbolic(x, d, span)
        if rest is None:  # the terms d divides are the quotient; what is left lies in [0, d)
            return x - Ix.of(whole) * d
        return Ix.var(Mod(rest, d))
    if d == 1:
        return Ix.constant(0)
    rest = Ix.of({t: c % d for t, c in x.terms if c % d}, x.const % d)
    lo, hi = interval(rest, span)
    if lo // d == hi // d:
        return rest - (lo // d) * d
    factored = _factor(rest, d, span)
    if factored is not None:
        m, outer, inner = factored
        return _mod(outer, d // m, span) * m + inner
    return Ix.var(Mod(rest, d))


def _by_symbolic(x: Ix, d: int, span) -> tuple[dict, Ix | None]:
    """x = d*q + r for a symbolic divisor d: (q's terms: those whose coefficient d divides exactly
    as polynomials; r, or None where r provably lies in [0, d) at every size, so that x // d is q)."""
    whole, rest = {}, {}
    for t, c in x.terms:
        q = exact_div(dim_of(c), dim_of(d))
        if q is None:
            rest[t] = c
        else:
            whole[t] = q if isinstance(q, int) else Extent(q, int.__int__(c) // int.__int__(d))
    r = Ix.of(rest, x.const)
    lo, hi = interval(r, span)
    below = d - hi  # provably >= 1 only where it is a number (`n - (n - 1)`)
    if not is_symbolic(lo) and lo >= 0 and not is_symbolic(below) and below >= 1:
        return whole, None
    return whole, r


def _factor(x: Ix, d: int, span) -> tuple[int, Ix, Ix] | None:
    """(m, outer, inner) with x = m*outer + inner, m a proper factor of d above 1 and inner's range
    within [0, m): then x // d = outer // (d/m) and x % d = m*(outer % (d/m)) + inner. The factor
    tried is each coefficient's common factor with d, largest first."""
    if is_symbolic(d) or any(is_symbolic(c) for _, c in x.terms):
        return None
    for m in sorted({math.gcd(c, d) for _, c in x.terms} - {1, d}, reverse=True):
        big = {t: c // m for t, c in x.terms if c % m == 0}
        small = Ix.of({t: c for t, c in x.terms if c % m}, x.const % m)
        lo, hi = interval(small, span)
        if lo // m == hi // m:
            shift = lo // m
            return m, Ix.of(big, x.const // m + shift), small - shift * m
    return None


def _recombine(ix: Ix) -> Ix:
    """d*c*(x // d) + c*(x % d) -> c*x: the flat address of a split axis is the axis again; and
    b*c*(x // (a*b)) + c*((x // a) % b) -> c*(x // a), so a flat address through a reshape's digits
    (`1024*(r // 1024) + 32*((r // 32) % 32) + r % 32`, a group's elements read as [C/G, H, W]) is
    the flat axis again (`r`)."""
    terms = dict(ix.terms)
    for t, c in list(terms.items()):
        if isinstance(t, Mod) and t in terms:
            div = FloorDiv(t.x, t.d)
            if terms.get(div) == c * t.d:
                del terms[t], terms[div]
                return _recombine(Ix.of(terms, ix.const) + t.x * c)
            digit = _quotient(t.x)
            if digit is not None and not is_symbolic(t.d) and not is_symbolic(digit.d):
                whole = FloorDiv(digit.x, digit.d * t.d)
                if terms.get(whole) == c * t.d:
                    del terms[t], terms[whole]
                    return _recombine(Ix.of(terms, ix.const) + Ix.var(digit, c))
    return ix


def flat_address(index: tuple[Ix, ...], shape: tuple) -> Ix:
    """The element `index` reads of a row-major buffer of `shape`, counted from its start, with the
    digits of one value that add up to it taken back (`_recombine`: exact for every value, no ranges
    needed)."""
    flat, stride = Ix(), 1
    for ix, extent in reversed(list(zip(index, shape))):
        flat = flat + ix * stride
        stride *= extent
    return _recombine(flat)


def _quotient(x: Ix) -> FloorDiv | None:
    """x's quotient when x is one `y // a` alone."""
    if x.const == 0 and len(x.terms) == 1 and x.terms[0][1] == 1 and isinstance(x.terms[0][0], FloorDiv):
        return x.terms[0][0]
    return None


def indirect(ix: Ix) -> bool:
    """Whether `ix` reads an index from a tensor anywhere (an Indirect, inside a div or mod too)."""
    return any(isinstance(t, Indirect) or isinstance(t, (FloorDiv, Mod)) and indirect(t.x) for t, _ in ix.terms)


def symbolic(ix: Ix) -> bool:
    """Whether a coefficient, the constant or a divisor anywhere in `ix` is a symbolic extent: an
    index that moves with a call's sizes (engine/ir/extent.py)."""
    if is_symbolic(ix.const):
        return True
    for t, c in ix.terms:
        if is_symbolic(c) or isinstance(t, (FloorDiv, Mod)) and (is_symbolic(t.d) or symbolic(t.x)):
            return True
        if isinstance(t, Indirect) and is_symbolic(t.extent):
            return True
    return False


def affine(ix: Ix) -> bool:
    """No atoms: a plain linear combination of axes."""
    return all(isinstance(t, str) for t, _ in ix.terms)
