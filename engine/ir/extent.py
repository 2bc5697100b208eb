"""A symbolic dimension as scheduling and lowering compute with it: an `int` at its planning value
that remembers the dimension it is.

The cost model, the plan and lowering were written for static shapes: they add, multiply and
compare ints. A program with a symbol `n` is scheduled once, at one *planning value* of each
symbol (the top of its range, so that what must fit on chip fits at every size; see
`planning_values`), with every dimension an `Extent`: it compares, prices and sorts as its planning
value, and its arithmetic carries the dimension along (`Extent(n) * 768 + 1` is the Extent of
`768*n + 1`), so the extents, strides and sizes lowering writes into loop nests and C are the
expressions, valid at every size, not the numbers of one size.

Where the static code turns an extent into a plain number with `int(e)` or a bit operation, an
Extent raises TypeError, and that code path declines symbolic extents instead. CPython reads an int
subclass's value directly in `range(e)`, an index and a numpy shape, so there an Extent is its
planning value without a word: the code that unrolls or allocates by an extent checks
`is_symbolic` first, and the tests run every symbolic program at several sizes from one compile
(tests/test_symbolic_compile.py), which a number of one size leaking into the loops or the C fails.

Comparisons are where decisions are taken at the planning value, and every decision so taken must
keep the code correct at every size: tiles along a symbolic axis have remainders; an `==` between a
symbolic extent and a number is False, so "this axis has extent 1" is never assumed; a symbolic
extent is truthy ("may be nonzero": a loop over it is written, and may run zero times); a
remainder's planning value is the most it can be (lowering/remainder.py).
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

from numpy import generic as np_generic

from .dims import DEFAULT_RANGE, Dim, Expr, Quot, Sym, add, evaluate, exact_div, floordiv, mod, mul

# The planning value of a symbol whose range has no useful top (an undeclared symbol's range
# reaches 2**31 - 1): scheduling there would keep nothing on chip. A program compiled with it runs
# sizes up to it; a declared range sets its own top.
PLANNING_LIMIT = 8192


def planning_values(symbols: dict[str, tuple[int, int]]) -> dict[str, int]:
    """Each symbol's planning value: the top of its range, at most PLANNING_LIMIT."""
    return {name: min(hi, PLANNING_LIMIT) for name, (_, hi) in symbols.items()}


# The tops of the size buckets below a range's top: a program of one symbol is also scheduled at each
# of these its range holds, and a call runs the schedule of the smallest bucket its size fits (a
# schedule planned for 1024 rows keeps less on chip and makes fewer tiles than one for 64 would;
# why 64 alone: docs/explanation/symbolic-dimensions.md).
BUCKETS = (64,)


def bucket_tops(symbols: dict[str, tuple[int, int]]) -> list[int]:
    """The planning values of the smaller buckets of a program's one symbol, ascending ([] otherwise)."""
    if len(symbols) != 1:
        return []
    ((lo, _),) = symbols.values()
    (top,) = planning_values(symbols).values()
    return [t for t in BUCKETS if lo <= t < top]


def _refuse(self, *_):
    raise TypeError(f"the symbolic extent {self.dim} was used where a number is needed")


