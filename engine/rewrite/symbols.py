"""Symbolic dimensions in the e-graph: each symbolic term of a program enters as a large prime, and
every shape and attribute that comes out is read back as the polynomial it encodes.

egglog holds shapes and shape attributes as vectors of i64, and the analysis and the rules'
conditions compute with them: broadcasting (max with 1), reductions and transposes (copies),
concat (a sum), slices (a difference). The analysis never multiplies two dimensions into a new
one (an element count is a product, and is kept only where it fits an i64: a condition on it is
then not met), so every dimension it computes is a sum, with integer coefficients, of the
dimensions the program wrote. A program's dimensions are polynomials over its symbols (and floor
quotients); each monomial they hold (`n`, `p`, `b*s`, `(n+63)//64`) is a *term* of the encoding,
and enters as its own prime `H_i`: a dimension `a_1*m_1 + ... + a_k*m_k + b` enters as
`a_1*H_1 + ... + a_k*H_k + b`. The primes are spaced so that a value reads back uniquely (each
`H_i+1` is more than 4*C times `H_i`, C bounding every coefficient, and `H_1` more than twice the
bound of a constant term), and the largest value stays below 2**62.

One term (the common case: a sequence length, a past length) takes the prime near 2**24 with
coefficients and constants below 2**22; more terms share the i64's bits, so their coefficients
are bounded tighter (`coefficient_limit`). What the rules test then means what it means for the
symbols:

- equality of two dimensions holds for the encodings exactly when it holds as polynomials (no
  coefficient reaches its bound), so a shape is never taken for another it equals at one size only;
- a condition enabling a rewrite where a dimension is small (`n < 1024`), one (`n == 1`) or
  divisible (`n % 8 == 0`) sees a huge prime and does not hold: no rule applies because of a size
  the symbols might not have. Every rule preserves meaning whatever its condition (rules check);
  conditions choose what to try.

A program whose coefficients, constants or number of terms exceed the bounds is refused
(`unsupported`), as is a value the e-graph computed that does not read back (a slice of a
symbolic axis by a step above 1).
"""

from __future__ import annotations

from functools import lru_cache

from ..ir.dims import Dim, Expr, Monomial, polynomial
from ..ir.errors import StitchError
from ..ir.extent import extent

HINT = 2**24 + 43  # the first term's prime: no small number divides it
STATIC_LIMIT = 2**22  # a static value (or a symbolic one's constant term) read back is below this
VALUE_LIMIT = 2**62  # every encoded dimension lies below this (an i64, with room for a sum of two)
MAX_TERMS = 12  # beyond this the coefficients' bits run out


def coefficient_limit(terms: int) -> int:
    """The bound on every coefficient of a program with `terms` symbolic terms (exclusive)."""
    if terms <= 1:
        return STATIC_LIMIT
    bits = (39 - 2 * terms) // terms  # c + 24 + (c + 2)(terms - 1) <= 61
    return 2 ** max(bits, 1)


class Encoding:
    """How one program's symbolic dimensions enter the e-graph and read back."""

    def __init__(self, terms: tuple[Monomial, ...]):
        self.terms = terms
        self.limit = coefficient_limit(len(terms))
        self.hints = _hints(len(terms))
        self.index = {m: i for i, m in enumerate(terms)}

    @classmethod
    def of(cls, graph) -> Encoding:
        """The encoding of `graph`: a term for each monomial of its dimensions and shape attributes."""
        found = {mono for d in _dims(graph) if isinstance(d, Expr) for mono, _ in d.terms if mono}
        return cls(tuple(sorted(found, key=_text)))

    def problem(self, graph) -> str:
        """Why the e-graph cannot carry `graph`'s dimensions ('' when it can)."""
        if len(self.terms) > MAX_TERMS:
            return (f"{len(self.terms)} symbolic terms ({', '.join(map(_text, self.terms))}); "
                    f"the e-graph carries at most {MAX_TERMS}")
        for d in _dims(graph):
            if isinstance(d, int):
                if abs(d) >= STATIC_LIMIT and self.terms:
                    return f"a static dimension of {d} (at least {STATIC_LIMIT}) beside a symbol"
                continue
            for mono, c in d.terms:
                if not mono and abs(c) >= STATIC_LIMIT:
                    return f"the dimension {d} has a constant term of {STATIC_LIMIT} or more"
                if mono and abs(c) >= self.limit:
                    more = f" beside {len(self.terms) - 1} other symbolic term(s)" if len(self.terms) > 1 else ""
                    return f"the dimension {d} has a coefficient of {self.limit} or more{more}"
        return ""

    def encode(self, d: Dim) -> int:
        """A dimension as the e-graph holds it."""
        if isinstance(d, int):
            return d
        return sum(c * (self.hints[self.index[mono]] if mono else 1) for mono, c in d.terms)

    def decode(self, v: int) -> Dim:
        """The dimension an encoded value stands for; a value no dimension within the bounds gives
        is an error."""
        rest, terms = v, {}
        for mono, hint in reversed(list(zip(self.terms, self.hints))):
            a = (rest + hint // 2) // hint
            if abs(a) >= self.limit:
                raise self._unreadable(v)
            terms[mono] = a
            rest -= a * hint
        if abs(rest) >= STATIC_LIMIT:
            raise self._unreadable(v)
        terms[()] = rest
        return polynomial(terms)

    def decoder(self, planning: dict[str, int] | None = None):
        """Read values back as dimensions; with `planning` values of the symbols, a symbolic
        dimension comes back as its Extent there (engine/ir/extent.py), what scheduling computes with."""
        if not self.terms:
            return lambda v: v
        if planning is None:
            return self.decode
        return lambda v: extent(self.decode(v), planning)

    def _unreadable(self, v: int) -> StitchError:
        names = ", ".join(map(_text, self.terms))
        return StitchError(f"a shape the rules computed ({v}) is not a sum of the program's symbolic terms "
                           f"({names}) with coefficients below {self.limit}: the e-graph carries dimensions "
                           f"linear in the program's own terms only")


def unsupported(graph) -> str:
    """Why the e-graph cannot take `graph`'s symbolic dimensions ('' when it can)."""
    return Encoding.of(graph).problem(graph) if graph.symbols else ""


def _dims(graph):
    for node in graph.nodes:
        yield from node.type.shape
        for _, v in node.attrs:
            if isinstance(v, tuple):
                yield from (d for d in v if isinstance(d, (int, Expr)) and not isinstance(d, bool))


def _text(mono: Monomial) -> str:
    return str(polynomial({mono: 1}))


@lru_cache(maxsize=None)
def _hints(count: int) -> tuple[int, ...]:
    """The primes of a program of `count` terms: each more than 4 * coefficient_limit times the last."""
    limit, hints, hint = coefficient_limit(count), [], HINT
    for _ in range(count):
        hints.append(hint)
        hint = _next_prime(4 * limit * hint)
    assert not hints or limit * hints[-1] < VALUE_LIMIT, "coefficient_limit leaves the i64"
    return tuple(hints)


def _next_prime(n: int) -> int:
    n |= 1
    while not _is_prime(n):
        n += 2
    return n


def _is_prime(n: int) -> bool:
    """Miller-Rabin with the bases that decide every n below 3.3e24."""
    if n < 2:
        return False
    bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    for p in bases:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in bases:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True
