"""ONNX -> stitch IR: one func from an ONNX graph whose shapes are static.

Every ONNX value becomes either a program value (`Sym`: a parameter or an
assignment) or a value known at import time (`Known`: Constant nodes, shapes
of static tensors, initializers read as shapes or axes, graph inputs the
caller fixes with `constant_inputs`). A node whose inputs are all known is
evaluated here by onnx's reference evaluator: that is how the shape arithmetic
in the bodies of `_expanded` functions disappears. The other nodes are
translated by the table in `onnx_ops.py`. Every node that cannot be translated
is collected, so one error lists them all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..engine.check import Inference, broadcast_shapes, check_program, normalize_axes
from ..engine.errors import StitchError
from ..engine.interp import DTYPE_OF_NP
from ..engine.ir import Assign, Attr, Call, Const, DTypeName, Expr, Func, Param, Program, TensorType, Var
from ..engine.ops import OPS, value_positions
from ..engine.parse import parse_program
from ..engine.printer import print_program

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


class Unsupported(Exception):
    def __init__(self, kind: str, reason: str, input: str = ""):
        super().__init__(reason)
        self.kind, self.reason, self.input = kind, reason, input


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


class OnnxImportError(StitchError):
    """Every node of the model that stitch cannot import, each with its reason."""

    def __init__(self, model: str, problems: list[Problem]):
        self.problems = problems
        lines = [f"{p.op_type} '{p.node}': {p.reason}" for p in problems]
        hint = ""
        if self.fixable_inputs:
            hint = ("fix the graph inputs read as shapes or axes: --constant NAME=VALUES.npy "
                    "(constant_inputs= in Python)")
        super().__init__(f"cannot import {model}: {len(problems)} node(s) stitch cannot translate:\n  "
                         + "\n  ".join(lines), hint=hint)

    @property
    def fixable_inputs(self) -> list[str]:
        """Graph inputs read as shapes or axes: fixing their values (constant_inputs) may make the model importable."""
        return sorted({p.input for p in self.problems if p.kind == "input"})


@dataclass
class Imported:
    """The result of an import: the checked program, its text, and the values of its weight parameters."""

    program: Program
    text: str
    weights: dict[str, np.ndarray]  # parameter name -> value, for parameters that came from initializers or constants
    inputs: dict[str, str]  # ONNX graph input -> parameter name
    outputs: list[str]  # ONNX graph outputs, in return order


def import_onnx(model, entry: str | None = None, fold_constants: bool | None = None,
                constant_inputs: dict[str, np.ndarray] | None = None,
                outputs: list[str] | None = None) -> Imported:
    """Translate an ONNX model (a path, bytes or a ModelProto) into one stitch func.

    entry: the func's name (default: the graph's). outputs: import only what these
    ONNX values need (a subgraph); default the graph outputs. constant_inputs: graph
    inputs fixed to these values (how an input read as a shape or axes list is made static).
    fold_constants: which float initializers become import-time values (a scalar read as data is a
    literal) instead of parameters: by default those of one element (the exporters keep every
    Python scalar of the model there: GELU's 3.0 must be a literal for `pow-three` to see it);
    True: those of at most FOLD_LIMIT elements; False: none.
    """
    model, label = load_model(model)
    try:
        return translate_graph(model, label, entry, fold_constants, constant_inputs, outputs)
    except StitchError:
        raise
    except Exception as err:  # a malformed model the steps above did not foresee: still one clear error
        raise StitchError(f"cannot import {label}: {type(err).__name__}: {err}") from None


def translate_graph(model, label: str, entry, fold_constants, constant_inputs, outputs) -> Imported:
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None and any(n.domain in ("", "ai.onnx") for n in graph.node):
        raise StitchError(f"{label}: the model imports no version of the default ONNX domain (its opset_import "
                          "lists none), so its ops have no meaning")
    b = Builder(opset or 1)  # (no default-domain node to read it)
    problems: list[Problem] = []
    env: dict[str, Value | None] = {}  # None: a value a failed node would have produced
    for init in graph.initializer:
        try:
            env[init.name] = initializer_value(init, fold_constants)
        except Exception as err:  # a data_type changed, truncated raw_data, ...
            env[init.name] = None
            problems.append(Problem(init.name, "initializer", "invalid",
                                    f"invalid model: the initializer cannot be read ({type(err).__name__}: {err})"))
    inputs = bind_graph_inputs(b, graph, env, constant_inputs or {})
    wanted = list(outputs) if outputs else [o.name for o in graph.output]
    for node in needed_nodes(graph, wanted, set(env)):
        translate_node(b, node, env, problems)
    returns = []
    for name in wanted:
        if name not in env:
            raise StitchError(f"{label}: no value named '{name}' in the graph")
        try:
            returns.append(b.data(env[name], name) if env[name] is not None else None)
        except Unsupported as u:
            problems.append(Problem(name, "graph output", u.kind, u.reason))
    if problems:
        raise OnnxImportError(label, problems)
    check_declared_outputs(graph, wanted, [b.type_of(env[n]) for n in wanted], label)
    return b.finish(entry or graph.name or "main", returns, inputs, wanted)


def bind_graph_inputs(b: Builder, graph, env: dict, constant_inputs: dict) -> dict[str, str]:
    """Parameters for the graph inputs (not initializers, not fixed by the caller); {input: parameter}."""
    inputs = {}
    for vi in graph.input:
        if vi.name in env:
            continue
        if vi.name in constant_inputs:
            env[vi.name] = Known(np.asarray(constant_inputs[vi.name]), name=vi.name)
            continue
        try:
            env[vi.name] = b.param(vi.name, input_type(vi), input=vi.name)
            inputs[vi.name] = env[vi.name].name
        except Unsupported as u:  # reported by the nodes that read it as data (as a shape it may be fixed)
            env[vi.name] = Sym("", None, vi.name)
            b.bad_inputs[vi.name] = u
    return inputs


def load_model(model):
    """A ModelProto from a path, bytes or a ModelProto; a clear error for anything else."""
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(model, onnx.ModelProto):
        return model, f"model '{model.graph.name}'"
    label = str(model) if isinstance(model, (str, Path)) else "the model"
    try:
        loaded = onnx.load_model_from_string(model) if isinstance(model, bytes) else onnx.load(str(model))
    except FileNotFoundError:
        raise StitchError(f"{model}: no such file") from None
    except (DecodeError, ValueError, RuntimeError, OSError) as err:
        raise StitchError(f"{label}: not a readable ONNX model ({type(err).__name__}: {err})") from None
    if not loaded.graph.node and not loaded.graph.output:
        raise StitchError(f"{label}: not an ONNX model (no graph)")
    return loaded, label


def needed_nodes(graph, wanted: list[str], defined: set[str]) -> list:
    """The nodes the wanted values depend on, in graph order (the graph is topologically sorted)."""
    producer = {out: node for node in graph.node for out in node.output if out}
    need, stack = set(), [w for w in wanted if w not in defined]
    while stack:
        node = producer.get(stack.pop())
        if node is None or id(node) in need:
            continue
        need.add(id(node))
        stack.extend(i for i in node.input if i and i not in defined)
    return [n for n in graph.node if id(n) in need]


def translate_node(b: Builder, node, env: dict, problems: list[Problem]) -> None:
    from .onnx_ops import translate

    label = node.name or (node.output[0] if node.output else node.op_type)
    missing = [i for i in node.input if i and i not in env]
    if missing:
        raise StitchError(f"node '{label}' ({node.op_type}) reads '{missing[0]}', which nothing defines")
    ins = [env[i] if i else None for i in node.input]
    failed_input = any(i and env[i] is None for i in node.input)
    try:
        if failed_input:
            from .onnx_ops import is_supported

            if not is_supported(node):
                raise Unsupported("op", f"stitch has no translation for {node.op_type}")
            results = []
        else:
            results = translate(b, node, ins)
    except Unsupported as u:
        problems.append(Problem(label, node.op_type, u.kind, u.reason, u.input))
        results = []
    except Exception as err:  # a malformed node (an attribute of the wrong kind, a broken tensor)
        problems.append(Problem(label, node.op_type, "error", f"cannot be read ({type(err).__name__}: {err})"))
        results = []
    for k, name in enumerate(node.output):
        if name:
            env[name] = results[k] if k < len(results) else None


def initializer_value(init, fold_constants: bool | None) -> Known:
    from onnx import numpy_helper

    array = numpy_helper.to_array(init)
    limit = {None: 1, True: FOLD_LIMIT, False: 0}[fold_constants]
    small = array.size <= limit
    return Known(array, "" if small else init.name)


def input_type(vi) -> TensorType:
    """The static TensorType of a graph input, or Unsupported (a dynamic dimension, a dtype stitch lacks)."""
    t = vi.type
    if t.WhichOneof("value") != "tensor_type":
        raise Unsupported("dtype", f"input '{vi.name}' is a {t.WhichOneof('value')}, not a tensor")
    dtype = onnx_dtype(t.tensor_type.elem_type)
    if not t.tensor_type.HasField("shape"):
        raise Unsupported("shape", f"input '{vi.name}' has no static shape (unknown rank)")
    dims = []
    for d in t.tensor_type.shape.dim:
        if not d.HasField("dim_value"):
            what = f"'{d.dim_param}'" if d.dim_param else "unknown"
            raise Unsupported("shape", f"input '{vi.name}' has a dynamic dimension ({what})")
        if d.dim_value < 0:
            raise invalid(f"input '{vi.name}' has a negative dimension ({d.dim_value})")
        dims.append(d.dim_value)
    return TensorType(dtype, check_dims(tuple(dims), vi.name))


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


def check_declared_outputs(graph, wanted: list[str], types: list[TensorType], label: str) -> None:
    """An output type the model declares statically must be the one computed (else the import is wrong)."""
    declared = {vi.name: vi for vi in list(graph.output) + list(graph.value_info)}
    for name, typ in zip(wanted, types):
        vi = declared.get(name)
        if vi is None or vi.type.WhichOneof("value") != "tensor_type":
            continue
        tt = vi.type.tensor_type
        if tt.elem_type in ONNX_DTYPES and ONNX_DTYPES[tt.elem_type] != typ.dtype:
            raise StitchError(f"{label}: output '{name}' is declared {ONNX_DTYPES[tt.elem_type]}, computed {typ}")
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if tt.HasField("shape") and None not in dims and tuple(dims) != typ.shape:
            raise StitchError(f"{label}: output '{name}' is declared with shape {dims}, computed {typ}")


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

    def static_ints(self, v: Value | None, what: str) -> list[int]:
        """A shape or axes list that must be known at import time."""
        if isinstance(v, Known):
            if v.array.dtype.kind not in "iu":
                raise invalid(f"its {what} must be integers, got {v.array.dtype}")
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
        from ..engine.interp import np_dtype

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


def refusal_kind(message: str) -> str:
    """The problem kind of a checker error on an emitted op: a dtype it does not take, else a shape."""
    dtype_words = ("dtype", "float tensor", "numeric tensor", "must be bool", "indices must be")
    return "dtype" if any(w in message for w in dtype_words) else "shape"
