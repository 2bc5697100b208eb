"""Drawing one instance of a rule for the soundness checker: types, attribute values and inputs.

How each kind of variable is drawn is the contract written in `verdicts.py`'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from ...ir.check import check_func
from ...ir.errors import StitchError
from ...ir.floats import edge_values
from ...ir.interp import np_dtype
from ...ir.ops import ANY, FLOAT, INDEX_DTYPES, INTEGER, OPS
from ...ir.program import FLOAT_DTYPES, Assign, Attr, Call, Const, DTypeName, Expr, Func, Param, TensorType, Var
from ..placement import PLACEMENT_NAMES
from ..rules import CFun, Cond, Pattern, PCall, PLit, PVar
from .constraints import CMP, MAX_RANK, OP_CLASSES, InstanceConstraints, literal_value

MAX_DIM = 5
_ATTR_KINDS = {name: a.kind for spec in OPS.values() for name, a in spec.attrs.items()}
_CAST_TARGETS = ("f32", "f64", "i32", "i64", "bool", "f16", "i8", "u8")


@dataclass
class Instance:
    types: dict[str, TensorType] = field(default_factory=dict)  # tensor variable -> type
    attrs: dict[str, object] = field(default_factory=dict)  # attribute variable -> value
    ops: dict[str, str] = field(default_factory=dict)  # op variable -> the op it stands for

    def params(self) -> tuple[Param, ...]:
        return tuple(Param(v[1:], t) for v, t in self.types.items())

    def describe(self) -> list[str]:
        """The instance for a counterexample: an op variable shown as its op with the attributes its
        calls leave unwritten (`?f = concat(axis=0)`), the operands `..` left out as `?f.0: f32[3]`."""
        out = [f"    {v}: {t}" for v, t in self.types.items()]
        out += [f"    {v} = {show_attr(x)}" for v, x in self.attrs.items() if v.split(".")[0] not in self.ops]
        for v, op in self.ops.items():
            hidden = [f"{name.split('.', 1)[1]}={show_attr(x)}" for name, x in self.attrs.items()
                      if name.startswith(v + ".")]
            out.append(f"    {v} = {op}({', '.join(hidden)})" if hidden else f"    {v} = {op}")
        return out


def show_attr(v) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(map(str, v)) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class Drawer:
    """Draws one instance of a rule without op variables: types, attribute values, then the left side."""

    def __init__(self, draw, facts: InstanceConstraints, reject):
        self.draw = draw
        self.facts = facts
        self.reject = reject
        self.inst = Instance(ops=dict(facts.ops))
        self.pool: list[int] = []

    def instance(self) -> tuple[Instance, Expr, TensorType]:
        """An instance whose left side type-checks and meets the conditions; that side and its type."""
        facts, inst = self.facts, self.inst
        dtypes = self.dtypes()
        self.pool = [1] + self.draw(st.lists(st.integers(2, MAX_DIM), min_size=1, max_size=2))
        shapes = self.shapes()
        for v in facts.tensors:
            inst.types[v] = TensorType(dtypes[v], shapes[v])
        lhs = self.build_left(facts.rule.lhs)
        try:
            left_type = infer_type(inst.params(), lhs)
        except StitchError:
            self.reject("the left side does not type-check")
        if not all(holds(c, inst) for c in facts.rule.conds):
            self.reject("no instance satisfies the conditions")
        return inst, lhs, left_type

    def dtypes(self) -> dict[str, str]:
        specs = self.facts.lhs_specs
        integer = any(s.dtypes == INTEGER for s in specs)
        choices = [] if integer else ["f32", "f64"]
        if all(s.dtypes != FLOAT for s in specs):
            choices += ["i32", "i64", "i8", "u8"]
        if all(s.dtypes == ANY for s in specs):
            choices.append("bool")
        common = self.pick(choices)
        out = {}
        for v in self.facts.tensors:
            if v in self.facts.dtypes:
                dt = self.facts.dtypes[v]
            elif v in self.facts.bool_vars:
                dt = "bool"
            elif v in self.facts.index_vars:
                dt = self.pick(INDEX_DTYPES)
            elif self.facts.has_cast and self.draw(st.integers(0, 4)) == 4:  # now and then, a dtype of its own
                dt = self.pick(_CAST_TARGETS)
            else:
                dt = common
            if v in self.facts.floats and dt not in FLOAT_DTYPES:
                dt = "f32"
            out[v] = dt
        return out

    # Dynamic choices go through integer draws: hypothesis caches the strategies
    # for those, not for sampled_from over a fresh list, which is slow to build.
    def pick(self, items):
        items = list(items)
        return items[self.draw(st.integers(0, len(items) - 1))]

    def shuffled(self, items) -> list:
        """A permutation of `items`; shrinks towards their order."""
        rest, out = list(items), []
        while rest:
            out.append(rest.pop(self.draw(st.integers(0, len(rest) - 1))))
        return out

    def dim(self) -> int:
        return self.pick(self.pool)

    def fresh_shape(self, rank: int) -> tuple[int, ...]:
        return tuple(self.dim() for _ in range(rank))

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Mostly one base shape, or a part of it that broadcasts to it, or a shape of its
        own; for matmul, also one whose rows continue the previous shape's columns."""
        base = self.fresh_shape(self.draw(st.integers(0, MAX_RANK)))
        previous = base
        out = {}
        for c in self.facts.classes:
            if c.fixed is not None:
                shape = c.fixed
            else:
                mode = self.draw(st.integers(0, 5 if self.facts.has_matmul else 3))
                if mode <= 1:
                    shape = base
                elif mode == 2:
                    part = base[len(base) - self.draw(st.integers(0, len(base))):]
                    shape = tuple(1 if self.draw(st.booleans()) else d for d in part)
                elif mode == 3 or not previous:
                    shape = self.fresh_shape(self.draw(st.integers(0, MAX_RANK)))
                else:
                    shape = previous[:-2] + (previous[-1], self.dim())
                if len(shape) not in c.ranks:  # keep the trailing dims, which broadcasting aligns
                    rank = self.pick(c.ranks)
                    shape = self.fresh_shape(rank - len(shape)) + shape[max(len(shape) - rank, 0):] if rank else ()
                shape = list(shape)
                for k, n in c.dims.items():
                    shape[k] = n
                shape = tuple(shape)
            previous = shape
            for v in c.names:
                out[v] = shape
        return out

    def build_left(self, p: Pattern) -> Expr:
        """Like build, drawing each attribute variable's value at its first use."""
        if not isinstance(p, PCall):
            return build(p, self.inst)
        if p.op in PLACEMENT_NAMES:
            return self.build_left(p.args[0])
        args = tuple(self.build_left(a) for a in p.args)
        unbound_attrs = [a for a in p.attrs if isinstance(a.value, PVar) and a.value.name not in self.inst.attrs]
        if unbound_attrs and p.op == "iota":  # no operand: its attributes are its whole type
            for a in sorted(unbound_attrs, key=lambda a: a.name != "shape"):  # the shape before its axis
                self.inst.attrs[a.value.name] = self.iota_attr(p, a.name, a.value.name)
        elif unbound_attrs:
            operand = self.operand_type(args[0])
            drawn = self.slice_attrs(p, operand) if p.op == "slice" else {}
            for a in unbound_attrs:
                value = drawn[a.name] if p.op == "slice" else self.attr_value(a.name, p.op, operand, a.value.name)
                self.inst.attrs[a.value.name] = value
        return _call(p, args, self.inst)

    def operand_type(self, e: Expr) -> TensorType:
        try:
            return infer_type(self.inst.params(), e)
        except StitchError:
            self.reject("the left side does not type-check")

    def iota_attr(self, p: PCall, name: str, var: str):
        """An attribute of an iota: its shape, an axis of the shape (drawn or fixed), or an index dtype."""
        if var in self.facts.attr_fixed:
            return self.facts.attr_fixed[var]
        if name == "dtype":
            return DTypeName(self.pick(INDEX_DTYPES))
        shape = p.attr("shape").value
        shape = self.inst.attrs.get(shape.name, shape) if isinstance(shape, PVar) else shape
        if name == "shape":
            return self.fresh_shape(self.draw(st.integers(1, MAX_RANK)))
        if not isinstance(shape, tuple) or not shape:
            self.reject("the left side does not type-check")
        return self.draw(st.integers(0, len(shape) - 1))

    def slice_attrs(self, p: PCall, t: TensorType) -> dict[str, tuple[int, ...]]:
        """All four attributes of a slice of `t` in normal form, keeping the ones the pattern fixes."""
        known = {}
        for a in p.attrs:
            value = a.value
            if isinstance(value, PVar):
                value = self.inst.attrs.get(value.name, self.facts.attr_fixed.get(value.name))
            if value is not None:
                known[a.name] = value
        if "axes" in known:
            axes = tuple(known["axes"])
        else:
            given = [len(v) for v in known.values() if isinstance(v, tuple)]
            var = p.attr("axes").value.name if p.attr("axes") is not None else ""
            lens = [n for n in range(t.rank + 1) if all(CMP[c](n, v) for c, v in self.facts.attr_lens.get(var, ()))]
            lens = [n for n in lens if not given or n == given[0]]
            if not lens:
                self.reject("no instance satisfies the conditions")
            axes = tuple(sorted(self.shuffled(range(t.rank))[: self.pick(lens)]))
        if any(not 0 <= a < t.rank for a in axes):
            self.reject("the left side does not type-check")
        out: dict[str, list[int]] = {"starts": [], "ends": [], "steps": []}
        for k, a in enumerate(axes):
            dim = t.shape[a]
            start = known["starts"][k] if "starts" in known else self.draw(st.integers(0, dim - 1))
            end = known["ends"][k] if "ends" in known else self.draw(st.integers(min(start + 1, dim), dim))
            step = known["steps"][k] if "steps" in known else self.draw(st.integers(1, 3))
            out["starts"].append(start)
            out["ends"].append(end)
            out["steps"].append(step)
        return {"axes": axes, **{k: tuple(v) for k, v in out.items()}}

    def attr_value(self, name: str, op: str, t: TensorType, var: str = ""):
        if var in self.facts.attr_fixed:
            return self.facts.attr_fixed[var]
        kind = _ATTR_KINDS[name]
        if kind == "int":  # an axis, non-negative as the e-graph holds it
            if not t.rank:
                self.reject("the left side does not type-check")
            return self.draw(st.integers(0, t.rank - 1))
        if kind == "axes":
            lens = [n for n in range(t.rank + 1) if all(CMP[c](n, v) for c, v in self.facts.attr_lens.get(var, ()))]
            if not lens:
                self.reject("no instance satisfies the conditions")
            n = self.pick(lens)
            return tuple(sorted(self.shuffled(range(t.rank))[:n]))
        if kind == "bool":
            return self.draw(st.booleans())
        if kind == "perm":
            return tuple(self.shuffled(range(t.rank)))
        if kind == "dtype":
            return DTypeName(self.pick(_CAST_TARGETS))
        if op == "broadcast_to":
            lead = self.draw(st.integers(0, max(MAX_RANK - t.rank, 0)))
            return self.fresh_shape(lead) + tuple(self.dim() if d == 1 else d for d in t.shape)
        return self.factorize(t.size)

    def factorize(self, size: int) -> tuple[int, ...]:
        """A shape with `size` elements, for reshape."""
        rank = self.draw(st.integers(0 if size == 1 else 1, MAX_RANK))
        dims = []
        for _ in range(rank - 1):
            d = self.pick([q for q in range(1, size + 1) if size % q == 0])
            dims.append(d)
            size //= d
        return tuple(dims + [size]) if rank else ()


