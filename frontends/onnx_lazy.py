"""Values of an import with symbolic dimensions that the importer knows as formulas (`Lazy`): shape
vectors whose entries are dimensions (`[1, n, 768]`), positions (`arange(past, past + n)`), and the
masks and fills built from them. They are carried symbolically, as onnxruntime's symbolic shape
inference carries them, and become program values only when data needs them.

A `Lazy` tensor has a shape of dimensions, and its element at position j is

    values[j on the static axes] + sum over the symbolic axes k of coefs[k][j on the static axes] * j[k]

`values` holds one entry per position of the static axes (or one, broadcast, along an axis that does
not vary) and none along a symbolic axis, along which the element varies only through its coefficient:
a shape vector is `values` alone, `arange(n)` is values [0] and coefficient 1 along its axis of n, a
fill of [1, n, n] is one value. Entries are dimensions (ints or `dims.Expr`) for integers, Python
floats or bools for the other dtypes; coefficients are ints, and bools have none.

Every operation here either gives the exact result as a formula or raises `NotLazy` (the importer
then emits the op as program code); a comparison is decided only when it holds the same way for every
value of the symbols in their ranges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.ir import dims
from ..engine.ir.check import broadcast_shapes

INT_DTYPES = ("i32", "i64")


class NotLazy(Exception):
    """This op on these values has no formula: emit it as program code."""


@dataclass(frozen=True, eq=False)
class Lazy:
    dtype: str
    shape: tuple[dims.Dim, ...]
    values: np.ndarray  # object array of the tensor's rank (see the module's docstring)
    coefs: tuple[tuple[int, np.ndarray], ...] = ()  # (symbolic axis, object array of ints), by axis

    @property
    def rank(self) -> int:
        return len(self.shape)

    def coef(self, axis: int) -> np.ndarray:
        """The coefficient along `axis` (zero where there is none), shaped like the values."""
        return next((c for a, c in self.coefs if a == axis), obj(np.zeros((1,) * self.rank, np.int64)))

    @property
    def symbolic(self) -> bool:
        """Whether an entry is a symbolic expression."""
        return any(isinstance(v, dims.Expr) for v in self.values.flat)


def flat(*arrays) -> list:
    """The arrays broadcast together, each as its flat iterator (to zip entry by entry)."""
    return [a.flat for a in np.broadcast_arrays(*arrays)]


def each(f, *arrays) -> np.ndarray:
    """f entry by entry over the arrays broadcast together: an object array (0-d ones too)."""
    out = np.empty(np.broadcast_shapes(*(np.shape(a) for a in arrays)), dtype=object)
    out[...] = np.frompyfunc(f, len(arrays), 1)(*arrays)
    return out


def obj(a) -> np.ndarray:
    """An object array of Python scalars (numpy's scalars do not mix with dims.Expr)."""
    a = np.asarray(a)
    return a if a.dtype == object else a.astype(object)


def lift(x) -> Lazy:
    """A Lazy of a known array (static shape, its values) or a Lazy itself."""
    if isinstance(x, Lazy):
        return x
    from ..engine.ir.interp import DTYPE_OF_NP

    a = np.asarray(x)
    if a.dtype not in DTYPE_OF_NP:
        raise NotLazy(f"a tensor of dtype {a.dtype}")
    return Lazy(DTYPE_OF_NP[a.dtype], tuple(int(d) for d in a.shape), obj(a))


def fold(x: Lazy) -> Lazy:
    """x with its coefficients along static axes folded into the values and zero ones dropped."""
    values, coefs = x.values, []
    for axis, c in x.coefs:
        d = x.shape[axis]
        if isinstance(d, int):
            values = values + c * along(axis, d, x.rank)
        elif any(v != 0 for v in c.flat):
            coefs.append((axis, c))
    return Lazy(x.dtype, x.shape, compact(values, x.shape), tuple((a, compact(c, x.shape)) for a, c in coefs))


def settle(x: Lazy) -> Lazy | np.ndarray:
    """The canonical form (`fold`); a tensor of static shape and values is its numpy array."""
    x = fold(x)
    if not x.coefs and all(isinstance(d, int) for d in x.shape) and not x.symbolic:
        from ..engine.ir.interp import np_dtype

        return np.array(np.broadcast_to(x.values, x.shape), dtype=np_dtype(x.dtype))
    return x


def compact(a: np.ndarray, shape) -> np.ndarray:
    """`a` with each static axis along which it does not vary cut to length 1."""
    a = obj(a)
    for k in range(a.ndim):
        assert a.shape[k] == 1 or isinstance(shape[k], int), "values vary along a symbolic axis"
        if a.shape[k] > 1 and all_equal(a, k):
            a = a.take([0], axis=k)
    return a


def all_equal(a: np.ndarray, axis: int) -> bool:
    first = a.take([0], axis=axis)
    return all(x == y for x, y in zip(np.broadcast_to(first, a.shape).flat, a.flat))


def along(axis: int, d: int, rank: int) -> np.ndarray:
    """0, 1, ..., d - 1 along `axis` of a rank-`rank` object array."""
    shape = [1] * rank
    shape[axis] = d
    return obj(np.arange(d, dtype=np.int64).reshape(shape))


def pattern(x: Lazy) -> tuple[int, ...]:
    """The shape the values and coefficients broadcast to: the static dimensions, 1 for symbolic ones."""
    return tuple(d if isinstance(d, int) else 1 for d in x.shape)


def is_fill(x: Lazy) -> bool:
    """One value everywhere."""
    return not x.coefs and x.values.size == 1


def fill(dtype: str, shape, value) -> Lazy:
    return Lazy(dtype, tuple(shape), obj(np.full((1,) * len(shape), value, dtype=object)))


def with_rank(x: Lazy, rank: int) -> Lazy:
    """x with leading axes of 1 up to `rank` (numpy's broadcasting)."""
    extra = rank - x.rank
    if extra <= 0:
        return x
    return Lazy(x.dtype, (1,) * extra + x.shape, x.values.reshape((1,) * extra + x.values.shape),
                tuple((a + extra, c.reshape((1,) * extra + c.shape)) for a, c in x.coefs))


def broadcast(x: Lazy, shape) -> Lazy:
    """x broadcast to `shape` (numpy's rules; a symbolic dimension only with itself and 1)."""
    got = broadcast_shapes(x.shape, tuple(shape))
    if got is None or got != tuple(shape):
        raise NotLazy(f"{list(x.shape)} does not broadcast to {list(shape)}")
    x = with_rank(x, len(shape))
    return Lazy(x.dtype, tuple(shape), x.values, x.coefs)


def common(xs: list[Lazy]) -> tuple[list[Lazy], tuple]:
    """The operands broadcast to one shape."""
    shape: tuple | None = ()
    for x in xs:
        shape = broadcast_shapes(shape, x.shape)
        if shape is None:
            raise NotLazy("the shapes do not broadcast")
    return [broadcast(x, shape) for x in xs], shape


def coef_table(xs: list[Lazy]) -> dict[int, list[np.ndarray]]:
    """Each symbolic axis with a coefficient in some operand -> every operand's coefficient along it."""
    axes = sorted({a for x in xs for a, _ in x.coefs})
    return {a: [x.coef(a) for x in xs] for a in axes}


# -- arithmetic ------------------------------------------------------------------------------------------


def add(a: Lazy, b: Lazy, sign: int = 1) -> Lazy:
    (a, b), shape = common([a, b])
    coefs = tuple((k, ca + sign * cb) for k, (ca, cb) in coef_table([a, b]).items())
    return Lazy(a.dtype, shape, a.values + sign * b.values, coefs)


def mul(a: Lazy, b: Lazy) -> Lazy:
    (a, b), shape = common([a, b])
    if a.coefs and b.coefs:
        raise NotLazy("a product of two tensors that vary with the positions")
    if b.coefs:
        a, b = b, a
    if a.coefs and any(not isinstance(v, int) for v in b.values.flat):
        raise NotLazy("positions times a symbolic or fractional factor")
    return Lazy(a.dtype, shape, a.values * b.values, tuple((k, c * b.values) for k, c in a.coefs))


def floor_div(a: Lazy, b: Lazy, ranges, mod: bool = False) -> Lazy:
    """Integer Div (which truncates: the same as floor for non-negative numerators) or Mod by positive
    constants; along a symbolic axis only where the divisor divides the coefficient."""
    (a, b), shape = common([a, b])
    if b.coefs or any(not isinstance(v, int) or v <= 0 for v in b.values.flat):
        raise NotLazy("a division by a value that is not a positive constant")
    if not mod and not provably_all(a, lambda lo, hi: lo >= 0, ranges):
        raise NotLazy("a division of a value that may be negative (Div truncates toward zero)")
    for _, c in a.coefs:
        if any(v % k for v, k in zip(*flat(c, b.values))):
            raise NotLazy("a division that does not divide the positions' coefficient")
    op = dims.mod if mod else dims.floordiv
    values = each(op, a.values, b.values)
    coefs = () if mod else tuple((k, each(lambda x, y: x // y, c, b.values)) for k, c in a.coefs)
    return Lazy(a.dtype, shape, obj(values), coefs)


def negate(a: Lazy) -> Lazy:
    return Lazy(a.dtype, a.shape, -a.values, tuple((k, -c) for k, c in a.coefs))


# -- comparisons, decided where they hold the same way for every value of the symbols -------------------


def extremes(x: Lazy, ranges) -> tuple[np.ndarray, np.ndarray]:
    """Per entry of the values: the lowest and highest bound over the positions and the symbols' ranges."""
    lo, hi = x.values, x.values
    for axis, c in x.coefs:
        last = dims.add(x.shape[axis], -1)  # the last position along the axis
        lo = lo + each(lambda k: dims.mul(min(k, 0), last), c)
        hi = hi + each(lambda k: dims.mul(max(k, 0), last), c)
    low = each(lambda e: bound(e, ranges)[0], lo)
    high = each(lambda e: bound(e, ranges)[1], hi)
    return obj(low), obj(high)


def bound(e, ranges) -> tuple:
    if isinstance(e, (bool, float)):
        return e, e
    return dims.bounds(e, ranges)


def provably_all(x: Lazy, test, ranges) -> bool:
    lo, hi = extremes(x, ranges)
    return all(test(a, b) for a, b in zip(*flat(lo, hi)))


COMPARISONS = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")


def verdicts(d: Lazy, test, ranges) -> np.ndarray:
    """test(lowest, highest, value) per entry of d's values (True, False, or None: not decided), as a
    bool array shaped like the entries; NotLazy if one is not decided."""
    lo, hi = extremes(d, ranges)
    out = [test(low, high, v) for low, high, v in zip(*flat(lo, hi, d.values))]
    if None in out:
        raise NotLazy("a comparison that is not decided for every position and every value of the symbols")
    return np.array(out, dtype=bool).reshape(np.broadcast_shapes(lo.shape, d.values.shape))


def compare(op: str, a: Lazy, b: Lazy, ranges) -> Lazy:
    """A comparison whose every entry holds, or fails, for all positions and symbol values."""
    if op in ("Greater", "GreaterOrEqual"):
        return compare(op.replace("Greater", "Less"), b, a, ranges)
    if a.dtype not in INT_DTYPES and (a.coefs or b.coefs or a.symbolic or b.symbolic):
        raise NotLazy("a comparison of non-integers that vary")
    d = add(a, b, -1)
    if op == "Equal":
        def test(low, high, v):
            return True if not d.coefs and isinstance(v, (int, float)) and v == 0 else \
                False if low > 0 or high < 0 else None
    elif op == "Less":
        def test(low, high, v):
            return True if high < 0 else False if low >= 0 else None
    else:  # LessOrEqual
        def test(low, high, v):
            return True if high <= 0 else False if low > 0 else None
    return Lazy("bool", d.shape, obj(verdicts(d, test, ranges)))


def choose(which: np.ndarray, a: Lazy, b: Lazy, shape) -> Lazy:
    """Entry-wise a where `which`, else b (which is constant along the symbolic axes)."""
    a, b = broadcast(a, shape), broadcast(b, shape)
    coefs = tuple((k, obj(np.where(which, ca, cb))) for k, (ca, cb) in coef_table([a, b]).items())
    return Lazy(a.dtype, tuple(shape), obj(np.where(which, a.values, b.values)), coefs)


def where(c: Lazy, a: Lazy, b: Lazy) -> Lazy:
    if c.coefs:
        raise NotLazy("a condition that varies with the positions")
    (c, a, b), shape = common([c, a, b])
    return choose(c.values.astype(bool), a, b, shape)


def extreme(op: str, a: Lazy, b: Lazy, ranges) -> Lazy:
    """Max or Min, decided entry by entry: one operand is the larger (smaller) for every position and value."""
    (a, b), shape = common([a, b])
    if a.dtype not in INT_DTYPES and (a.coefs or b.coefs or a.symbolic or b.symbolic):
        raise NotLazy("an extreme of non-integers that vary")
    first = verdicts(add(a, b, -1), lambda low, high, v: True if low >= 0 else False if high <= 0 else None, ranges)
    return choose(first if op == "Max" else ~first, a, b, shape)


def logic(op: str, a: Lazy, b: Lazy | None = None) -> Lazy:
    """Not, And, Or, Xor of booleans (which never vary with the positions)."""
    if op == "Not":
        return Lazy("bool", a.shape, obj(~a.values.astype(bool)))
    (a, b), shape = common([a, b])
    f = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}[op]
    return Lazy("bool", shape, obj(f(a.values.astype(bool), b.values.astype(bool))))


def cast(x: Lazy, dtype: str, ranges) -> Lazy:
    """A conversion that keeps every value exactly (ints to ints or floats, integral floats to ints,
    numbers to bools when each is decided zero or not)."""
    if dtype == x.dtype:
        return x
    if dtype == "bool":
        zero = Lazy(x.dtype, (), obj(np.array(False if x.dtype == "bool" else 0, dtype=object)))
        return logic("Not", compare("Equal", x, zero, ranges))
    if x.dtype == "bool":
        return Lazy(dtype, x.shape, obj(x.values.astype(float if dtype not in INT_DTYPES else int)))
    if dtype in INT_DTYPES:
        if any(isinstance(v, float) and not v.is_integer() for v in x.values.flat):
            raise NotLazy("a cast of fractional values to an integer")
        values = each(lambda v: int(v) if isinstance(v, float) else v, x.values)
        return Lazy(dtype, x.shape, obj(values), x.coefs)
    from ..engine.ir.interp import np_dtype

    rounded = np_dtype(dtype).type  # a number as the float dtype holds it (a large int rounds in f32)
    values = each(lambda v: float(rounded(v)) if isinstance(v, (int, float)) else v, x.values)
    return Lazy(dtype, x.shape, obj(values), x.coefs)


# -- data movement -----------------------------------------------------------------------------------------


def reshape(x: Lazy, shape) -> Lazy:
    """x in a new shape: when it is one value, when the reshape only adds or drops axes of 1, or when
    both shapes are static."""
    shape, x = tuple(shape), fold(x)
    if is_fill(x):
        return Lazy(x.dtype, shape, x.values.reshape((1,) * len(shape)))
    kept = [k for k, d in enumerate(x.shape) if d != 1]
    new = [k for k, d in enumerate(shape) if d != 1]
    if [x.shape[k] for k in kept] == [shape[k] for k in new]:
        place = dict(zip(kept, new))

        def moved(a: np.ndarray) -> np.ndarray:
            out = [1] * len(shape)
            for k in kept:
                out[place[k]] = a.shape[k]
            return a.reshape(out)

        return Lazy(x.dtype, shape, moved(x.values), tuple((place[k], moved(c)) for k, c in x.coefs))
    if all(isinstance(d, int) for d in x.shape + shape):
        return Lazy(x.dtype, shape, obj(np.broadcast_to(x.values, x.shape).reshape(shape)))
    raise NotLazy(f"a reshape of {list(x.shape)} to {list(shape)} that moves positions between axes")


def transpose(x: Lazy, perm) -> Lazy:
    inverse = {p: k for k, p in enumerate(perm)}
    return Lazy(x.dtype, tuple(x.shape[p] for p in perm), x.values.transpose(perm),
                tuple(sorted((inverse[a], c.transpose(perm)) for a, c in x.coefs)))


def slice_axis(x: Lazy, axis: int, start, length, step: int) -> Lazy:
    """Positions start, start + step, ... (length of them) along `axis` (bounds already normalized)."""
    x = fold(x)
    d = x.shape[axis]
    shape = x.shape[:axis] + (length,) + x.shape[axis + 1:]
    if isinstance(d, int) and isinstance(start, int) and isinstance(length, int):
        picked = range(start, start + step * length, step)

        def cut(a: np.ndarray) -> np.ndarray:
            return a if a.shape[axis] == 1 else a.take(picked, axis=axis)

        return Lazy(x.dtype, shape, cut(x.values), tuple((k, cut(c)) for k, c in x.coefs))
    if isinstance(d, int):  # a static axis cut to a symbolic length: its values must be a progression
        x = progression(x, axis)
    c = x.coef(axis)
    coefs = tuple((a, cc * step if a == axis else cc) for a, cc in x.coefs)
    return Lazy(x.dtype, shape, x.values + c * start, coefs)


def progression(x: Lazy, axis: int) -> Lazy:
    """x with its values along a static axis written as a first value and a coefficient."""
    v = np.broadcast_to(x.values, pattern(x))
    first = v.take([0], axis=axis)
    step = v.take([1], axis=axis) - first if v.shape[axis] > 1 else first * 0
    if any(not isinstance(s, int) for s in step.flat) or any(
            y != f + s * k for k in range(v.shape[axis])
            for y, f, s in zip(v.take([k], axis=axis).flat, first.flat, step.flat)):
        raise NotLazy("a cut of values that are no arithmetic progression to a symbolic length")
    return Lazy(x.dtype, x.shape, first, tuple(sorted(x.coefs + ((axis, obj(step)),), key=lambda t: t[0])))


def concat(parts: list[Lazy], axis: int) -> Lazy:
    """Along a static axis, the values side by side; along a symbolic one, only pieces that continue
    one progression (`[-1]` then `arange(n)` is `arange(-1, n)`)."""
    parts = [fold(p) for p in parts]
    total = 0
    for p in parts:
        total = dims.add(total, p.shape[axis])
    shape = parts[0].shape[:axis] + (total,) + parts[0].shape[axis + 1:]
    if all(isinstance(p.shape[axis], int) for p in parts):
        full = [Lazy(p.dtype, p.shape, np.broadcast_to(p.values, pattern(p)), p.coefs) for p in parts]
        values = np.concatenate([p.values for p in full], axis=axis)
        coefs = tuple((k, obj(np.concatenate([np.broadcast_to(c, pattern(p)) for c, p in zip(cs, full)], axis=axis)))
                      for k, cs in coef_table(full).items())
        return Lazy(parts[0].dtype, shape, obj(values), coefs)
    k = next(i for i, p in enumerate(parts) if not isinstance(p.shape[axis], int))
    before = 0
    for p in parts[:k]:
        before = dims.add(before, p.shape[axis])
    step = parts[k].coef(axis)
    coefs = tuple(sorted([(a, c) for a, c in parts[k].coefs if a != axis] + [(axis, step)], key=lambda t: t[0]))
    merged = fold(Lazy(parts[0].dtype, shape, parts[k].values - step * before, coefs))
    offset = 0
    for p in parts:
        if not same(settle(slice_axis(merged, axis, offset, p.shape[axis], 1)), settle(p)):
            raise NotLazy("a concat of pieces that do not continue one progression")
        offset = dims.add(offset, p.shape[axis])
    return merged


def same(a, b) -> bool:
    """Whether two settled values are the same tensor."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and np.array_equal(a, b)
    if a.shape != b.shape or [k for k, _ in a.coefs] != [k for k, _ in b.coefs]:
        return False
    pairs = [(a.values, b.values)] + [(ca, cb) for (_, ca), (_, cb) in zip(a.coefs, b.coefs)]
    return all(all(x == y for x, y in zip(*flat(p, q))) for p, q in pairs)


def nonnegative(idx: Lazy, d, ranges) -> Lazy:
    """Positions with those counted from the end (negative) made positions from the start; each must be
    one or the other for every value of the symbols."""
    if provably_all(idx, lambda lo, hi: lo >= 0, ranges):
        return idx
    if provably_all(idx, lambda lo, hi: hi < 0, ranges):
        return Lazy(idx.dtype, idx.shape, idx.values + d, idx.coefs)
    raise NotLazy("positions that may be negative for some values of the symbols and not for others")


def varies(x: Lazy, axis: int) -> bool:
    """Whether x's values or a coefficient differ along a static axis."""
    return any(a.shape[axis] > 1 for a in [x.values] + [c for _, c in x.coefs])


def take(x: Lazy, idx: Lazy, axis: int, ranges) -> Lazy:
    """Gather: x at the positions `idx` along `axis`. Where x varies along the axis only through its
    coefficient, the result is x's formula at idx's (any idx); else idx must be static integers."""
    x, idx = fold(x), fold(idx)
    if varies(x, axis) and (idx.coefs or idx.symbolic):  # a progression along the axis: its formula
        x = progression(x, axis)
    d, r = x.shape[axis], idx.rank
    out_shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]

    def spread(a: np.ndarray, inner: np.ndarray | None = None) -> np.ndarray:
        """a (x's rank, length 1 along `axis`) with `axis` replaced by idx's axes, times `inner` there."""
        a = a.reshape(a.shape[:axis] + (1,) * r + a.shape[axis + 1:])
        return a if inner is None else a * inner.reshape((1,) * axis + inner.shape + (1,) * (x.rank - axis - 1))

    if not varies(x, axis):
        idx = nonnegative(idx, d, ranges)
        c = x.coef(axis)
        others = [(k if k < axis else k + r - 1, spread(cc)) for k, cc in x.coefs if k != axis]
        values = spread(x.values) + spread(c, idx.values)
        coefs = others + [(axis + k, spread(c, ci)) for k, ci in idx.coefs]
        return Lazy(x.dtype, out_shape, obj(values), tuple(sorted(coefs, key=lambda t: t[0])))
    if idx.coefs or idx.symbolic:
        raise NotLazy("positions that vary, into values that vary along the axis")
    positions = idx.values.astype(np.int64)
    if positions.size and (positions.min() < -d or positions.max() >= d):
        raise NotLazy("a position out of range")
    positions = np.where(positions < 0, positions + d, positions)

    def pick(a: np.ndarray) -> np.ndarray:
        return spread(a) if a.shape[axis] == 1 else a.take(positions, axis=axis)

    coefs = [(k if k < axis else k + r - 1, pick(c)) for k, c in x.coefs]
    return Lazy(x.dtype, out_shape, obj(pick(x.values)), tuple(coefs))


def take_elements(x: Lazy, idx: Lazy, axis: int, ranges) -> Lazy:
    """GatherElements where x varies along `axis` only through its coefficient and idx has x's shape
    on the other axes: x's formula with idx's values along the axis."""
    x, idx = fold(x), fold(idx)
    if varies(x, axis) and isinstance(x.shape[axis], int):
        x = progression(x, axis)
    if x.rank != idx.rank or any(idx.shape[k] != x.shape[k] for k in range(x.rank) if k != axis) or varies(x, axis):
        raise NotLazy("GatherElements of values that vary along the axis, or of another shape")
    idx = nonnegative(idx, x.shape[axis], ranges)
    c = x.coef(axis)
    table = coef_table([Lazy(x.dtype, idx.shape, x.values, tuple(kc for kc in x.coefs if kc[0] != axis)),
                        Lazy(idx.dtype, idx.shape, idx.values, tuple((k, c * ci) for k, ci in idx.coefs))])
    coefs = tuple((k, a + b) for k, (a, b) in table.items())
    return Lazy(x.dtype, idx.shape, obj(x.values + c * idx.values), coefs)


def take_nd(x: Lazy, idx: Lazy, ranges) -> Lazy:
    """GatherND (batch_dims 0) where x varies along the indexed axes only through one coefficient each."""
    x, idx = fold(x), fold(idx)
    m = idx.shape[-1]
    if not isinstance(m, int) or not 1 <= m <= x.rank:
        raise NotLazy("GatherND of a symbolic number of indexed axes")
    arrays = [x.values] + [c for _, c in x.coefs]
    if any(s != 1 for a in arrays for s in a.shape[:m]):
        raise NotLazy("GatherND of values that vary along the indexed axes")
    lead, rest = idx.shape[:-1], x.shape[m:]
    base = Lazy(x.dtype, rest, x.values.reshape(x.values.shape[m:]),
                tuple((a - m, c.reshape(c.shape[m:])) for a, c in x.coefs if a >= m))
    total = broadcast(base, lead + rest)
    for k in range(m):
        c = x.coef(k).reshape(-1)[0]
        if c == 0:
            continue
        component = reshape(slice_axis(idx, idx.rank - 1, k, 1, 1), lead + (1,) * len(rest))
        if not provably_all(component, lambda lo, hi: lo >= 0, ranges):
            raise NotLazy("GatherND positions that may be negative")
        total = add(total, mul(component, Lazy(x.dtype, (), obj(np.array(c)))))
    return total


def cumsum(x: Lazy, axis: int, exclusive: bool, reverse: bool) -> Lazy:
    """CumSum along an axis along which x is constant, of a tensor without positions elsewhere:
    v * (j + 1) from the start, v * j exclusive; v * (d - j) reversed, v * (d - 1 - j) both."""
    x = fold(x)
    d = x.shape[axis]
    if isinstance(d, int):  # linear: the values' and each coefficient's sums

        def summed(a: np.ndarray) -> np.ndarray:
            a = np.broadcast_to(a, a.shape[:axis] + (d,) + a.shape[axis + 1:])
            a = np.flip(a, axis) if reverse else a
            s = np.cumsum(a, axis=axis) - (a if exclusive else 0)
            return obj(np.flip(s, axis) if reverse else s)

        return Lazy(x.dtype, x.shape, summed(x.values), tuple((k, summed(c)) for k, c in x.coefs))
    if x.coefs or x.symbolic:
        raise NotLazy("a CumSum of values that vary")
    v = x.values
    if reverse:
        return Lazy(x.dtype, x.shape, v * dims.add(d, -1 if exclusive else 0), ((axis, -v),))
    return Lazy(x.dtype, x.shape, v * 0 if exclusive else v, ((axis, v),))
