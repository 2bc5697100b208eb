"""ONNX -> stitch IR: one func from an ONNX graph.

Every ONNX value becomes either a program value (`Sym`: a parameter or an
assignment) or a value known at import time (`Known`: Constant nodes, shapes
of static tensors, initializers read as shapes or axes, graph inputs the
caller fixes with `constant_inputs`). A node whose inputs are all known is
evaluated here by onnx's reference evaluator: that is how the shape arithmetic
in the bodies of `_expanded` functions disappears. The other nodes are
translated by the table in `onnx_ops.py`. Every node that cannot be translated
is collected, so one error lists them all.

A graph input's named dynamic dimension (`dim_param`) becomes a symbol of the
func, unless the caller fixes its size (`dims`); the shape arithmetic on it is
carried as formulas (`Lazy`, onnx_shapes.py) and the types and attributes hold
dimension expressions. A symbol's range is the caller's (`dim_ranges`), else
the IR's default narrowed to what the model can run (positions read from a
table of 64 rows at `arange(n)` make n at most 64); an import that narrows a
range runs again with it, so that every step saw the final ranges.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..engine.ir import dims as dimensions
from ..engine.ir.errors import StitchError
from ..engine.ir.program import DTYPES, TensorType
from .onnx_builder import (
    FOLD_LIMIT,
    ONNX_DTYPES,
    Builder,
    Imported,
    Known,
    Problem,
    Sym,
    Unsupported,
    Value,
    check_dims,
    invalid,
    onnx_dtype,
    sanitize,
)
from .onnx_ops import is_supported, translate


class OnnxImportError(StitchError):
    """Every node of the model that stitch cannot import, each with its reason."""

    def __init__(self, model: str, problems: list[Problem]):
        self.problems = problems
        lines = [f"{p.op_type} '{p.node}': {p.reason}" for p in problems]
        hint = ""
        if self.fixable_inputs:
            hint = ("fix the graph inputs read as shapes or axes: --constant NAME=VALUES.npy "
                    "(constant_inputs= in Python)")
        if any("declare smaller ranges" in p.reason for p in problems):
            hint = (hint + "; " if hint else "") + "bound the symbols: --dim-range NAME=LOW..HIGH (dim_ranges= in Python)"
        dynamic = sorted({name for p in problems if p.dim for name in p.dim.split(",")})
        if dynamic:
            hint = (hint + "; " if hint else "") + ("compile at a fixed size: " + " ".join(
                f"--dim {name}=N" for name in dynamic) + " (dims= in Python)")
        super().__init__(f"cannot import {model}: {len(problems)} node(s) stitch cannot translate:\n  "
                         + "\n  ".join(lines), hint=hint)

    @property
    def fixable_inputs(self) -> list[str]:
        """Graph inputs read as shapes or axes: fixing their values (constant_inputs) may make the model importable."""
        return sorted({p.input for p in self.problems if p.kind == "input"})


def import_onnx(model, entry: str | None = None, fold_constants: bool | None = None,
                constant_inputs: dict[str, np.ndarray] | None = None,
                outputs: list[str] | None = None, dims: dict[str, int] | None = None,
                dim_ranges: dict[str, tuple[int, int]] | None = None, winograd: bool = True) -> Imported:
    """Translate an ONNX model (a path, bytes or a ModelProto) into one stitch func.

    entry: the func's name (default: the graph's). outputs: import only what these
    ONNX values need (a subgraph); default the graph outputs. constant_inputs: graph
    inputs fixed to these values (how an input read as a shape or axes list is made static).
    fold_constants: which float initializers become import-time values (a scalar read as data is a
    literal) instead of parameters: by default those of one element (the exporters keep every
    Python scalar of the model there: GELU's 3.0 must be a literal for `pow-three` to see it);
    True: those of at most FOLD_LIMIT elements; False: none. dims: a size for each named dynamic
    dimension of the graph inputs (`dim_param`) to import at that size; the others become symbols
    of the func, each with its range in dim_ranges ((low, high), inclusive) or the IR's default.
    winograd: a 3x3 conv of a value the program makes channels first is Winograd's F(2x2, 3x3)
    (frontends/onnx_nn.py `winograd`); False: every conv is its direct product.
    """
    model, label = load_model(model)
    try:
        return translate_graph(model, label, entry, fold_constants, constant_inputs, outputs, dims or {},
                               dim_ranges or {}, winograd)
    except StitchError:
        raise
    except Exception as err:  # a malformed model the steps above did not foresee: still one clear error
        raise StitchError(f"cannot import {label}: {type(err).__name__}: {err}") from None


def translate_graph(model, label: str, entry, fold_constants, constant_inputs, outputs, dims,
                    dim_ranges, winograd: bool = True) -> Imported:
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None and any(n.domain in ("", "ai.onnx") for n in graph.node):
        raise StitchError(f"{label}: the model imports no version of the default ONNX domain (its opset_import "
                          "lists none), so its ops have no meaning")
    from onnx.defs import onnx_opset_version

    if opset is not None and not 1 <= opset <= onnx_opset_version():
        raise StitchError(f"{label}: the model's opset {opset} is not an ONNX opset (this onnx knows 1 to "
                          f"{onnx_opset_version()})")
    unknown = sorted(set(constant_inputs or {}) - {vi.name for vi in graph.input})
    if unknown:
        inits = {i.name for i in graph.initializer}
        raise StitchError(f"{label}: --constant (constant_inputs=) names {', '.join(map(repr, unknown))}, no graph "
                          f"input of the model", hint="its graph inputs: " + (", ".join(
                              vi.name for vi in graph.input if vi.name not in inits) or "none"))
    check_dim_options(graph, label, dims, dim_ranges)
    ranges, narrowed = {}, {}
    for attempt in range(4):  # again while the import narrows a range: at most once per symbol in practice
        b, result = translate_once(model, graph, label, opset, entry, fold_constants, constant_inputs, outputs,
                                   dims, dim_ranges, ranges, narrowed, last=attempt == 3, winograd=winograd)
        if result is not None:
            break
        ranges, narrowed = dict(b.ranges), dict(b.narrowed)
    if isinstance(result, OnnxImportError):
        raise result
    return result


def check_dim_options(graph, label: str, dims: dict, dim_ranges: dict) -> None:
    """--dim and --dim-range name dim_params of the graph inputs; a range is 1 <= low <= high <= 2**31 - 1."""
    named = {d.dim_param for vi in graph.input for d in vi.type.tensor_type.shape.dim if d.dim_param}
    for option, given in (("--dim (dims=)", dims), ("--dim-range (dim_ranges=)", dim_ranges)):
        if sorted(set(given) - named):
            raise StitchError(f"{label}: {option} names {', '.join(map(repr, sorted(set(given) - named)))}, no "
                              "dynamic dimension of the model's inputs",
                              hint="its dynamic dimensions: " + (", ".join(sorted(named)) or "none"))
    both = sorted(set(dims) & set(dim_ranges))
    if both:
        raise StitchError(f"{label}: {', '.join(map(repr, both))} is given both a size (--dim) and a range "
                          "(--dim-range)", hint="give one of them")
    for name, (lo, hi) in dim_ranges.items():
        if not 1 <= lo <= hi <= dimensions.DEFAULT_RANGE[1]:
            raise StitchError(f"{label}: the range of '{name}' must be LOW..HIGH with 1 <= LOW <= HIGH <= "
                              f"{dimensions.DEFAULT_RANGE[1]}, got {lo}..{hi}")


def translate_once(model, graph, label, opset, entry, fold_constants, constant_inputs, outputs, dims, dim_ranges,
                   ranges: dict, narrowed: dict, last: bool, winograd: bool = True):
    """One translation of the graph, its symbols starting from `ranges` (those an earlier pass narrowed,
    with why in `narrowed`): (the builder, the Imported or the OnnxImportError), or (the builder, None)
    when it narrowed a range further and is not the `last` pass (the import runs again)."""
    b = Builder(opset or 1)  # (no default-domain node to read it)
    b.narrowed.update(narrowed)
    b.winograd = winograd
    problems: list[Problem] = []
    env: dict[str, Value | None] = {}  # None: a value a failed node would have produced
    for init in graph.initializer:
        try:
            env[init.name] = initializer_value(init, fold_constants)
        except Exception as err:  # a data_type changed, truncated raw_data, ...
            env[init.name] = None
            problems.append(Problem(init.name, "initializer", "invalid",
                                    f"invalid model: the initializer cannot be read ({type(err).__name__}: {err})"))
    symbols = declare_symbols(b, graph, env, constant_inputs or {}, dims, dim_ranges, ranges)
    inputs = bind_graph_inputs(b, graph, env, constant_inputs or {}, dims, symbols)
    wanted = list(outputs) if outputs else [o.name for o in graph.output]
    for node in needed_nodes(graph, wanted, set(env)):
        translate_node(b, node, env, problems)
    if not last and any(b.ranges[s] != ranges.get(s) for s in b.narrowed):
        return b, None
    returns = []
    for name in wanted:
        if name not in env:
            raise StitchError(f"{label}: no value named '{name}' in the graph")
        try:
            returns.append(b.data(env[name], name) if env[name] is not None else None)
        except Unsupported as u:
            problems.append(Problem(name, "graph output", u.kind, u.reason, dim=u.dim))
    if problems:
        return b, OnnxImportError(label, problems)
    check_declared_outputs(graph, wanted, [b.type_of(env[n]) for n in wanted], label)
    imported = b.finish(entry or graph.name or "main", returns, inputs, wanted)
    imported.symbols = symbols
    return b, imported


def declare_symbols(b: Builder, graph, env: dict, constant_inputs: dict, fixed: dict, given: dict,
                    carried: dict) -> dict[str, str]:
    """A symbol for each dim_param of the graph inputs that no size fixes, in order of appearance, with
    its range: `given` (by dim_param), else `carried` (by symbol: an earlier pass narrowed it), else the
    IR's default. {dim_param: the symbol's name (an IR name)}."""
    symbols: dict[str, str] = {}
    for vi in graph.input:
        if vi.name in env or vi.name in constant_inputs or vi.type.WhichOneof("value") != "tensor_type":
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param and not d.HasField("dim_value") and d.dim_param not in fixed | symbols:
                name, k = sanitize(d.dim_param), 1
                while name in b.names or name in DTYPES:
                    name, k = f"{sanitize(d.dim_param)}_{k}", k + 1
                b.symbol(name, given.get(d.dim_param) or carried.get(name), given=d.dim_param in given)
                symbols[d.dim_param] = name
    return symbols


def bind_graph_inputs(b: Builder, graph, env: dict, constant_inputs: dict, dims: dict[str, int],
                      symbols: dict[str, str]) -> dict[str, str]:
    """Parameters for the graph inputs (not initializers, not fixed by the caller); {input: parameter}."""
    inputs = {}
    for vi in graph.input:
        if vi.name in env:
            continue
        if vi.name in constant_inputs:
            env[vi.name] = Known(np.asarray(constant_inputs[vi.name]), name=vi.name)
            continue
        try:
            typ = input_type(vi, dims, symbols)
            try:
                env[vi.name] = b.param(vi.name, typ, input=vi.name)
            except StitchError as err:  # too large at the symbols' default ranges
                raise Unsupported("shape", f"input '{vi.name}': {err.message}: declare the ranges with --dim-range "
                                           "(dim_ranges= in Python)") from None
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

    label = node.name or (node.output[0] if node.output else node.op_type)
    missing = [i for i in node.input if i and i not in env]
    if missing:
        raise StitchError(f"node '{label}' ({node.op_type}) reads '{missing[0]}', which nothing defines")
    ins = [env[i] if i else None for i in node.input]
    failed_input = any(i and env[i] is None for i in node.input)
    try:
        if failed_input:

            if not is_supported(node):
                raise Unsupported("op", f"stitch has no translation for {node.op_type}")
            results = []
        else:
            results = translate(b, node, ins)
    except Unsupported as u:
        problems.append(Problem(label, node.op_type, u.kind, u.reason, u.input, u.dim))
        results = []
    except Exception as err:  # a malformed node (an attribute of the wrong kind, a broken tensor)
        symbolic = symbolic_types(b, ins)
        if symbolic:  # a converter that computes with sizes, given symbolic ones
            names = ",".join(sorted({s for t in symbolic for s in dimensions.symbols_of(t.shape)}))
            problems.append(Problem(label, node.op_type, "shape", f"{node.op_type} of {', '.join(map(str, symbolic))}: "
                                    "stitch translates it only where these sizes are static", dim=names))
        else:
            problems.append(Problem(label, node.op_type, "error", f"cannot be read ({type(err).__name__}: {err})"))
        results = []
    for k, name in enumerate(node.output):
        if name:
            env[name] = results[k] if k < len(results) else None


def symbolic_types(b: Builder, ins: list) -> list[TensorType]:
    """The types of the inputs whose shapes have symbolic dimensions."""
    out = []
    for v in ins:
        try:
            t = b.type_of(v) if v is not None else None
        except Exception:
            continue
        if t is not None and not dimensions.is_static(t.shape):
            out.append(t)
    return out


def initializer_value(init, fold_constants: bool | None) -> Known:
    from onnx import numpy_helper

    if any(d < 0 for d in init.dims):
        raise ValueError(f"a negative dimension in its shape {list(init.dims)}")
    array = numpy_helper.to_array(init)
    limit = {None: 1, True: FOLD_LIMIT, False: 0}[fold_constants]
    small = array.size <= limit
    return Known(array, "" if small else init.name)


def input_type(vi, fixed: dict[str, int] | None = None, symbols: dict[str, str] | None = None) -> TensorType:
    """The TensorType of a graph input, or Unsupported (a dtype stitch lacks, a dynamic dimension without
    a name). A named dynamic dimension has the size `fixed` gives it, else its symbol in `symbols`."""
    t = vi.type
    if t.WhichOneof("value") != "tensor_type":
        raise Unsupported("dtype", f"input '{vi.name}' is a {t.WhichOneof('value')}, not a tensor")
    dtype = onnx_dtype(t.tensor_type.elem_type)
    if not t.tensor_type.HasField("shape"):
        raise Unsupported("shape", f"input '{vi.name}' has no static shape (unknown rank)")
    shape = []
    for d in t.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            size = d.dim_value
        elif d.dim_param in (fixed or {}):
            size = fixed[d.dim_param]
        elif d.dim_param in (symbols or {}):
            shape.append(dimensions.symbol(symbols[d.dim_param]))
            continue
        elif d.dim_param:
            raise Unsupported("shape", f"input '{vi.name}' has a dynamic dimension ('{d.dim_param}')", dim=d.dim_param)
        else:
            raise Unsupported("shape", f"input '{vi.name}' has a dynamic dimension with no name (no dim_param): "
                                       "stitch makes symbols of named ones only")
        if size < 0:
            raise invalid(f"input '{vi.name}' has a negative dimension ({size})")
        shape.append(size)
    return TensorType(dtype, check_dims(tuple(shape), vi.name))


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
        static = all(isinstance(d, int) for d in typ.shape)  # a symbolic one may take the declared size
        if tt.HasField("shape") and None not in dims and static and tuple(dims) != typ.shape:
            raise StitchError(f"{label}: output '{name}' is declared with shape {dims}, computed {typ}")