def build(p: Pattern, inst: Instance) -> Expr:
    """The instance's expression for a pattern whose variables are all bound."""
    if isinstance(p, PVar):
        return Var(p.name[1:])
    if isinstance(p, PLit):
        return Const(p.value)
    if p.op in PLACEMENT_NAMES:
        return build(p.args[0], inst)
    return _call(p, tuple(build(a, inst) for a in p.args), inst)


def _call(p: PCall, args: tuple[Expr, ...], inst: Instance) -> Call:
    attrs = [Attr(a.name, inst.attrs[a.value.name] if isinstance(a.value, PVar) else a.value) for a in p.attrs]
    order = list(OPS[p.op].attrs)
    return Call(p.op, args, tuple(sorted(attrs, key=lambda a: order.index(a.name))))


def infer_type(params: tuple[Param, ...], e: Expr) -> TensorType:
    """The type the checker gives `e` over `params`; raises StitchError if `e` does not check."""
    if isinstance(e, Var):
        for p in params:
            if p.name == e.name:
                return p.type
    # "?" keeps the name apart from the parameters, which are rule variables without it.
    graph = check_func(Func("infer", params, (), (Assign("?value", e),), ()))
    return graph.nodes[-1].type  # the node `e` added last (a Var added none, handled above)


def holds(c: Cond, inst: Instance) -> bool:
    if c.name == "input":
        return True  # every tensor variable of an instance is drawn as an input of the program
    if c.name == "not_broadcast":
        return True  # a condition on the schedule (a placement's legality), not on values
    if c.name in OP_CLASSES:
        return True  # on a tensor variable it holds for every instance (see verdicts.py)
    if c.name == "literal" or any(a.name == "value" for a in c.args):
        return True  # the variable is a scalar input drawn with values that meet the tests
    names = [a.args[0] for a in c.args if a.name == "var"]
    if c.name == "scalar":
        return inst.types[names[0]].rank == 0
    if c.name == "float":
        return inst.types[names[0]].dtype in FLOAT_DTYPES
    if c.name == "same_shape":
        return inst.types[names[0]].shape == inst.types[names[1]].shape
    left, right = (_term(t, inst) for t in c.args)
    if left is None or right is None:
        return False
    try:
        return bool(CMP[c.name](left, right))
    except TypeError:  # e.g. a shape ordered against a number
        return False


