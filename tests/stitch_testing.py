"""Hypothesis strategies: random well-typed programs and inputs for them.

Programs are drawn goal-first. To build an expression of type T, pick an op
that can produce T, choose operand types that make it produce exactly T, and
recurse until a leaf: a name already bound to T (so values are shared and the
func is a DAG, not a tree) or a new parameter. Scalar literals appear where
another operand fixes their dtype (now and then inf, -inf or nan in a float
context). Every op of `ops.OPS` can be drawn (iota where an i32 or i64 tensor
is wanted), and the result type-checks by construction; `tests/test_check.py`
holds us to that.

The movement ops (slice, concat, gather) are drawn only with `movement=True`
(off by default until every later stage handles them). gather's indices are
a parameter of their own (or an integer literal) whose values `inputs_for`
draws in range, from the graph (`interp.index_bounds`).

Pass tests read as Before/After text: `plan_of`, `schedule_of` and `loops_of`
take a program's `.ir` text through the pipeline and print the stage a test
compares (the schedule's structure without its prices, `--emit schedule`,
`--emit loops`). A test of fusion and tiling compares `plan_of`, so that a change
of the cost model's numbers does not rewrite it; a test of prices asserts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import hypothesis.extra.numpy as hnp
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from stitch.engine.ir.check import broadcast_shapes, check_func, clamp_slice
from stitch.engine.ir.floats import edge_values
from stitch.engine.ir.graph import Graph
from stitch.engine.ir.interp import index_bounds, np_dtype
from stitch.engine.ir.ops import ANY, FLOAT, INDEX_DTYPES, INTEGER, NUMERIC, OPS
from stitch.engine.ir.program import (
    DTYPES,
    FLOAT_DTYPES,
    INT_DTYPES,
    Assign,
    Attr,
    Call,
    Const,
    DTypeName,
    Func,
    Param,
    Program,
    TensorType,
    Var,
    int_range,
)
from stitch.targets import cpu

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"  # the .ir programs every stage runs
QUANTIZED = Path(__file__).resolve().parent / "fixtures" / "models" / "quantized"  # tools/export_models.py --quantized
HAVE_CC = cpu.compiler() is not None
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler on this machine")

ALL_DTYPES = DTYPES
# The first dtype is the usual one (about 70% of freshly drawn types).
DEFAULT_DTYPES = ("f32", "i32", "bool")

# How often each op group is drawn, relative to the others: mostly elementwise
# work between the structural ops, as in real programs.
_GROUP_WEIGHTS = {"unary": 2, "binary": 3, "compare": 1, "select": 1, "reduce": 2, "matmul": 1, "layout": 2,
                  "movement": 2, "index": 2}
_LAYOUT_OPS = ("transpose", "reshape", "broadcast_to", "cast")
_MOVEMENT_OPS = ("slice", "concat", "gather")
# A new op group, or a new layout or movement op, needs a maker below before it can be drawn.
assert {spec.group for spec in OPS.values()} == set(_GROUP_WEIGHTS)
assert {name for name, spec in OPS.items() if spec.group == "layout"} == set(_LAYOUT_OPS)
assert {name for name, spec in OPS.items() if spec.group == "movement"} == set(_MOVEMENT_OPS)

# Literals: the usual suspects, long reprs, exponents, and a spread of values.
_NICE_FLOATS = (1.0, 2.0, 0.5, -1.0, 0.0, 0.125, 1e-5, 1e-6, 1e16, 0.044715, 0.7978845608028654, -3.25)
_NON_FINITE = (float("inf"), float("-inf"), float("nan"))


# -- settings profiles ---------------------------------------------------------

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
# `quick`, the default (CI runs it): few examples, the same ones every run. `long` (pytest --long):
# four times as many, new ones each run.
settings.register_profile("quick", max_examples=25, deadline=None, derandomize=True, suppress_health_check=_SLOW_OK)
settings.register_profile("long", max_examples=100, deadline=None, suppress_health_check=_SLOW_OK)
LONG = False  # set by tests/conftest.py from `pytest --long`: also every ONNX node case on both targets


def load_profile(long: bool) -> str:
    """Select the `long` profile for `pytest --long`, else `quick`; return its name."""
    global LONG
    LONG = long
    name = "long" if long else "quick"
    settings.load_profile(name)
    return name


# -- programs ------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    dtypes: tuple[str, ...]
    max_ops: int  # calls per func
    max_rank: int
    max_dim: int
    max_assigns: int
    max_results: int
    movement: bool = False


@st.composite
def programs(
    draw,
    dtypes: tuple[str, ...] = DEFAULT_DTYPES,
    max_ops: int = 8,
    max_rank: int = 3,
    max_dim: int = 6,
    max_assigns: int = 4,
    max_results: int = 3,
    max_funcs: int = 1,
    movement: bool = False,
) -> Program:
    """Random well-typed programs (NOPOS positions) of 1..max_funcs funcs; slice, concat and gather with `movement`."""
    assert dtypes and all(d in DTYPES for d in dtypes), dtypes
    limits = Limits(tuple(dtypes), max_ops, max_rank, max_dim, max_assigns, max_results, movement)
    n = draw(st.integers(1, max_funcs))
    return Program(tuple(_FuncBuilder(draw, limits).build(f"f{i}") for i in range(n)))


def graphs(**limits) -> st.SearchStrategy[Graph]:
    """Checked graphs of the first func of `programs(**limits)`."""
    return programs(**limits).map(lambda p: check_func(p.funcs[0]))


def inputs_for(graph: Graph, low: float = 0.5, high: float = 2.0) -> st.SearchStrategy[dict]:
    """Arrays for every parameter: floats in [low, high], small ints, bools; gather indices in range."""
    bounds = index_bounds(graph)
    return st.fixed_dictionaries(
        {
            name: hnp.arrays(np_dtype(t.dtype), t.shape, elements=_elements(t.dtype, low, high, bounds.get(name)))
            for name, t in zip(graph.param_names, graph.param_types)
        }
    )


def edge_inputs_for(graph: Graph) -> st.SearchStrategy[dict]:
    """Arrays for every parameter with edge values mixed in (NaN, +-inf, +-0.0, the dtype's largest and
    smallest, integer min and max: floats.edge_values) among ordinary ones; gather indices in range."""
    bounds = index_bounds(graph)

    def elements(dtype: str, bound: int | None):
        ordinary = _elements(dtype, -3.0, 3.0, bound)
        if dtype == "bool" or bound is not None:
            return ordinary
        return st.one_of(st.sampled_from(edge_values(dtype)), ordinary)

    return st.fixed_dictionaries(
        {
            name: hnp.arrays(np_dtype(t.dtype), t.shape, elements=elements(t.dtype, bounds.get(name)))
            for name, t in zip(graph.param_names, graph.param_types)
        }
    )


@st.composite
def program_and_inputs(draw, **limits) -> tuple[Program, dict]:
    """A program and inputs for its first func."""
    program = draw(programs(**limits))
    return program, draw(inputs_for(check_func(program.funcs[0])))


def _elements(dtype: str, low: float, high: float, index_bound: int | None = None) -> st.SearchStrategy:
    if dtype in FLOAT_DTYPES:
        width = {"f16": 16, "f32": 32, "f64": 64}[dtype]
        return st.floats(low, high, width=width)
    if dtype == "bool":
        return st.booleans()
    if index_bound is not None:  # gather reads at these: in range, negative ones from the end
        return st.integers(-index_bound, index_bound - 1)
    return st.integers(max(-8, int_range(dtype)[0]), 8)


class _FuncBuilder:
    """Draws one func: its parameters appear as leaves need them."""

    def __init__(self, draw, limits: Limits):
        self.draw = draw
        self.limits = limits
        self.params: list[Param] = []
        self.env: list[tuple[str, TensorType]] = []  # every bound name, params included
        self.budget = 0  # ops left for the statement being drawn
        self.index_params: set[str] = set()  # parameters drawn as gather indices
        self.makers = {
            "unary": self.unary,
            "binary": self.binary,
            "compare": self.compare,
            "select": self.where,
            "reduce": self.reduce,
            "matmul": self.matmul,
            "layout": self.layout,
            "movement": self.movement,
            "index": self.iota,
        }

    def build(self, name: str) -> Func:
        body = []
        n_assigns = self.int(0, self.limits.max_assigns)
        # Each statement gets a share of the op budget, so later ones can still
        # compute (and read the earlier ones) instead of being bare names.
        left = self.limits.max_ops
        share = -(-left // (n_assigns + 1))
        for k in range(n_assigns):
            self.budget = min(share, left)
            t = self.pick([t for _, t in self.env]) if self.env and not self.chance(30) else self.fresh_type()
            body.append(Assign(f"t{k}", self.expr(t, call=True)))
            self.env.append((f"t{k}", t))
            left -= min(share, left) - self.budget
        self.budget = left
        results, returns = [], []
        for _ in range(self.int(1, self.limits.max_results)):
            if body and not self.chance(40):
                a = self.pick(body)
                t = dict(self.env)[a.name]
                e = Var(a.name)
            else:
                t = self.fresh_type()
                e = self.expr(t, call=True)
            results.append(t)
            returns.append(e)
        return Func(name, tuple(self.params), tuple(results), tuple(body), tuple(returns))

    # -- drawing helpers -------------------------------------------------------

    def int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def chance(self, percent: int) -> bool:
        # Shrinks to False: phrase each question so that "no" is the plainer program.
        return self.draw(st.integers(0, 99)) >= 100 - percent

    def pick(self, items):
        return self.draw(st.sampled_from(items))

    def dim(self) -> int:
        return self.int(1, self.limits.max_dim)

    def dtype(self) -> str:
        ds = self.limits.dtypes
        return ds[0] if self.chance(70) else self.pick(ds)

    def fresh_type(self) -> TensorType:
        shape = tuple(self.dim() for _ in range(self.int(0, self.limits.max_rank)))
        return TensorType(self.dtype(), shape)

    def literal(self, dtype: str) -> Const:
        if dtype == "bool":
            return Const(self.draw(st.booleans()))
        if dtype in FLOAT_DTYPES:
            if self.chance(15):  # an integer literal in a float context
                return Const(self.int(-4, 4))
            if self.chance(10):
                return Const(_NON_FINITE[self.int(0, 2)])
            return Const(self.draw(st.sampled_from(_NICE_FLOATS) | st.floats(-100, 100, allow_subnormal=False)))
        low, high = int_range(dtype)
        if self.chance(10):  # an integral float literal in an integer context (in its range: -1.0 is no u8)
            return Const(float(self.int(max(low, -4), 4)))
        return Const(self.draw(st.integers(max(low, -100), min(high, 100)) | st.sampled_from((low, high))))

    def broadcast_parts(self, shape: tuple[int, ...], n: int) -> list[tuple[int, ...]]:
        """n shapes (size-1 dims, missing leading dims) that broadcast to exactly `shape`."""
        parts = [list(self.sub_shape(shape)) for _ in range(n)]
        full = self.int(0, n - 1)  # the result's rank comes from this one
        parts[full] = [1] * (len(shape) - len(parts[full])) + parts[full]
        for i in range(1, len(shape) + 1):
            if all(len(p) < i or p[-i] != shape[-i] for p in parts):
                parts[full][-i] = shape[-i]
        return [tuple(p) for p in parts]

    def sub_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts to `shape`: some leading dims dropped, some dims 1."""
        rank = len(shape) if self.chance(60) else self.int(0, len(shape))
        return tuple(1 if self.chance(25) else d for d in shape[len(shape) - rank :])

    # -- expressions -----------------------------------------------------------

    def expr(self, t: TensorType, call: bool = False):
        """An expression of type t; a call if `call` and the op budget allows."""
        bound = [name for name, u in self.env if u == t]
        if self.budget > 0 and (call or (not (bound and self.chance(50)) and self.chance(80))):
            groups = [g for g, weight in _GROUP_WEIGHTS.items() for _ in range(weight) if self.can_make(g, t)]
            if groups:
                self.budget -= 1
                return self.makers[self.pick(groups)](t)
        if bound and not self.chance(15):
            return self.bound_name(bound)
        name = f"x{len(self.params)}"
        self.params.append(Param(name, t))
        self.env.append((name, t))
        return Var(name)

    def moved(self, t: TensorType):
        """The operand of a layout or movement op: with movement ops on, often another one (chains of index maps)."""
        if self.limits.movement and self.budget > 0 and self.chance(40):
            self.budget -= 1
            return self.makers[self.pick(["layout", "movement"])](t)
        return self.expr(t)

    def can_make(self, group: str, t: TensorType) -> bool:
        if group == "movement":
            return self.limits.movement
        if group in ("select", "layout"):
            return True
        if group == "index":
            return t.dtype in INDEX_DTYPES and t.rank >= 1
        if group == "compare":
            return t.dtype == "bool"
        if group == "matmul" and not (t.rank + 1 <= self.limits.max_rank or t.rank >= 2):
            return False
        return bool(ops_for(group, t.dtype))

    def operands(self, t: TensorType, n: int, dtype: str) -> list:
        """n operands of `dtype` broadcasting to t's shape.

        Maybe one of them is a literal or a name already bound to a shape that
        broadcasts into t; then another operand carries t's full shape.
        """
        shapes = self.broadcast_parts(t.shape, n)
        args: list = [None] * n
        if n > 1 and self.chance(45):
            special = self.int(0, n - 1)
            shapes[(special + 1 + self.int(0, n - 2)) % n] = t.shape
            fits = [name for name, u in self.env if u.dtype == dtype and broadcast_shapes(u.shape, t.shape) == t.shape]
            args[special] = self.bound_name(fits) if fits and self.chance(60) else self.literal(dtype)
        return [a if a is not None else self.expr(TensorType(dtype, s)) for a, s in zip(args, shapes)]

    def bound_name(self, names: list[str]) -> Var:
        # Prefer the func's own intermediates over parameters: that makes it a DAG.
        assigned = [name for name in names if not name.startswith("x")]
        return Var(self.pick(assigned if assigned and not self.chance(30) else names))

    def unary(self, t: TensorType) -> Call:
        return Call(self.pick(ops_for("unary", t.dtype)), (self.expr(t),))

    def binary(self, t: TensorType) -> Call:
        return Call(self.pick(ops_for("binary", t.dtype)), tuple(self.operands(t, 2, t.dtype)))

    def compare(self, t: TensorType) -> Call:
        # The operands' dtype is free: any allowed one (bool too) that the op takes.
        dtypes = list(dict.fromkeys(self.limits.dtypes + ("bool",)))
        op = self.pick([op for op in OPS if any(op in ops_for("compare", d) for d in dtypes)])
        dtype = self.pick([d for d in dtypes if op in ops_for("compare", d)])
        return Call(op, tuple(self.operands(t, 2, dtype)))

    def where(self, t: TensorType) -> Call:
        # A literal condition is fine; but one of the two values must be a tensor.
        cond, a, b = self.broadcast_parts(t.shape, 3)
        c = self.literal("bool") if not cond and self.chance(20) else self.expr(TensorType("bool", cond))
        if self.chance(25):
            values = [self.expr(t), self.literal(t.dtype)]
            if self.chance(50):
                values.reverse()
        else:
            values = [self.expr(TensorType(t.dtype, a)), self.expr(TensorType(t.dtype, b))]
        return Call("where", (c, *values))

    def reduce(self, t: TensorType) -> Call:
        op = self.pick(ops_for("reduce", t.dtype))
        # keepdims=true can only have reduced where t has a 1; keepdims=false
        # reduced the dims it no longer has. Reducing nothing (axes=[]) is legal.
        ones = [i for i, d in enumerate(t.shape) if d == 1]
        room = self.limits.max_rank - t.rank
        keepdims = bool(ones) and (room <= 0 or self.chance(50))
        shape = list(t.shape)
        if keepdims:
            axes = [i for i in ones if not self.chance(20)]
            for i in axes:
                shape[i] = self.dim()
        else:
            lo = 0 if self.chance(10) else min(1, room)
            for _ in range(self.int(lo, max(room, 0))):
                shape.insert(self.int(0, len(shape)), -1)  # placeholder, sized below
            axes = [i for i, d in enumerate(shape) if d == -1]
            shape = [self.dim() if d == -1 else d for d in shape]
        attrs = []
        all_axes = len(axes) == len(shape)
        if not (all_axes and self.chance(50)):  # omitted axes mean all of them
            shown = [a - len(shape) if self.chance(30) else a for a in axes]
            attrs.append(Attr("axes", tuple(self.draw(st.permutations(shown)))))
        if keepdims or self.chance(30):
            attrs.append(Attr("keepdims", keepdims))
        return Call(op, (self.expr(TensorType(t.dtype, tuple(shape))),), tuple(attrs))

    def matmul(self, t: TensorType) -> Call:
        k, d = self.dim(), t.dtype
        forms = []
        if t.rank == 0:
            forms.append(((k,), (k,)))
        if 1 <= t.rank and t.rank + 1 <= self.limits.max_rank:
            forms.append(((k,), t.shape[:-1] + (k, t.shape[-1])))  # vector @ matrices
            forms.append((t.shape + (k,), (k,)))  # matrices @ vector
        if t.rank >= 2:
            ba, bb = self.broadcast_parts(t.shape[:-2], 2)
            forms.append((ba + (t.shape[-2], k), bb + (k, t.shape[-1])))
        a, b = self.pick(forms)
        return Call("matmul", (self.expr(TensorType(d, a)), self.expr(TensorType(d, b))))

    def layout(self, t: TensorType) -> Call:
        op = self.pick(_LAYOUT_OPS)
        if op == "transpose":
            if self.chance(30):
                perm = tuple(reversed(range(t.rank)))
                attrs = ()
            else:
                perm = tuple(self.draw(st.permutations(range(t.rank))))
                attrs = (Attr("perm", perm),)
            source = [0] * t.rank
            for i, p in enumerate(perm):
                source[p] = t.shape[i]
            return Call(op, (self.moved(TensorType(t.dtype, tuple(source))),), attrs)
        if op == "reshape":
            target = list(t.shape)
            if target and self.chance(40):
                target[self.int(0, len(target) - 1)] = -1
            source = self.factorize(t.size)
            return Call(op, (self.moved(TensorType(t.dtype, source)),), (Attr("shape", tuple(target)),))
        if op == "broadcast_to":
            source = self.sub_shape(t.shape)
            return Call(op, (self.moved(TensorType(t.dtype, source)),), (Attr("shape", t.shape),))
        source_dtype = self.pick(self.limits.dtypes)
        return Call(op, (self.expr(TensorType(source_dtype, t.shape)),), (Attr("dtype", DTypeName(t.dtype)),))

    def iota(self, t: TensorType) -> Call:
        """iota of t's shape along one of its axes (i32 unless t is i64, which it must then say)."""
        attrs = [Attr("shape", t.shape), Attr("axis", self.axis_text(self.int(0, t.rank - 1), t.rank))]
        if t.dtype != "i32" or self.chance(30):
            attrs.append(Attr("dtype", DTypeName(t.dtype)))
        return Call("iota", (), tuple(attrs))

    def movement(self, t: TensorType) -> Call:
        op = self.pick(["slice", "gather"] + (["concat"] if t.rank else []))
        return {"slice": self.slice, "concat": self.concat, "gather": self.gather}[op](t)

    def axis_text(self, axis: int, rank: int) -> int:
        """An axis as a program may write it: as is, or counted from the end."""
        return axis - rank if self.chance(30) else axis

    def slice(self, t: TensorType) -> Call:
        """A slice producing t: each sliced axis of t comes from a larger dimension, read with a step."""
        axes = [a for a in self.draw(st.permutations(range(t.rank))) if not self.chance(40)]
        source = list(t.shape)
        starts, ends, steps = [], [], []
        for a in axes:
            length, step = t.shape[a], 1 if self.chance(50) else self.int(2, 3)
            begin = self.int(0, 2)
            stop = begin + (length - 1) * step + 1  # just past the last element read
            dim = stop + self.int(0, 2)
            source[a] = dim
            end = self.int(stop, min(begin + length * step, dim))
            # numpy's forms of the same bounds: negative ones, and ends past the dimension
            start_forms = [begin, begin - dim] + ([-dim - self.int(0, 2)] if begin == 0 else [])
            end_forms = [end, end - dim, dim + self.int(0, 3), 2**31 - 1]
            start = self.pick(start_forms)
            end = self.pick([e for e in end_forms if clamp_slice(dim, start, e, step)[2] == length])
            starts.append(start)
            ends.append(end)
            steps.append(step)
        attrs = [Attr("axes", tuple(self.axis_text(a, t.rank) for a in axes)), Attr("starts", tuple(starts)),
                 Attr("ends", tuple(ends))]
        if any(s != 1 for s in steps) or self.chance(30):
            attrs.append(Attr("steps", tuple(steps)))
        return Call("slice", (self.moved(TensorType(t.dtype, tuple(source))),), tuple(attrs))

    def concat(self, t: TensorType) -> Call:
        """concat of 1-4 operands whose extents along the axis add up to t's."""
        axis = self.int(0, t.rank - 1)
        total = t.shape[axis]
        n = 1 if total == 1 or self.chance(10) else self.int(2, min(4, total))
        cuts = sorted(self.draw(st.permutations(range(1, total)))[: n - 1])
        parts = [b - a for a, b in zip([0] + cuts, cuts + [total])]
        shapes = [t.shape[:axis] + (d,) + t.shape[axis + 1 :] for d in parts]
        operands = tuple(self.moved(TensorType(t.dtype, s)) for s in shapes)
        return Call("concat", operands, (Attr("axis", self.axis_text(axis, t.rank)),))

    def gather(self, t: TensorType) -> Call:
        """gather producing t = x.shape[:k] + indices.shape + x.shape[k+1:]; indices a parameter of their own."""
        k = self.int(0, t.rank)
        # the indices' rank: 0-2, and x's rank (t.rank - r + 1) within max_rank where it can be
        r_max = min(2, t.rank - k)
        r = self.int(min(max(t.rank + 1 - self.limits.max_rank, 0), r_max), r_max)
        dim = self.dim()
        x = TensorType(t.dtype, t.shape[:k] + (dim,) + t.shape[k + r :])
        index_shape = t.shape[k : k + r]
        if not index_shape and self.chance(20):
            indices = Const(self.int(-dim, dim - 1))  # a literal index is i32
        else:
            indices = self.index_param(TensorType(self.pick(("i32", "i64")), index_shape))
        return Call("gather", (self.moved(x), indices), (Attr("axis", self.axis_text(k, x.rank)),))

    def index_param(self, t: TensorType) -> Var:
        """Indices: a parameter already holding indices of that type, or a new one."""
        reuse = [p.name for p in self.params if p.type == t and p.name in self.index_params]
        if reuse and self.chance(30):
            return Var(self.pick(reuse))
        name = f"x{len(self.params)}"
        self.params.append(Param(name, t))
        self.env.append((name, t))
        self.index_params.add(name)
        return Var(name)

    def factorize(self, size: int) -> tuple[int, ...]:
        """A random shape with `size` elements and rank <= max_rank."""
        rank = self.int(0 if size == 1 else 1, max(self.limits.max_rank, 1))
        dims = []
        for _ in range(rank - 1):
            d = self.pick([q for q in range(1, size + 1) if size % q == 0])
            dims.append(d)
            size //= d
        if rank:
            dims.append(size)
        return tuple(self.draw(st.permutations(dims)))


