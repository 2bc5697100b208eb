"""What an ONNX node's translation works with: the values (`Sym`, computed; `Known`, known at import
time), the `Builder` that emits IR statements, and the refusals (`Unsupported`, `Problem`). The op
tables (onnx_ops.py, onnx_movement.py) and the graph walk (onnx_import.py) all build on it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..engine.ir.check import Inference, broadcast_shapes, check_program, normalize_axes
from ..engine.ir.errors import StitchError
from ..engine.ir.interp import DTYPE_OF_NP
from ..engine.ir.ops import OPS, value_positions
from ..engine.ir.parse import parse_program
from ..engine.ir.printer import print_program
from ..engine.ir.program import Assign, Attr, Call, Const, DTypeName, Expr, Func, Param, Program, TensorType, Var

# ONNX TensorProto element types stitch has (the others are "unsupported dtype").
ONNX_DTYPES = {1: "f32", 10: "f16", 11: "f64", 6: "i32", 7: "i64", 9: "bool"}


# Initializers of at most this many elements become literals or compile-time
# values with `fold_constants`; bigger ones always stay parameters.
FOLD_LIMIT = 64


# The IR's reserved words: never a parameter's, a value's or the func's name.
RESERVED = ("func", "return", "true", "false")


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


Value = Sym | Known


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
                                   "int32, int64, bool)")
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
        if isinstance(v, Sym):
            if v.type is None:
                raise self.bad_inputs[v.input]
            return v.type
        if v.array.dtype not in DTYPE_OF_NP:
            raise Unsupported("dtype", f"a constant of dtype {v.array.dtype} (stitch has f16 f32 f64 i32 i64 bool)")
        return TensorType(DTYPE_OF_NP[v.array.dtype], check_dims(v.array.shape, "a constant"))

    def data(self, v: Value, hint: str) -> Var:
        """`v` as a program value: a known value read as data becomes a parameter holding it."""
        if isinstance(v, Sym):
            self.type_of(v)
            return Var(v.name)
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
        raise Unsupported("shape", f"its {what} is computed at run time (a dynamic shape)")

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
            literal = literal_value(a)
            has_var = any(not _free_scalar(args[j]) for j in values if j != k) or k not in values
            if literal is not None and OPS[op].elementwise and has_var and _broadcast(others) == _broadcast(shapes):
                exprs.append(Const(literal))
            else:
                exprs.append(self.data(a, hint))
        return exprs

    def func_name(self, name: str) -> str:
        """The graph's name as an IR name: a reserved word gets a trailing underscore."""
        base = sanitize(name)
        return base + "_" if base in RESERVED else base

    def finish(self, name: str, returns: list[Var], inputs: dict[str, str], outputs: list[str]) -> Imported:
        """Print the func and parse it back, so that the checker validates what `stitch import` writes."""
        func = Func(self.func_name(name), tuple(self.params), tuple(self.types[r.name] for r in returns),
                    tuple(self.body), tuple(returns))
        text = print_program(Program((func,)))
        program = parse_program(text, f"<import of {name}>")
        check_program(program)
        return Imported(program, text, dict(self.weights), inputs, outputs)


def sanitize(name: str) -> str:
    """An IR name for an ONNX name (which may hold any characters)."""
    base = re.sub(r"\W", "_", name, flags=re.ASCII) or "v"
    return base if re.match(r"[A-Za-z_]", base) else "v" + base


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

    program: Program
    text: str
    weights: dict[str, np.ndarray]  # parameter name -> value, for parameters that came from initializers or constants
    inputs: dict[str, str]  # ONNX graph input -> parameter name
    outputs: list[str]  # ONNX graph outputs, in return order


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