def _term(t: CFun, inst: Instance):
    if t.name == "lit":
        return literal_value(t)
    if t.name == "var":
        return inst.attrs[t.args[0]]
    subject = t.args[0].args[0]
    if t.name == "len":
        value = inst.attrs[subject]
        return len(value) if isinstance(value, tuple) else None
    typ = inst.types[subject]
    if t.name == "dim":
        k = t.args[1].args[0]
        return typ.shape[k] if -typ.rank <= k < typ.rank else None
    # A variable is a parameter of the instance; a parameter's iteration space is its shape.
    return {"rank": typ.rank, "size": typ.size, "dtype": DTypeName(typ.dtype), "shape": typ.shape,
            "space": typ.shape}[t.name]


EDGE_VALUES = ("0, -0.0, 1, -1, +-inf, nan, +-max, +-max/2, +-sqrt(max)*2, +-(log(max) + 1), +-100, "
               "+-tiny (smallest normal), +-smallest subnormal of the float dtype; 0, 1, -1, min, max, min + 1 of "
               "a signed integer dtype (0, 1, max, max - 1, 128 of u8); mixed with ordinary values")


def draw_inputs(draw, params: tuple[Param, ...], positive: bool, bounds: dict[str, int],
                 edge: bool = False, literals: dict[str, list] | None = None) -> dict[str, np.ndarray]:
    out = {}
    literals = literals or {}
    for p in params:
        dt = p.type.dtype
        if f"?{p.name}" in literals:
            value = draw(_literal_values(dt, literals[f"?{p.name}"], positive, edge))
            out[p.name] = np.array(value, dtype=np_dtype(dt))
            continue
        if p.name in bounds:  # gather's indices, negative ones too
            elements = st.integers(-bounds[p.name], bounds[p.name] - 1)
        elif dt in FLOAT_DTYPES:
            width = {"f16": 16, "f32": 32, "f64": 64}[dt]
            elements = st.floats(1 / 16 if positive else -3.0, 3.0, width=width, allow_subnormal=False)
        elif dt == "bool":
            elements = st.booleans()
        else:
            elements = st.integers(1 if positive else max(-8, int(np.iinfo(np_dtype(dt)).min)), 8)
        if edge and dt != "bool" and p.name not in bounds:
            elements = st.one_of(st.sampled_from(edge_values(dt)), elements)
        # A flat list is much cheaper to draw than hypothesis.extra.numpy.arrays, and shrinks as well.
        flat = draw(st.lists(elements, min_size=p.type.size, max_size=p.type.size))
        out[p.name] = np.array(flat, dtype=np_dtype(dt)).reshape(p.type.shape)
    return out