def ops_for(group: str, dtype: str) -> list[str]:
    """The ops of a group that take operands of `dtype`, in table order."""
    return [name for name, spec in OPS.items() if spec.group == group and accepts(spec.dtypes, dtype)]


def accepts(dtypes: str, dtype: str) -> bool:
    """Whether an ops.py dtype class (FLOAT, NUMERIC, INTEGER, ANY) admits `dtype`."""
    return {FLOAT: dtype in FLOAT_DTYPES, NUMERIC: dtype != "bool", INTEGER: dtype in INT_DTYPES, ANY: True}[dtypes]


# -- Before/After: a program's text through the pipeline, printed ---------------------------------


def compile_text(text: str, target):
    """`.ir` text's first func, saturated with the built-in rules and extracted for `target`."""
    from stitch.engine.pipeline import check_entry, compile_graph, read_program
    from stitch.engine.rewrite.rules import builtin_rule_files

    return compile_graph(check_entry(read_program(text)), builtin_rule_files(), target)


def schedule_of(text: str, target) -> str:
    """The schedule `stitch compile --emit schedule` prints for `.ir` text on `target`."""
    from stitch.engine.schedule.schedule_print import print_schedule

    c = compile_text(text, target)
    return print_schedule(c.graph.name, target.name, c.schedule, c.cost, target.clock_ghz)


