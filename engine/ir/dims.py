"""Symbolic dimensions: a tensor dimension that is a symbol (`n`) or an expression of symbols
(`p + 1`, `n * 12`, `(n + 63) // 64`), held in one canonical form so that two expressions that are
equal as integer functions of their symbols for every value are equal as objects.

The canonical form is a polynomial with integer coefficients whose atoms are symbols and floor
quotients `Quot(e, c)` of a canonical expression by a positive constant; `e % c` is `e - c * (e // c)`.
A quotient simplifies where it divides: `(12 * n) // 4` is `3 * n`, `(4 * n + 3) // 4` is `n`.
An expression without symbols is a plain `int`: static shapes are tuples of ints, as before.

`Dim` is what a type's dimension or a shape attribute's entry is: `int | Expr`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .frozen import cached_hash

# The range of a symbol declared without one: 1 up to the largest dimension a tensor may have
# (parse.MAX_DIM).
DEFAULT_RANGE = (1, 2**31 - 1)


@cached_hash
@dataclass(frozen=True)
class Sym:
    name: str

    def __str__(self) -> str:
        return self.name


@cached_hash
@dataclass(frozen=True)
class Quot:
    """floor(num / den), den > 0, num a canonical expression that den does not divide."""

    num: Expr
    den: int

    def __str__(self) -> str:
        ((mono, coef),) = self.num.terms if len(self.num.terms) == 1 else (((), 0),)
        plain = coef == 1 and len(mono) == 1 and isinstance(mono[0], Sym)  # `n // 4`, else `(n + 3) // 4`
        return f"{self.num} // {self.den}" if plain else f"({self.num}) // {self.den}"


Atom = Sym | Quot
Monomial = tuple[Atom, ...]  # atoms in canonical order, repeats for powers; () is the constant term


def _key(atom: Atom) -> tuple:
    return (0, atom.name) if isinstance(atom, Sym) else (1, str(atom.num), atom.den)


@cached_hash
@dataclass(frozen=True)
class Expr:
    """A polynomial: (monomial, nonzero coefficient) pairs in canonical order, at least one with
    an atom (an expression without symbols is an int)."""

    terms: tuple[tuple[Monomial, int], ...]

    def __str__(self) -> str:
        out = ""
        for k, (mono, coef) in enumerate(sorted(self.terms, key=lambda t: (not t[0], [_key(a) for a in t[0]]))):
            sign = "-" if coef < 0 else "+"
            body = _monomial_text(mono, abs(coef))
            out = (("-" + body) if sign == "-" else body) if k == 0 else f"{out} {sign} {body}"
        return out

    def __add__(self, other):
        return add(self, other)

    __radd__ = __add__

    def __sub__(self, other):
        return add(self, mul(other, -1))

    def __rsub__(self, other):
        return add(other, mul(self, -1))

    def __mul__(self, other):
        return mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return floordiv(self, other)

    def __mod__(self, other):
        return mod(self, other)

    def __neg__(self):
        return mul(self, -1)

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(name for mono, _ in self.terms for atom in mono for name in _atom_symbols(atom))


Dim = int | Expr


def _atom_symbols(atom: Atom) -> frozenset[str]:
    return frozenset((atom.name,)) if isinstance(atom, Sym) else atom.num.symbols


def _monomial_text(mono: Monomial, coef: int) -> str:
    factors = [str(a) if isinstance(a, Sym) or len(mono) == 1 and coef == 1 else f"({a})" for a in mono]
    if coef != 1 or not factors:
        factors.append(str(coef))
    return " * ".join(factors)


def symbol(name: str) -> Expr:
    return Expr(((((Sym(name),), 1)),))


def _terms(d: Dim) -> dict[Monomial, int]:
    if isinstance(d, int):
        return {(): d} if d else {}
    return dict(d.terms)


def polynomial(terms: dict[Monomial, int]) -> Dim:
    """The dimension of these (monomial, coefficient) terms, in canonical form."""
    return _make(terms)


def _make(terms: dict[Monomial, int]) -> Dim:
    kept = {m: c for m, c in terms.items() if c}
    if not any(kept):  # only the constant term, or nothing
        return kept.get((), 0)
    return Expr(tuple(sorted(kept.items(), key=lambda t: [_key(a) for a in t[0]])))


def add(a: Dim, b: Dim) -> Dim:
    terms = _terms(a)
    for m, c in _terms(b).items():
        terms[m] = terms.get(m, 0) + c
    return _make(terms)


def mul(a: Dim, b: Dim) -> Dim:
    terms: dict[Monomial, int] = {}
    for ma, ca in _terms(a).items():
        for mb, cb in _terms(b).items():
            m = tuple(sorted(ma + mb, key=_key))
            terms[m] = terms.get(m, 0) + ca * cb
    return _make(terms)


def floordiv(a: Dim, c: int) -> Dim:
    """floor(a / c) for a constant c > 0, simplified where c divides the symbolic part."""
    if not isinstance(c, int) or c <= 0:
        raise ValueError(f"a dimension is divided only by a positive integer, not {c}")
    if isinstance(a, int):
        return a // c
    terms = _terms(a)
    const = terms.pop((), 0)
    if all(coef % c == 0 for coef in terms.values()):  # a = c*q + const: floor(a/c) = q + const // c
        return add(_make({m: coef // c for m, coef in terms.items()}), const // c)
    if c == 1:
        return a
    if all(coef < 0 for m, coef in terms.items()):  # floor(-b / c) = -floor((b + c - 1) / c): a ceiling
        return mul(floordiv(add(mul(a, -1), c - 1), c), -1)
    return _make({(Quot(a, c),): 1})


def mod(a: Dim, c: int) -> Dim:
    return add(a, mul(floordiv(a, c), -c))


def substitute(d: Dim, values: dict[str, int]) -> Dim:
    """`d` with the symbols of `values` replaced by their values (an int when none is left)."""
    if isinstance(d, int):
        return d
    out: Dim = 0
    for mono, coef in d.terms:
        term: Dim = coef
        for atom in mono:
            term = mul(term, values[atom.name] if isinstance(atom, Sym) and atom.name in values else
                       floordiv(substitute(atom.num, values), atom.den) if isinstance(atom, Quot) else
                       _make({(atom,): 1}))
        out = add(out, term)
    return out


def evaluate(d: Dim, values: dict[str, int]) -> int:
    """The value of `d` at these symbol values (every symbol of `d` given): integer arithmetic on
    its terms, no expression built (a call's extents are evaluated on every call)."""
    if isinstance(d, int):
        return d
    try:
        return _value(d, values)
    except KeyError:
        raise KeyError(f"no value for {', '.join(sorted(d.symbols - values.keys()))} in {d}") from None


def _value(d: Dim, values: dict[str, int]) -> int:
    if isinstance(d, int):
        return d
    total = 0
    for mono, coef in d.terms:
        term = coef
        for atom in mono:
            term *= values[atom.name] if isinstance(atom, Sym) else _value(atom.num, values) // atom.den
        total += term
    return total


def bounds(d: Dim, ranges: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """(lowest, highest) value `d` can take when each symbol lies in its inclusive range (symbols
    not in `ranges` take DEFAULT_RANGE): interval arithmetic, so a bound may be wider than the
    expression's true range, never narrower."""
    if isinstance(d, int):
        return d, d
    lo = hi = 0
    for mono, coef in d.terms:
        tlo = thi = coef
        for atom in mono:
            alo, ahi = ranges.get(atom.name, DEFAULT_RANGE) if isinstance(atom, Sym) else \
                tuple(b // atom.den for b in bounds(atom.num, ranges))
            products = (tlo * alo, tlo * ahi, thi * alo, thi * ahi)
            tlo, thi = min(products), max(products)
        lo, hi = lo + tlo, hi + thi
    return lo, hi


def bare_symbol(d: Dim) -> str | None:
    """The symbol's name when `d` is one symbol alone (`n`, not `n + 1`), else None."""
    if isinstance(d, Expr) and len(d.terms) == 1:
        (mono, coef), = d.terms
        if coef == 1 and len(mono) == 1 and isinstance(mono[0], Sym):
            return mono[0].name
    return None


def symbols_of(shape) -> frozenset[str]:
    """The symbols of a shape's dimensions."""
    return frozenset(s for d in shape if isinstance(d, Expr) for s in d.symbols)


def is_static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def size(shape) -> Dim:
    """The element count of a shape: an int for a static one."""
    out: Dim = 1
    for d in shape:
        out = mul(out, d)
    return out


def exact_div(a: Dim, b: Dim) -> Dim | None:
    """a / b when b divides a exactly as polynomials with a quotient of one term (`(64*n + 64) / (n + 1)`
    is 64) or b is a single term, else None."""
    if isinstance(b, int):
        if b == 0:
            return None
        q = floordiv(a, b) if b > 0 else floordiv(mul(a, -1), -b)
        return q if mul(q, b) == a else None
    if len(b.terms) != 1:  # the quotient of a term of a by b's first term, if it divides all of a
        (bmono, bcoef) = b.terms[0]
        for mono, coef in _terms(a).items():
            rest = _monomial_quotient(mono, bmono)
            if rest is not None and coef % bcoef == 0:
                q = _make({rest: coef // bcoef})
                if mul(q, b) == a:
                    return q
        return None
    (bmono, bcoef), = b.terms
    out: dict[Monomial, int] = {}
    for mono, coef in _terms(a).items():
        rest = _monomial_quotient(mono, bmono)
        if rest is None or coef % bcoef:
            return None
        out[rest] = coef // bcoef
    return _make(out)


def _monomial_quotient(mono: Monomial, by: Monomial) -> Monomial | None:
    rest = list(mono)
    for atom in by:
        if atom not in rest:
            return None
        rest.remove(atom)
    return tuple(rest)


def provably(lo_at_least: int, d: Dim, ranges: dict[str, tuple[int, int]]) -> bool:
    """Whether d >= lo_at_least for every value of its symbols in their ranges."""
    return bounds(d, ranges)[0] >= lo_at_least