class Extent(int):
    """A symbolic dimension (`dim`, an Expr) at its planning value (the int itself)."""

    def __new__(cls, dim: Expr, value: int):
        obj = super().__new__(cls, value)
        obj.dim = dim
        return obj

    @property
    def value(self) -> int:
        return int.__int__(self)

    def __repr__(self) -> str:
        return f"Extent({self.dim}, {self.value})"

    def __str__(self) -> str:
        return c_text(self.dim) if _SPELLING.get() == "c" else str(self.dim)

    def __format__(self, spec: str) -> str:  # (a number's spec, `,` or `d`, does not apply to an expression)
        try:
            return format(str(self), spec)
        except ValueError:
            return str(self)

    def __hash__(self) -> int:
        return hash(self.dim)

    def __eq__(self, other) -> bool:
        # equal dimensions at equal planning values: the schedule's caches (split kernels, reshaped
        # indices) key on extents, and a size bucket's kernel (n at 128) is not the top's (n at 8192)
        if isinstance(other, Extent):
            return self.dim == other.dim and int.__int__(self) == int.__int__(other)
        return False if isinstance(other, int) else NotImplemented

    def __ne__(self, other) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __bool__(self) -> bool:  # "may be nonzero": code is written for it (a loop may run zero times)
        return True

    # -- arithmetic: carried on the dimension and on the planning value -------------------------

    def __add__(self, other):
        return _apply(add, self, other, int.__add__)

    __radd__ = __add__

    def __sub__(self, other):
        return _apply(_sub, self, other, int.__sub__)

    def __rsub__(self, other):
        return _apply(_rsub, self, other, _int_rsub)

    def __mul__(self, other):
        return _apply(mul, self, other, int.__mul__)

    __rmul__ = __mul__

    def __neg__(self):
        return _apply(mul, self, -1, int.__mul__)

    def __pos__(self):
        return self

    def __abs__(self):  # (by its sign at the planning value: an order, a size, never an index)
        return -self if self.value < 0 else self

    def __floordiv__(self, other):
        if isinstance(other, Extent):  # exactly, or not at all (`n // n`, `(12 * n) // n`)
            q = exact_div(self.dim, other.dim)
            if q is None and exact_div(mul(self.dim, -1), other.dim) is not None:  # (`-n // n`)
                q = mul(exact_div(mul(self.dim, -1), other.dim), -1)
            if q is None:
                raise TypeError(f"the symbolic extent {self.dim} divided by another ({other.dim})")
            return q if isinstance(q, int) else Extent(q, self.value // other.value)
        if not isinstance(other, int):
            return NotImplemented
        return _apply(floordiv, self, other, int.__floordiv__)

    def __mod__(self, other):
        if isinstance(other, Extent):
            raise TypeError(f"the symbolic extent {self.dim} modulo another ({other.dim})")
        if not isinstance(other, int):
            return NotImplemented
        return _apply(mod, self, other, int.__mod__)

    def __divmod__(self, other):
        return self // other, self % other

    def __rfloordiv__(self, other):
        raise TypeError(f"a number divided by the symbolic extent {self.dim}")

    __rmod__ = __rdivmod__ = __rfloordiv__

    def __pow__(self, k, modulo=None):
        if modulo is not None or not isinstance(k, int) or isinstance(k, Extent) or k < 0:
            raise TypeError(f"the symbolic extent {self.dim} to a power other than a small constant")
        out = 1
        for _ in range(k):
            out = out * self
        return out

    def __truediv__(self, other):  # a ratio is a price (seconds, bytes per cycle): at the planning value
        return self.value / (other.value if isinstance(other, Extent) else other)

    def __rtruediv__(self, other):
        return other / self.value

    def __round__(self, ndigits=None):
        return self

    def __trunc__(self):
        return self

    # where the static code would take the number itself, a symbolic extent refuses (TypeError)
    __index__ = __int__ = __float__ = _refuse
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _refuse
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __invert__ = _refuse

    def __reduce__(self):
        return (Extent, (self.dim, self.value))


def _sub(a: Dim, b: Dim) -> Dim:
    return add(a, mul(b, -1))


def _rsub(a: Dim, b: Dim) -> Dim:
    return add(b, mul(a, -1))


def _int_rsub(a: int, b: int) -> int:
    return b - a


# (fn, dimension, its planning value, operand's dimension or None, operand's value) -> the result:
# scheduling repeats the same few operations on the same extents (tile counts, footprints) hundreds
# of thousands of times, and a polynomial's arithmetic costs microseconds where an int's costs
# nanoseconds. An Extent is immutable, so one result serves every caller.
_RESULTS: dict[tuple, int] = {}


def _apply(fn, a: Extent, b, planned):
    if isinstance(b, Extent):
        key = (fn, a.dim, int.__int__(a), b.dim, int.__int__(b))
    elif isinstance(b, int):
        key = (fn, a.dim, int.__int__(a), None, int.__int__(b))
    else:
        return NotImplemented
    out = _RESULTS.get(key)
    if out is None:
        if len(_RESULTS) > 1 << 18:
            _RESULTS.clear()
        dim = fn(key[1], key[4] if key[3] is None else key[3])
        out = _RESULTS[key] = dim if isinstance(dim, int) else Extent(dim, planned(key[2], key[4]))
    return out


def extent(d: Dim, values: dict[str, int]) -> int:
    """`d` for scheduling: an int when static, else its Extent at the symbols' planning `values`."""
    if isinstance(d, Extent) or isinstance(d, int):
        return d
    return Extent(d, evaluate(d, values))


def dim_of(x) -> Dim:
    """The dimension an int or Extent stands for (an Expr, or the int)."""
    return x.dim if isinstance(x, Extent) else x


def planned(x):
    """A figure (bytes, tiles, cycles) at the planning values: an Extent's planning value as an int,
    anything else (an int, a float) as it is."""
    return x.value if isinstance(x, Extent) else int(x) if isinstance(x, float) and x.is_integer() else x


def is_symbolic(x) -> bool:
    return isinstance(x, Extent)


def at(x, values: dict[str, int]):
    """`x` at the symbols' `values`: an Extent evaluated, anything else as it is."""
    return evaluate(x.dim, values) if isinstance(x, Extent) else x


def instantiate(x, values: dict[str, int]):
    """`x` (a LoopProgram, or any tree of dataclasses, lists, tuples and dicts) with every Extent
    evaluated at the symbols' `values`: what the walking executors (numpy, the simulator) run."""
    memo: dict[int, object] = {}

    def walk(y):
        if isinstance(y, Extent):
            return evaluate(y.dim, values)
        if isinstance(y, (str, int, float, bool, type(None), frozenset, np_generic)):
            return y
        key = id(y)
        if key in memo:
            return memo[key]
        if isinstance(y, list):
            out = [walk(i) for i in y]
        elif isinstance(y, tuple) and not hasattr(y, "_fields"):
            out = tuple(walk(i) for i in y)
        elif isinstance(y, dict):
            out = {walk(k): walk(v) for k, v in y.items()}
        elif dataclasses.is_dataclass(y) and not isinstance(y, type):
            changes = {f.name: walk(getattr(y, f.name)) for f in dataclasses.fields(y) if f.init}
            out = y if all(changes[k] is getattr(y, k) for k in changes) else dataclasses.replace(y, **changes)
        else:
            out = y
        memo[key] = out
        return out

    return walk(x)


# -- C spelling --------------------------------------------------------------------------------

_SPELLING: contextvars.ContextVar[str] = contextvars.ContextVar("stitch_extent_spelling", default="ir")


@contextmanager
def c_spelling() -> Iterator[None]:
    """Inside, an Extent prints as C (`st_dim_n`, `ST_FDIV(st_dim_n + 31, 32)`): the C backend's printing."""
    token = _SPELLING.set("c")
    try:
        yield
    finally:
        _SPELLING.reset(token)


def c_symbol(name: str) -> str:
    """The C variable the extents read symbol `name` from: a constant local of every function the
    kernels are written in, a copy of the library's global (`c_symbol_value`) made on entry, so the
    compiler knows no store changes it (a vector store may alias anything)."""
    return "st_dim_" + name


def c_symbol_value(name: str) -> str:
    """The library's global holding symbol `name`'s value, set by stitch_main (targets/c/source.py)."""
    return "st_sym_" + name


def c_locals(symbols) -> str:
    """The declarations of `c_symbol` for each of `symbols`, for the start of a function body."""
    return " ".join(f"const long long {c_symbol(n)} = {c_symbol_value(n)}; (void){c_symbol(n)};" for n in symbols)


def c_text(d: Dim) -> str:
    """A dimension as a C expression of type long long (floor quotients by ST_FDIV)."""
    if isinstance(d, int):
        return str(d)
    parts = []
    for mono, coef in d.terms:
        factors = [c_symbol(a.name) if isinstance(a, Sym) else _c_quot(a) for a in mono]
        if coef != 1 or not factors:
            factors.insert(0, f"{coef}LL")
        parts.append("*".join(factors))
    return "(" + " + ".join(parts) + ")"


def _c_quot(q: Quot) -> str:
    return f"ST_FDIV({c_text(q.num)}, {q.den}LL)"


__all__ = ["BUCKETS", "DEFAULT_RANGE", "Extent", "bucket_tops", "PLANNING_LIMIT", "at", "c_locals", "c_spelling", "c_symbol", "c_symbol_value", "c_text", "dim_of",
           "extent", "instantiate", "is_symbolic", "planned", "planning_values"]