def plan_of(text: str, target) -> str:
    """The schedule's structural form (`print_schedule(..., prices=False)`): kernels, plans and
    instances without cycles or bytes, what a test of fusion and tiling compares."""
    from stitch.engine.schedule.schedule_print import print_schedule

    c = compile_text(text, target)
    return print_schedule(c.graph.name, target.name, c.schedule, c.cost, target.clock_ghz, prices=False)


def target_text(builtin: str = "cpu", **keys) -> str:
    """A built-in target description's text with top-level `keys` set to the TOML values given
    (`onchip_bytes=32768`, `name='"small"'`). Setting `onchip_bytes` drops `onchip_cache`, so the
    size given is the size used, on any machine."""
    import re

    from stitch.engine.schedule.target import TARGET_DIR

    text = (TARGET_DIR / f"{builtin}.toml").read_text()
    if "onchip_bytes" in keys:
        text = re.sub(r"(?m)^onchip_cache = .*\n", "", text)
    for key, value in keys.items():
        text, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        assert n == 1, f"{builtin}.toml has no line '{key} = ...'"
    return text


def loops_of(text: str, target) -> str:
    """The loop nests `stitch compile --emit loops` prints for `.ir` text on `target`."""
    from stitch.lowering.loops import print_loops
    from stitch.lowering.lower import lower

    return print_loops(lower(compile_text(text, target)))