def _literal_values(dt: str, tests: list[tuple[str, float]], positive: bool, edge: bool):
    """Values of a literal that meet its value() tests: ordinary ones in the inputs' range where the
    tests allow, else in the tests' own range; with `edge`, the finite edge values that meet them
    too. Never -0.0 (no literal of the e-graph holds it: egraph.const_term), nan or inf (a literal's
    value() never matches them: rulecompile._value)."""
    def ok(v) -> bool:
        return bool(np.isfinite(v)) and not (v == 0 and np.signbit(v)) and all(CMP[op](v, n) for op, n in tests)

    lo, hi = (1 / 16 if positive else -3.0), 3.0
    floor = max((n for op, n in tests if op in (">", ">=", "==")), default=-np.inf)
    ceiling = min((n for op, n in tests if op in ("<", "<=", "==")), default=np.inf)
    if max(lo, floor) > min(hi, ceiling):  # the tests leave the ordinary range: draw in theirs
        lo, hi = -np.inf, np.inf
    lo, hi = max(lo, floor), min(hi, ceiling)
    if dt in FLOAT_DTYPES:
        width = {"f16": 16, "f32": 32, "f64": 64}[dt]
        t = np_dtype(dt).type
        big = np.finfo(t).max
        low, high = t(max(lo, -big)), t(min(hi, big))  # the bounds in the dtype, inside the range
        low = low if low >= lo else np.nextafter(low, t(np.inf))
        high = high if high <= hi else np.nextafter(high, t(-np.inf))
        elements = st.floats(float(low), float(high), width=width, allow_subnormal=False)
    else:
        info = np.iinfo(np_dtype(dt))
        elements = st.integers(int(max(np.ceil(lo), info.min)), int(min(np.floor(hi), info.max)))
    if edge:
        extremes = [v for v in edge_values(dt) if ok(v)]
        if extremes:
            elements = st.one_of(st.sampled_from(extremes), elements)
    return elements.filter(ok)


