"""What an ONNX node's translation works with: the values (`Sym`, computed; `Known`, known at import
time), the `Builder` that emits IR statements, and the refusals (`Unsupported`, `Problem`). The op
tables (onnx_ops.py, onnx_movement.py) and the graph walk (onnx_import.py) all build on it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..engine.ir import dims
from ..engine.ir.check import Inference, broadcast_shapes, check_program, normalize_axes
from ..engine.ir.errors import StitchError
from ..engine.ir.interp import DTYPE_OF_NP
from ..engine.ir.ops import OPS, value_positions
from ..engine.ir.parse import RESERVED, parse_program
from ..engine.ir.printer import print_program
from ..engine.ir.program import (
    Assign,
    Attr,
    Call,
    Comments,
    Const,
    DTypeName,
    Expr,
    Func,
    Param,
    Program,
    SymbolDecl,
    TensorType,
    Var,
)
from .onnx_lazy import INT_DTYPES, Lazy, each, is_fill, pattern

# ONNX TensorProto element types stitch has (the others are "unsupported dtype").
ONNX_DTYPES = {1: "f32", 10: "f16", 11: "f64", 3: "i8", 2: "u8", 6: "i32", 7: "i64", 9: "bool"}


# Initializers of at most this many elements become literals or compile-time
# values with `fold_constants`; bigger ones always stay parameters.
FOLD_LIMIT = 64


# Nodes never evaluated at import time even when their inputs are known: their outputs are random.
NOT_FOLDED = {"RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout"}


@dataclass(frozen=True)
class Sym:
    """A value the program computes (or receives as a parameter)."""

    name: str
    type: TensorType | None  # None: a graph input whose type stitch lacks (Builder.bad_inputs says why)
    input: str = ""  # the ONNX graph input it is, if it is one


@dataclass(frozen=True, eq=False)
class Known:
    """A value known at import time. `param`: the parameter it is when read as data (an initializer);
    `name`: the ONNX name it had (a parameter holding a known tensor is named after it)."""

    array: np.ndarray
    param: str = ""
    name: str = ""


Value = Sym | Known | Lazy


@dataclass(frozen=True)
class Problem:
    """Why one node (or graph input) cannot be imported. kind: op | dtype | shape | input | invalid | error
    (invalid: the node breaks the ONNX specification; error: it failed in a way stitch did not foresee)."""

    node: str
    op_type: str
    kind: str
    reason: str
    input: str = ""  # for kind "input": the graph input whose value would make the node importable
    dim: str = ""  # for a dynamic dimension: its name (dim_param), which --dim can fix


class Unsupported(Exception):
    def __init__(self, kind: str, reason: str, input: str = "", dim: str = ""):
        super().__init__(reason)
        self.kind, self.reason, self.input, self.dim = kind, reason, input, dim


def invalid(reason: str) -> Unsupported:
    """The node breaks the ONNX specification (an axis out of range, inconsistent attributes): an error."""
    return Unsupported("invalid", f"invalid model: {reason}")


def normal_axis(axis, rank: int, what: str = "axis") -> int:
    """A non-negative axis in [0, rank), or the node is invalid (ONNX axes lie in [-rank, rank))."""
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise invalid(f"{what} must be one integer, got {axis!r}")
    return normal_axes([axis], rank, what)[0]


def normal_axes(axes, rank: int, what: str = "axis") -> tuple[int, ...]:
    """Sorted non-negative axes (the checker's normalize_axes), or the node is invalid."""
    if isinstance(axes, (int, np.integer)) or any(not isinstance(a, (int, np.integer)) for a in axes):
        raise invalid(f"{what}: expected a list of integers, got {axes!r}")
    norm = normalize_axes([int(a) for a in axes], rank)
    if isinstance(norm, str):
        raise invalid(f"{what}: {norm}")
    return norm


def check_dims(shape: tuple[int, ...], what: str) -> tuple[int, ...]:
    if 0 in shape:
        raise Unsupported("shape", f"{what} has a zero-size dimension {list(shape)} (stitch tensors are never empty)")
    return shape


def onnx_dtype(elem_type: int) -> str:
    if elem_type not in ONNX_DTYPES:
        from onnx import TensorProto

        if not isinstance(elem_type, int) or elem_type not in TensorProto.DataType.values():
            raise invalid(f"{elem_type!r} is not an ONNX data type")
        raise Unsupported("dtype", f"{TensorProto.DataType.Name(elem_type)} (stitch has float, float16, double, "
                                   "int8, uint8, int32, int64, bool)")
    return ONNX_DTYPES[elem_type]


@dataclass
class Builder:
    """Collects the func's parameters and assignments as the nodes are translated."""

    opset: int
    params: list[Param] = field(default_factory=list)
    inference: Inference = field(default_factory=Inference)
    body: list[Assign] = field(default_factory=list)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    names: set[str] = field(default_factory=lambda: set(RESERVED))
    materialized: dict[Known, Sym] = field(default_factory=dict)  # Known compares by identity
    types: dict[str, TensorType] = field(default_factory=dict)
    bad_inputs: dict[str, Unsupported] = field(default_factory=dict)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # each symbol's, in the order declared
    given: frozenset[str] = frozenset()  # symbols whose range the caller gave (never narrowed)
    narrowed: dict[str, str] = field(default_factory=dict)  # symbol -> why the import narrowed its range
    lazy_vars: dict[tuple, Var] = field(default_factory=dict)  # a materialized Lazy's content -> its value
    calls: dict[str, Call] = field(default_factory=dict)  # each assigned value's call
    channels_last: set[str] = field(default_factory=set)  # values a conv or pool made channels last inside
    winograd: bool = True  # a 3x3 conv of a value made channels first is F(2x2, 3x3) (onnx_nn.winograd)

    def __post_init__(self):
        self.inference = Inference(self.ranges)

    def fresh(self, hint: str) -> str:
        """A new IR name derived from an ONNX name (which may hold any characters)."""
        base = sanitize(hint)
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def param(self, hint: str, typ: TensorType, input: str = "") -> Sym:
        name = self.fresh(hint)
        self.params.append(Param(name, typ))
        self.inference.param(name, typ)
        self.types[name] = typ
        return Sym(name, typ, input)

    def type_of(self, v: Value) -> TensorType:
        if isinstance(v, Lazy):
            return TensorType(v.dtype, check_dims(v.shape, "a value"))
        if isinstance(v, Sym):
            if v.type is None:
                raise self.bad_inputs[v.input]
            return v.type
        if v.array.dtype not in DTYPE_OF_NP:
            raise Unsupported("dtype", f"a constant of dtype {v.array.dtype} (stitch has f16 f32 f64 i8 u8 i32 i64 bool)")
        return TensorType(DTYPE_OF_NP[v.array.dtype], check_dims(v.array.shape, "a constant"))

    def data(self, v: Value, hint: str) -> Var:
        """`v` as a program value: a known value read as data becomes a parameter holding it."""
        if isinstance(v, Sym):
            self.type_of(v)
            return Var(v.name)
        if isinstance(v, Lazy):
            return self.materialize(v, hint)
        if v not in self.materialized:
            sym = self.param(v.param or v.name or hint, self.type_of(v))
            self.weights[sym.name] = v.array
            self.materialized[v] = sym
        return Var(self.materialized[v].name)

    def static_ints(self, v: Value | None, what: str, one_d: bool = True) -> list[int]:
        """A shape or axes list (a 1-D tensor; any rank without `one_d`) that must be known at import time."""
        if isinstance(v, Known):
            if v.array.dtype.kind not in "iu":
                raise invalid(f"its {what} must be integers, got {v.array.dtype}")
            if one_d and v.array.ndim != 1:
                raise invalid(f"its {what} must be a 1-D tensor, got {v.array.ndim}-D")
            return [int(i) for i in v.array.reshape(-1)]
        if isinstance(v, Sym) and v.input:
            raise Unsupported("input", f"its {what} is the graph input '{v.input}', known only at run time "
                                       "(a dynamic shape)", v.input)
        if isinstance(v, Lazy):
            names = sorted(dims.symbols_of(v.shape) | {s for e in v.values.flat if isinstance(e, dims.Expr)
                                                       for s in e.symbols})
            raise Unsupported("shape", f"its {what} depends on the symbolic dimension(s) {', '.join(names)}: "
                                       "stitch needs it as integers known at import time", dim=",".join(names))
        raise Unsupported("shape", f"its {what} is computed at run time (a dynamic shape)")

    def static_dims(self, v: Value | None, what: str) -> list[dims.Dim]:
        """A 1-D list of sizes known at import time, whose entries may be symbolic dimensions (`[1, n, 768]`)."""
        if isinstance(v, Lazy) and v.dtype in INT_DTYPES and v.rank == 1 and not v.coefs and \
                isinstance(v.shape[0], int):
            return list(np.broadcast_to(v.values, v.shape).flat)
        return self.static_ints(v, what)

    def op(self, op: str, args: list[Value], hint: str, **attrs) -> Sym:
        """Emit `name = op(args, attrs)`: a scalar known operand becomes a literal, any other a parameter."""
        values = value_positions(OPS[op], len(args))
        args = self._scalars_typed(args, values)
        exprs = self._operands(op, args, values, hint)
        ir_attrs = tuple(Attr(k, DTypeName(v) if k == "dtype" else v) for k, v in attrs.items())
        return self._assign(Call(op, tuple(exprs), ir_attrs), hint)

    def emit(self, op: str, args: list[Value], hint: str, **attrs) -> Sym:
        """Emit `name = op(args, attrs)` with every operand a program value (known ones as weights):
        the data-movement ops, whose index operands are never literals."""
        return self._assign(Call(op, tuple(self.data(a, hint) for a in args),
                                 tuple(Attr(k, v) for k, v in attrs.items())), hint)

    def _assign(self, call: Call, hint: str) -> Sym:
        """Type the call with the checker's rules (an operand it refuses: Unsupported), then bind it."""
        name = self.fresh(hint)
        try:
            typ = self.inference.assign(name, call)
        except StitchError as err:
            raise Unsupported(refusal_kind(err.message), err.message) from None
        self.body.append(Assign(name, call))
        self.calls[name] = call
        self.types[name] = typ
        return Sym(name, typ)

    def _scalars_typed(self, args: list[Value], values) -> list[Value]:
        """Known scalars (the converters' constants are numpy's f64 and i64) in the dtype of the op's other
        value operands, when that dtype holds them exactly: a literal takes its operands' dtype anyway, and
        one that has no literal form (nan, inf) becomes a weight of the right dtype."""
        from ..engine.ir.interp import np_dtype

        anchor = next((self.type_of(args[j]).dtype for j in values if not _free_scalar(args[j])), None)
        if anchor is None:
            return args
        out = list(args)
        for k in values:
            a = args[k]
            if _free_scalar(a) and self.type_of(a).dtype != anchor:
                typed = a.array.astype(np_dtype(anchor))
                if np.array_equal(typed.astype(a.array.dtype), a.array, equal_nan=a.array.dtype.kind == "f"):
                    out[k] = Known(typed, name=a.name)
        return out

    def _operands(self, op: str, args: list[Value], values, hint: str) -> list[Expr]:
        shapes = [self.type_of(a).shape for a in args]
        exprs: list[Expr] = []
        for k, a in enumerate(args):
            others = [shapes[j] for j in range(len(args)) if j != k]
            literal = literal_value(a) if not isinstance(a, Lazy) else lazy_literal(a)
            has_var = any(not _free_scalar(args[j]) for j in values if j != k) or k not in values
            if literal is not None and OPS[op].elementwise and has_var and _broadcast(others) == _broadcast(shapes):
                exprs.append(Const(literal))
            else:
                exprs.append(self.data(a, hint))
        return exprs

    # -- symbolic dimensions ----------------------------------------------------------------------------

    def symbol(self, name: str, rng: tuple[int, int] | None, given: bool = False) -> dims.Expr:
        """Declare a symbol (a graph input's dim_param) with its range (default: the IR's); a range the
        caller `given` is never narrowed."""
        self.ranges[name] = tuple(rng) if rng else dims.DEFAULT_RANGE
        if given:
            self.given = self.given | {name}
        self.names.add(name)
        return dims.symbol(name)

    def at_most(self, e: dims.Dim, limit: int, why: str) -> bool:
        """Whether e <= limit for every value of the symbols, narrowing the range of its one symbol to make
        it so when the caller gave that symbol no range: the model's own limit (a table of positions
        read at `arange(n)` has n at most its rows), which onnxruntime would enforce by failing."""
        if dims.bounds(e, self.ranges)[1] <= limit:
            return True
        names = sorted(dims.symbols_of((e,)))
        if len(names) != 1 or names[0] in self.given:
            return False
        s = names[0]
        lo, hi = self.ranges[s]
        fits = lambda h: dims.bounds(e, {**self.ranges, s: (lo, h)})[1] <= limit
        if not fits(lo):
            return False
        while lo < hi:  # the largest high that fits
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        self.ranges[s] = (self.ranges[s][0], lo)
        self.narrowed[s] = why
        return True

    def positions(self, dtype: str, start: dims.Dim, length: dims.Dim, step: int, hint: str) -> Sym:
        """start, start + step, ... (length of them, all >= 0) as a program value: an iota (computed where it
        is read: no table, no bound on the symbols), cut where the run does not start at 0 by 1."""
        from ..engine.ir.interp import np_dtype

        end = dims.add(dims.add(start, dims.mul(step, dims.add(length, -1))), 1)
        need = dims.bounds(end, self.ranges)[1]
        top = int(np.iinfo(np_dtype(dtype)).max)
        if need - 1 > top or dims.bounds(start, self.ranges)[0] < 0:
            names = sorted(dims.symbols_of((end,)))
            raise Unsupported("shape", f"positions up to {end} need the range of {', '.join(names)} bounded (they "
                                       f"reach {need} at the range's high end, past what {dtype} holds): declare "
                                       f"it with --dim-range (dim_ranges= in Python)", dim=",".join(names))
        if start == 0 and step == 1:
            return self.op("iota", [], hint, shape=(length,), axis=0, dtype=dtype)
        run = self.op("iota", [], hint, shape=(end,), axis=0, dtype=dtype)
        attrs = {"axes": (0,), "starts": (start,), "ends": (end,)}
        if step != 1:
            attrs["steps"] = (step,)
        return self.emit("slice", [run], hint, **attrs)

    def dim_value(self, e: dims.Dim, dtype: str, rank: int, hint: str) -> Value:
        """A dimension's value at run time, as a tensor of `rank` ones: the positions run read at e."""
        lo = dims.bounds(e, self.ranges)[0]
        shift = max(0, -lo)
        v = self.positions(dtype, dims.add(e, shift), 1, 1, hint)
        v = self.op("reshape", [v], hint, shape=(1,) * rank) if rank != 1 else v
        return self.op("sub", [v, Known(np.asarray(shift))], hint) if shift else v

    def materialize(self, v: Lazy, hint: str) -> Var:
        """A Lazy as program code: its values (a weight, and each symbolic entry read from a run of
        positions) plus each coefficient times the positions along its axis, broadcast to its shape."""
        key = (v.dtype, v.shape, v.values.shape, tuple(v.values.flat),
               tuple((a, c.shape, tuple(c.flat)) for a, c in v.coefs))
        if key in self.lazy_vars:
            return self.lazy_vars[key]
        from ..engine.ir.interp import np_dtype

        integral = v.dtype in INT_DTYPES or all(
            isinstance(x, (int, dims.Expr)) or float(x).is_integer() for x in v.values.flat)
        if not v.coefs and not v.symbolic:
            total: Value = Known(np.asarray(v.values.astype(np_dtype(v.dtype))), name=f"{hint}_values")
        elif not integral or v.dtype == "bool":
            raise Unsupported("shape", f"a {v.dtype} tensor of fractional values that vary with the positions")
        else:
            work = v.dtype if v.dtype in INT_DTYPES else "i64"
            whole = Lazy(work, v.shape, each(lambda x: x if isinstance(x, dims.Expr) else int(x), v.values), v.coefs)
            total = self._integer_terms(whole, work, hint)
            if work != v.dtype:
                total = self.op("cast", [total], hint, dtype=v.dtype)
        got = self.type_of(total).shape
        if got != v.shape:
            total = self.op("broadcast_to", [self.reshape_to_rank(total, v.rank, hint)], hint, shape=v.shape)
        var = self.data(total, hint)
        self.lazy_vars[key] = var
        return var

    def reshape_to_rank(self, x: Value, rank: int, hint: str) -> Value:
        shape = self.type_of(x).shape
        if len(shape) == rank:
            return x
        full = (1,) * (rank - len(shape)) + tuple(shape)
        if isinstance(x, Known):
            return Known(x.array.reshape(full), param=x.param, name=x.name)
        return self.op("reshape", [x], hint, shape=full)

    def _integer_terms(self, v: Lazy, dtype: str, hint: str) -> Value:
        """values + sum(coef * positions) in an integer dtype."""
        from ..engine.ir.interp import np_dtype

        (axis0, c0), = v.coefs[:1] or ((None, None),)
        first = v.values.flat[0]
        if (len(v.coefs) == 1 and v.values.size == 1 and c0.size == 1 and c0.flat[0] > 0
                and dims.bounds(first, self.ranges)[0] >= 0):  # one run: start, start + c, ...
            run = self.positions(dtype, first, v.shape[axis0], int(c0.flat[0]), hint)
            shape = (1,) * axis0 + (v.shape[axis0],) + (1,) * (v.rank - axis0 - 1)
            return self.op("reshape", [run], hint, shape=shape) if v.rank != 1 else run
        terms: list[Value] = []
        for axis, c in v.coefs:
            shape = [1] * v.rank
            shape[axis] = v.shape[axis]
            run = self.positions(dtype, 0, v.shape[axis], 1, hint)
            run = self.op("reshape", [run], hint, shape=tuple(shape)) if v.rank != 1 else run
            if c.size == 1 and c.flat[0] == 1:
                terms.append(run)
            else:
                terms.append(self.op("mul", [run, Known(c.astype(np_dtype(dtype)), name=f"{hint}_coefs")], hint))
        plain = each(lambda x: 0 if isinstance(x, dims.Expr) else int(x), v.values)
        if any(x != 0 for x in plain.flat):
            terms.append(Known(plain.astype(np_dtype(dtype)), name=f"{hint}_values"))
        for e in dict.fromkeys(x for x in v.values.flat if isinstance(x, dims.Expr)):
            value = self.dim_value(e, dtype, v.rank, hint)
            where = each(lambda x: int(x == e), v.values).astype(np_dtype(dtype))
            terms.append(value if where.size == 1 else self.op("mul", [value, Known(where, name=f"{hint}_at")], hint))
        total = terms[0] if terms else Known(np.zeros(pattern(v), np_dtype(dtype)))
        for t in terms[1:]:
            total = self.op("add", [total, t], hint)
        return total

    def func_name(self, name: str) -> str:
        """The graph's name as an IR name: a reserved word gets a trailing underscore."""
        base = sanitize(name)
        return base + "_" if base in RESERVED else base

    def prune(self, returns: list[Var], inputs: set[str]) -> None:
        """Drop the statements no output reads, and the weights only they read: a symbolic import emits
        a value whose formula it cannot keep (`Max` of positions) also where the graph then reads only
        its shape."""
        used = {r.name for r in returns}
        kept = []
        for a in reversed(self.body):
            if a.name in used:
                kept.append(a)
                used |= names_in(a.expr)
        self.body = kept[::-1]
        self.params = [p for p in self.params if p.name in used or p.name in inputs]
        self.weights = {k: v for k, v in self.weights.items() if k in used}

    def finish(self, name: str, returns: list[Var], inputs: dict[str, str], outputs: list[str]) -> Imported:
        """The func, checked, and its text: what `stitch import` writes. The text is parsed back only
        when asked (`Imported.program`): a compile parses it itself, and printing and parsing are each
        other's inverse (the tests' import helpers check it), so the checker validates what is written."""
        if self.ranges:
            self.prune(returns, set(inputs.values()))
        symbols = tuple(SymbolDecl(s, lo, hi) for s, (lo, hi) in self.ranges.items())
        notes = tuple(f"# {s}: {self.ranges[s][0]}..{self.ranges[s][1]}, {why}" for s, why in self.narrowed.items())
        func = Func(self.func_name(name), tuple(self.params), tuple(self.types[r.name] for r in returns),
                    tuple(self.body), tuple(returns), symbols=symbols, comments=Comments(before=notes))
        checked = Program((func,))
        text = print_program(checked)
        label = f"<import of {name}>"
        try:
            check_program(checked)
        except StitchError:  # (raised again from the text: the error shows its line)
            check_program(parse_program(text, label))
            raise
        return Imported(checked, text, dict(self.weights), inputs, outputs, label=label)


def names_in(e: Expr) -> set[str]:
    """The values an expression reads."""
    if isinstance(e, Var):
        return {e.name}
    if isinstance(e, Call):
        return set().union(*(names_in(a) for a in e.args))
    return set()


def sanitize(name: str) -> str:
    """An IR name for an ONNX name (which may hold any characters)."""
    base = re.sub(r"\W", "_", name, flags=re.ASCII) or "v"
    return base if re.match(r"[A-Za-z_]", base) else "v" + base


def lazy_literal(v: Lazy):
    """The literal a Lazy that is one number or bool everywhere can be written as (as an operand whose
    shape the others cover), or None."""
    if not is_fill(v) or isinstance(v.values.flat[0], dims.Expr):
        return None
    x = v.values.flat[0]
    return None if isinstance(x, float) and not np.isfinite(x) else x


def _free_scalar(v: Value) -> bool:
    """A known one-element value that is no weight: written as a literal where it has a literal form."""
    return isinstance(v, Known) and not v.param and v.array.size == 1


def literal_value(v: Value):
    """The scalar literal a known value can be written as, or None (a tensor, a weight, inf or nan)."""
    if not isinstance(v, Known) or v.param or v.array.size != 1:
        return None
    x = v.array.reshape(-1)[0].item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    out: tuple[int, ...] | None = ()
    for sh in shapes:
        out = broadcast_shapes(out, sh) if out is not None else None
    return out


@dataclass
class Imported:
    """The result of an import: the checked program, its text, and the values of its weight parameters."""

    checked: Program  # the program as built and checked (without source positions)
    text: str  # its text
    weights: dict[str, np.ndarray]  # parameter name -> value, for parameters that came from initializers or constants
    inputs: dict[str, str]  # ONNX graph input -> parameter name
    outputs: list[str]  # ONNX graph outputs, in return order
    symbols: dict[str, str] = field(default_factory=dict)  # dim_param -> the func's symbol
    label: str = "<import>"  # the file name of the text's positions

    @cached_property
    def program(self) -> Program:
        """The program parsed from `text` (equal to `checked`, with positions in the text): parsed when
        first asked, not by every import (a 12-layer GPT-2's parse took a quarter of its import)."""
        return parse_program(self.text, self.label)


def refusal_kind(message: str) -> str:
    """The problem kind of a checker error on an emitted op: a dtype it does not take, else a shape."""
    dtype_words = ("dtype", "float tensor", "numeric tensor", "must be bool", "indices must be")
    return "dtype" if any(w in message for w in dtype_words) else "shape"


class Node:
    """A NodeProto with its attributes decoded, and the opset its defaults come from."""

    def __init__(self, proto, opset: int):
        from onnx import helper

        self.proto = proto
        self.op_type = proto.op_type
        self.opset = opset
        self.out = proto.output[0] if proto.output else proto.op_type
        self.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}

    def attr(self, name: str, default=None):
        v = self.attrs.get(name, default)
        return v.decode() if isinstance(v, bytes) else v