def sources_holding(strategy, marker: str, cache, examples: int = 12) -> list[bool]:
    """For each of `examples` programs drawn from `strategy` (the same ones every run), whether the C
    `stitch.compile` writes for it holds `marker`: how a property test checks that its drawn
    programs take the path it is about."""
    from hypothesis import given
    from stitch.engine.api import compile as compile_program

    seen = []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True)
    @given(strategy)
    def count(text):
        seen.append(marker in compile_program(text, cache_dir=cache).native.source_path.read_text())

    count()
    return seen


def executes_like_the_reference(program, graph: Graph, seed: int):
    """Run lowered loops on the numpy executor with random inputs and assert the outputs equal the
    reference interpreter's. Returns the measured traffic, or None when an i32 accumulation overflows
    the executor's Python ints (issue 18's; nothing to compare)."""
    from stitch.engine.ir.interp import evaluate, random_inputs
    from stitch.engine.ir.tolerance import differences
    from stitch.lowering.execute import execute

    inputs = random_inputs(graph, seed)
    try:
        outs, traffic = execute(program, inputs)
    except OverflowError:
        return None
    assert differences(outs, evaluate(graph, inputs), graph) == []
    return traffic


# The size a symbolic example (examples/dynamic_rows.ir) runs at in the tests that run every example.
EXAMPLE_SIZE = 37


