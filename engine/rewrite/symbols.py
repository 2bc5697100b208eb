"""Symbolic dimensions in the e-graph: a symbol enters as one large prime, and every shape and
attribute that comes out is read back as a polynomial in it.

egglog holds shapes and shape attributes as vectors of i64, and the analysis and the rules'
conditions compute with them (broadcasting, reductions, transposes, products). A program whose
dimensions depend on one symbol `n` enters with n = HINT, a prime near 2**24: a dimension
`a*n + b` enters as `a*HINT + b`, and a value `v` read back is `a*n + b` with `a` the nearest
multiple and `|b| < STATIC_LIMIT`. HINT is small enough that the element counts and iteration
spaces the analysis multiplies out stay in an i64 (attention's 12 x n x n x 64 is 2**58 at HINT;
a product past 2**63 stops saturation with an error saying so), and large enough that a static
dimension (below STATIC_LIMIT, 4 Mi: checked on the way in) never reads back as symbolic. What
the rules test then means what it means for the symbol:

- equality of two dimensions holds at HINT exactly when it holds as polynomials (no coefficient
  reaches HINT), so a shape is never taken for another it equals at one size only;
- a condition enabling a rewrite where a dimension is small (`n < 1024`), one (`n == 1`) or
  divisible (`n % 8 == 0`) sees a huge prime and does not hold: no rule applies because of a size
  the symbol might not have. Every rule preserves meaning whatever its condition (rules check);
  conditions choose what to try.

One symbol, of degree one, without floor quotients, is what this encoding reads back
exactly; a program with more is refused (`unsupported`), as is a value the e-graph computed that
does not read back (a product of two symbolic dimensions).
"""

from __future__ import annotations

from ..ir.dims import Dim, Expr, Sym, evaluate, mul, symbol
from ..ir.errors import StitchError
from ..ir.extent import extent

HINT = 2**24 + 43  # a prime: no small number divides it
STATIC_LIMIT = 2**22  # a static value (or a symbolic one's constant term) read back is below this


def unsupported(graph) -> str:
    """Why the e-graph cannot take `graph`'s symbols yet ('' when it can): one symbol, every
    dimension and shape attribute linear in it."""
    if not graph.symbols:
        return ""
    if len(graph.symbols) > 1:
        return f"more than one symbol ({', '.join(graph.symbols)})"
    for node in graph.nodes:
        dims = list(node.type.shape) + [d for _, v in node.attrs if isinstance(v, tuple) for d in v]
        for d in dims:
            if isinstance(d, Expr) and not linear(d):
                return f"the dimension {d} is not of the form a*n + b"
            if isinstance(d, Expr) and any(abs(c) >= STATIC_LIMIT for _, c in d.terms):
                return f"the dimension {d} has a coefficient of {STATIC_LIMIT} or more"
            if isinstance(d, int) and abs(d) >= STATIC_LIMIT:
                return f"a static dimension of {d} (at least {STATIC_LIMIT}) beside a symbol"
    return ""


def linear(d: Expr) -> bool:
    return all(len(mono) <= 1 and all(isinstance(a, Sym) for a in mono) for mono, _ in d.terms)


def encode(d: Dim) -> int:
    """A dimension as the e-graph holds it: its value at n = HINT."""
    if isinstance(d, int):
        return d
    (name,) = d.symbols
    return evaluate(d, {name: HINT})


def decoder(name: str | None, planning: int | None = None):
    """Read a value back as a dimension in the symbol `name` (None: a static program, as it is); with
    a `planning` value, a symbolic dimension comes back as its Extent there (engine/ir/extent.py),
    what scheduling computes with."""
    if name is None:
        return lambda v: v
    n = symbol(name)
    if planning is not None:
        plain = decoder(name)
        return lambda v: extent(plain(v), {name: planning})

    def decode(v: int) -> Dim:
        a = (v + HINT // 2) // HINT
        b = v - a * HINT
        if abs(b) >= STATIC_LIMIT or abs(a) >= STATIC_LIMIT:
            raise StitchError(f"a shape the rules computed ({v}) is not of the form a*{name} + b: the e-graph "
                              f"carries symbolic dimensions linear in one symbol only")
        return b if a == 0 else mul(n, a) + b if b else mul(n, a)

    return decode