def example_sizes(graph: Graph) -> dict[str, int]:
    """Each symbol of an example at EXAMPLE_SIZE (within its range); {} for a static example."""
    return {name: min(max(lo, EXAMPLE_SIZE), hi) for name, (lo, hi) in graph.symbols.items()}


def dim_args(path) -> list[str]:
    """The `--dim NAME=N` options `stitch run` needs for an example: its symbols at `example_sizes`."""
    from stitch.engine.ir.check import check_program
    from stitch.engine.ir.parse import parse_file

    graph = next(iter(check_program(parse_file(path)).values()))
    return [a for name, n in example_sizes(graph).items() for a in ("--dim", f"{name}={n}")]


def quantized_fixture(stem: str):
    """(the ONNX model, {run: {name: array}}) of a quantized fixture: inputs by name, onnxruntime's
    outputs as `output:NAME`, its quantized operators' other values as `value:NAME`; a run is the npz
    key's prefix (`past=7` of `past=7/NAME`, '' for none). Needs onnx."""
    import numpy as np
    import onnx

    model = onnx.load(QUANTIZED / f"{stem}.onnx")
    runs: dict[str, dict[str, np.ndarray]] = {}
    with np.load(QUANTIZED / f"{stem}.npz") as data:
        for key in data.files:
            run, _, name = key.rpartition("/")
            runs.setdefault(run, {})[name] = data[key]
    return model, runs


def compiles_for_avx512(source: str, tmp_path: Path) -> str:
    """The compiler's errors building C `source` for AVX-512 (skylake-avx512), '' when it builds: the
    64-byte forms of the recognizers compile on any machine, though only one with AVX-512 runs them."""
    import subprocess

    from stitch.targets import cc

    path = tmp_path / "avx512.c"
    path.write_text(source)
    flags = [f for f in cc.compiler_flags() if f != "-march=native"] + ["-march=skylake-avx512"]
    done = subprocess.run([cpu.compiler(), *flags, "-c", str(path), "-o", str(tmp_path / "avx512.o")],
                          capture_output=True, text=True, check=False)
    return "" if done.returncode == 0 else done.stderr[-3000:] or f"exit {done.returncode}"
