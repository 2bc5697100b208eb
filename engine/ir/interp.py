"""The numpy reference interpreter: the oracle every later stage is compared with.

A float32 program computes in float32, as numpy does: every op keeps its
operands' dtype (reductions pass `dtype=` so integer sums do not widen).
Where numpy's answer depends on the platform or on the order it visits
elements (float -> int casts out of range, the sign of a zero maximum, f16
sums), `floats.py` fixes the one every target gives. Values are dropped right
after their last use.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from . import dims, floats
from .errors import StitchError
from .graph import Graph, Node
from .ops import check_elementwise_table
from .program import INT_DTYPES, TensorType, int_range
from .python_values import from_python, is_python_value, not_an_array

NP_DTYPES = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i8": np.int8,
    "u8": np.uint8,
    "i32": np.int32,
    "i64": np.int64,
    "bool": np.bool_,
}
_erf_of_float = np.frompyfunc(math.erf, 1, 1)


_NP_DTYPES = {name: np.dtype(t) for name, t in NP_DTYPES.items()}


def np_dtype(dtype: str) -> np.dtype:
    return _NP_DTYPES[dtype]  # (made once: np.dtype(...) took a tenth of a small program's call)


Elementwise = Callable[[list[np.ndarray], np.dtype], np.ndarray]
DTYPE_OF_NP = {np.dtype(v): k for k, v in NP_DTYPES.items()}  # numpy dtype -> IR dtype name

ALIGNMENT = 64  # bytes: a cache line, and the widest vector compiled C loads (AVX-512's)


def aligned_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialized C-contiguous array whose first element starts a cache line.

    numpy's own arrays start 16 bytes past one (malloc's alignment), so every 64-byte vector load
    of a product's right operand read two cache lines."""
    return aligned_empty_at(shape, dtype)[0]


def aligned_empty_at(shape: tuple[int, ...], dtype) -> tuple[np.ndarray, int]:
    """`aligned_empty`'s array and the address of its first element (taking an array's address
    costs a call into numpy's ctypes glue: the compiled program's calls take this one)."""
    dtype = np.dtype(dtype)
    size = math.prod(shape) * dtype.itemsize
    raw = np.empty(size + ALIGNMENT, np.uint8)
    base = raw.ctypes.data
    start = -base % ALIGNMENT
    return raw[start:start + size].view(dtype).reshape(shape), base + start


def outputs_fit(specs, out, inputs: dict[str, np.ndarray]) -> bool:
    """Whether `out=` passes `check_outputs` on its common path: plain arrays of the static output
    `specs` (dtype, shape), writeable, C-contiguous, aligned, none possibly sharing memory with an input
    or another. False leaves the decision, and the error's words, to `check_outputs`
    (engine/compiled_program.py). Called right
    after another program has run, the full check took 20 us of a 0.45 ms call
    (docs/perf/2026-11-29-group-norm.md)."""
    if specs is None or type(out) not in (list, tuple) or len(out) != len(specs):
        return False
    for k, arr in enumerate(out):
        dtype, shape = specs[k]
        if type(arr) is not np.ndarray or arr.shape != shape or arr.dtype != dtype:
            return False
        flags = arr.flags
        if not (flags.writeable and flags.c_contiguous and flags.aligned):
            return False
        for x in inputs.values():
            if np.may_share_memory(arr, x):
                return False
        for j in range(k):
            if np.may_share_memory(arr, out[j]):
                return False
    return True


def aligned_copy(a: np.ndarray) -> np.ndarray:
    """`a`'s values in an array of its own made by `aligned_empty`."""
    a = np.asarray(a)
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(x.dtype.type(1) + np.exp(np.negative(x)))


def _relu(x: np.ndarray) -> np.ndarray:
    return floats.maximum(x, x.dtype.type(0))


def _erf(x: np.ndarray) -> np.ndarray:
    # frompyfunc gives a bare Python float for a 0-d input, so wrap before casting.
    return np.asarray(_erf_of_float(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


def _unary(f: Callable[[np.ndarray], np.ndarray]) -> Elementwise:
    """A unary op computed in its operand's dtype, then given the result's."""
    return lambda args, out_dt: np.asarray(f(np.asarray(args[0])), dtype=out_dt)


def _binary(f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Elementwise:
    return lambda args, out_dt: np.asarray(f(args[0], args[1]), dtype=out_dt)


# The reference definition of every elementwise op, by name: its operand arrays and the result's
# numpy dtype -> the result. Checked against engine/ir/ops.py at import. The numpy executor
# (lowering/execute.py) and through it the accelerator simulator (targets/simulator.py) compute
# elementwise ops with this same table (`elementwise`), so it covers them too.
ELEMENTWISE: dict[str, Elementwise] = {
    "neg": _unary(np.negative),
    "abs": _unary(np.abs),
    "exp": _unary(np.exp),
    "log": _unary(np.log),
    "sqrt": _unary(np.sqrt),
    "rsqrt": _unary(lambda x: np.reciprocal(np.sqrt(x))),
    "tanh": _unary(np.tanh),
    "sigmoid": _unary(_sigmoid),
    "relu": _unary(_relu),
    "erf": _unary(_erf),
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(np.divide),
    "pow": _binary(floats.power),
    "maximum": _binary(floats.maximum),
    "minimum": _binary(floats.minimum),
    "bitand": _binary(np.bitwise_and),
    "bitor": _binary(np.bitwise_or),
    "bitxor": _binary(np.bitwise_xor),
    "shl": _binary(floats.left_shift),
    "shr": _binary(floats.right_shift),
    "less": _binary(np.less),
    "greater": _binary(np.greater),
    "equal": _binary(np.equal),
    "where": lambda args, out_dt: np.where(args[0], args[1], args[2]).astype(out_dt, copy=False),
    "cast": lambda args, out_dt: floats.cast(args[0], out_dt),
}
check_elementwise_table(ELEMENTWISE, "engine/ir/interp.py's ELEMENTWISE")


def elementwise(op: str, dtype: str, args: list[np.ndarray]) -> np.ndarray:
    """An elementwise op (unary, binary, compare, where, cast) with result dtype `dtype`."""
    return ELEMENTWISE[op](args, np_dtype(dtype))


def apply_op(node: Node, args: list[np.ndarray], sizes: dict[str, int] | None = None) -> np.ndarray:
    """Evaluate one node on numpy arrays (the living definition of each op); `sizes` gives the
    symbolic dimensions' values in this call."""
    op = node.op
    if sizes:
        node = concrete(node, sizes)
    out_dt = np_dtype(node.type.dtype)
    if op == "const":
        return np.asarray(node.attr("value"), dtype=out_dt)
    if op in ("sum", "mean"):
        return floats.reduce_sum(op, args[0], node.attr("axes"), node.attr("keepdims"), out_dt)
    if op in ("max", "min"):
        return floats.reduce_extremum(op, args[0], node.attr("axes"), node.attr("keepdims"))
    if op == "matmul":
        return np.asarray(np.matmul(args[0], args[1]), dtype=out_dt)
    if op == "transpose":
        return np.transpose(args[0], node.attr("perm"))
    if op == "reshape":
        return np.reshape(args[0], node.attr("shape"))
    if op == "broadcast_to":
        return np.broadcast_to(args[0], node.attr("shape"))
    if op == "slice":
        index = [slice(None)] * args[0].ndim
        for axis, start, end, step in zip(*(node.attr(k) for k in ("axes", "starts", "ends", "steps"))):
            index[axis] = slice(start, end, step)
        return args[0][tuple(index)]
    if op == "concat":
        return np.concatenate(args, axis=node.attr("axis"))
    if op == "gather":
        return gather(node, args[0], args[1])
    if op == "iota":
        return iota(node.attr("shape"), node.attr("axis"), out_dt)
    return elementwise(op, node.type.dtype, args)


def iota(shape: tuple[int, ...], axis: int, dtype: np.dtype) -> np.ndarray:
    """Each element's index along `axis` (np.indices(shape)[axis]), a broadcast view of one arange."""
    line = np.arange(shape[axis], dtype=dtype).reshape([-1 if a == axis else 1 for a in range(len(shape))])
    return np.broadcast_to(line, shape)


def concrete(node: Node, sizes: dict[str, int]) -> Node:
    """`node` with the symbolic dimensions of its attributes (a shape, slice bounds) at `sizes`."""
    attrs = tuple((k, tuple(dims.evaluate(d, sizes) for d in v) if isinstance(v, tuple) else v) for k, v in node.attrs)
    return Node(node.id, node.op, node.inputs, attrs, node.type, node.name, node.pos) if attrs != node.attrs else node


def bind_symbols(graph: Graph, arrays: dict[str, np.ndarray]) -> dict[str, int]:
    """Each symbol's value, read from the shapes of the arrays given for the parameters it is a
    dimension of: two that disagree, or a value outside the symbol's range, is an error naming them.
    (An array whose rank is not its parameter's is left to `bind_inputs` to report.)"""
    found: dict[str, tuple[int, str, int]] = {}
    types = dict(zip(graph.param_names, graph.param_types))
    for name, arr in arrays.items():  # (in the parameters' order: bind_call's arrays are)
        t = types.get(name)
        if t is None or np.ndim(arr) != t.rank:
            continue
        for axis, d in enumerate(t.shape):
            symbol = dims.bare_symbol(d)
            if symbol is None:
                continue
            value = np.shape(arr)[axis]
            if symbol in found and found[symbol][0] != value:
                v0, name0, axis0 = found[symbol]
                raise StitchError(f"symbol '{symbol}' is {v0} in input '{name0}' (axis {axis0}) but {value} in input "
                                  f"'{name}' (axis {axis})")
            low, high = graph.symbols[symbol]
            if not low <= value <= high:
                raise StitchError(f"symbol '{symbol}' is {value} in input '{name}' (axis {axis}), outside its range "
                                  f"{low}..{high}")
            found[symbol] = (value, name, axis)
    return {symbol: v for symbol, (v, _, _) in found.items()}


def gather(node: Node, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """np.take along the node's axis, negative indices from the end; an index out of range is a StitchError.

    (np.take itself would raise IndexError, or wrap with mode='wrap': neither is what the IR means.)
    """
    axis = node.attr("axis")
    size = x.shape[axis]
    bad = (indices < -size) | (indices >= size)
    if np.any(bad):
        value = indices[tuple(np.argwhere(bad)[0])] if indices.ndim else indices
        raise StitchError(f"gather: index {int(value)} is out of range for axis {axis} of size {size}", node.pos)
    return np.take(x, indices.astype(np.int64, copy=False), axis=axis)


def evaluate(graph: Graph, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run `graph` on named inputs; return its outputs in return order."""
    args, sizes = bind_call(graph, inputs)
    env: dict[int, np.ndarray] = {}
    last = graph.last_use()
    with np.errstate(all="ignore"):
        for n in graph.nodes:
            if n.op == "param":
                env[n.id] = args[n.attr("name")]
                continue
            env[n.id] = apply_op(n, [env[i] for i in n.inputs], sizes)
            for i in set(n.inputs):
                if last[i] == n.id:
                    del env[i]
    # Not ascontiguousarray: it turns a 0-d result into shape (1,).
    return [np.asarray(env[o], order="C") for o in graph.outputs]


def bind_inputs(graph: Graph, inputs: dict[str, np.ndarray], bound: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Check the caller's arrays against the parameters: names, shapes, dtypes. `bound` names the
    parameters whose values were given at compile time (weights=): a call does not take them."""
    return bind_call(graph, inputs, bound)[0]


def bind_call(graph: Graph, inputs: dict[str, np.ndarray],
              bound: tuple[str, ...] = ()) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """`bind_inputs`'s arrays, and the symbols' values they give (empty for static shapes)."""
    names = [n for n in graph.param_names if n not in bound]
    missing = [n for n in names if n not in inputs]
    again = [k for k in inputs if k in bound]
    extra = [k for k in inputs if k not in names and k not in bound]
    if missing:
        raise StitchError(f"missing input for parameter(s) {', '.join(missing)} of '{graph.name}'")
    if again:
        raise StitchError(f"parameter(s) {', '.join(again)} of '{graph.name}' were bound at compile time (weights=): "
                          "a call does not take them", hint="compile again to bind other values")
    if extra:
        raise StitchError(f"'{graph.name}' has no parameter(s) named {', '.join(extra)}")
    types = dict(zip(graph.param_names, graph.param_types))
    arrays = {name: _array("input", name, inputs[name], types[name]) for name in names}
    sizes = bind_symbols(graph, arrays) if graph.symbols else {}
    return {name: _checked("input", name, arrays[name], types[name], sizes) for name in names}, sizes


class CallBinder:
    """`bind_call` for one graph and bound set, with what it checks worked out once: a call whose
    arguments are numpy arrays of the parameters' dtypes and ranks, each symbol read from a
    dimension that is that symbol alone, is checked in a few microseconds; any other call (a
    Python value to convert, a mistake to report) goes through `bind_call`, which says what is
    wrong in the same words."""

    def __init__(self, graph: Graph, bound: tuple[str, ...] = ()):
        self.graph, self.bound = graph, bound
        types = dict(zip(graph.param_names, graph.param_types))
        names = [n for n in graph.param_names if n not in bound]
        self.names = frozenset(names)
        # per parameter: (name, numpy dtype, rank, static shape or None, its bare symbols as
        # (axis, symbol), its other symbolic dimensions as (axis, dim))
        self.params = []
        read = set()
        for name in names:
            t = types[name]
            symbols = tuple((axis, dims.bare_symbol(d)) for axis, d in enumerate(t.shape)
                            if dims.bare_symbol(d) is not None)
            others = tuple((axis, d) for axis, d in enumerate(t.shape)
                           if not isinstance(d, int) and dims.bare_symbol(d) is None)
            read.update(s for _, s in symbols)
            static = t.shape if dims.is_static(t.shape) else None
            self.params.append((name, np_dtype(t.dtype), t.rank, static, symbols, others))
        self.complete = read >= set(graph.symbols)  # (else a symbol is read from no bare dimension)

    def __call__(self, inputs: dict) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        if not self.complete or inputs.keys() != self.names:
            return bind_call(self.graph, inputs, self.bound)
        ranges = self.graph.symbols
        arrays: dict[str, np.ndarray] = {}
        sizes: dict[str, int] = {}
        for name, dtype, rank, static, symbols, _ in self.params:
            arr = inputs[name]
            if type(arr) is not np.ndarray or arr.dtype != dtype or arr.ndim != rank:
                return bind_call(self.graph, inputs, self.bound)
            if static is not None:
                if arr.shape != static:
                    return bind_call(self.graph, inputs, self.bound)
            else:
                shape = arr.shape
                for axis, symbol in symbols:
                    value = shape[axis]
                    if sizes.setdefault(symbol, value) != value:
                        return bind_call(self.graph, inputs, self.bound)
                    low, high = ranges[symbol]
                    if not low <= value <= high:
                        return bind_call(self.graph, inputs, self.bound)
            arrays[name] = arr
        for name, _, _, static, _, others in self.params:
            if others and any(arrays[name].shape[axis] != dims.evaluate(d, sizes) for axis, d in others):
                return bind_call(self.graph, inputs, self.bound)
        return arrays, sizes


def bind_weights(graph: Graph, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Check the arrays bound at compile time (weights=) against the parameters they name."""
    if not isinstance(weights, dict) or not all(isinstance(k, str) for k in weights):
        raise TypeError(f"weights must be a dict of parameter names to arrays, not {type(weights).__name__}")
    types = dict(zip(graph.param_names, graph.param_types))
    extra = [k for k in weights if k not in types]
    if extra:
        raise StitchError(f"weights: '{graph.name}' has no parameter(s) named {', '.join(extra)}",
                          hint=f"its parameters are {', '.join(graph.param_names)}")
    return {name: _checked("weight", name, _array("weight", name, arr, types[name]), types[name])
            for name, arr in weights.items()}


def _array(kind: str, name: str, value, want: TensorType) -> np.ndarray:
    """An input or weight as an array: a Python scalar or nested list converted to the parameter's
    dtype (python_values.py), anything else as numpy takes it."""
    if is_python_value(value):
        return from_python(kind, name, value, want, np_dtype(want.dtype))
    arr = np.asarray(value)
    if arr.dtype.kind in "OUSV":  # None, a str, a dict, ...: nothing numpy holds as numbers
        raise not_an_array(kind, name, value, want, np_dtype(want.dtype))
    return arr


def _checked(kind: str, name: str, value, want, sizes: dict[str, int] | None = None) -> np.ndarray:
    arr = np.asarray(value)
    shape = want.shape if dims.is_static(want.shape) else shape_at(want.shape, sizes or {})
    if arr.shape != shape:
        raise StitchError(f"{kind} '{name}' has shape {list(arr.shape)} but the parameter is {want}")
    if arr.dtype != np_dtype(want.dtype):
        raise StitchError(f"{kind} '{name}' has dtype {arr.dtype} but the parameter is {want}")
    return arr


def shape_at(shape: tuple, sizes: dict[str, int]) -> tuple:
    """A parameter's shape at the symbols' values; a dimension whose symbols have none stays an expression."""
    try:
        return tuple(dims.evaluate(d, sizes) for d in shape)
    except KeyError:
        return tuple(dims.substitute(d, sizes) for d in shape)


def random_inputs(graph: Graph, seed: int = 0, sizes: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Inputs for every parameter: floats in [0.5, 2) (inside every op's domain), small ints (i8 and u8
    across their range), coin-flip bools;
    a parameter that reaches gather's indices (see `index_bounds`) gets indices in range, negative ones too.
    A program with symbolic dimensions needs their values in `sizes`."""
    missing = sorted(set(graph.symbols) - set(sizes or {}))
    if missing:
        raise StitchError(f"random inputs of '{graph.name}' need a value for its symbol(s) {', '.join(missing)}",
                          hint=f"--dim {missing[0]}=N on the command line (random_inputs(..., sizes=) in Python)")
    for symbol, value in (sizes or {}).items():
        low, high = graph.symbols.get(symbol, (value, value))
        if symbol not in graph.symbols or not low <= value <= high:
            raise StitchError(f"'{graph.name}' has no symbol '{symbol}'" if symbol not in graph.symbols else
                              f"symbol '{symbol}' = {value} is outside its range {low}..{high}")
    rng = np.random.default_rng(seed)
    bounds = index_bounds(graph, sizes)
    out = {}
    for name, t in zip(graph.param_names, graph.param_types):
        t = TensorType(t.dtype, tuple(dims.evaluate(d, sizes) for d in t.shape)) if sizes else t
        if t.dtype in ("f16", "f32", "f64"):
            arr = rng.uniform(0.5, 2.0, size=t.shape)
        elif t.dtype == "bool":
            arr = rng.random(size=t.shape) < 0.5
        elif name in bounds:
            arr = rng.integers(-bounds[name], bounds[name], size=t.shape)
        elif t.dtype in ("i8", "u8"):  # quantized values: the whole range
            low, high = int_range(t.dtype)
            arr = rng.integers(low, high + 1, size=t.shape)
        else:
            arr = rng.integers(-8, 9, size=t.shape)
        out[name] = np.asarray(arr, dtype=np_dtype(t.dtype))
    return out


# Ops through which a value reaches its result unchanged (only moved, or an
# integer cast of a small integer): an index parameter read through them is
# still an index. gather passes on its x operand's values, not its indices'.
_VALUE_PRESERVING = ("transpose", "reshape", "broadcast_to", "slice", "concat")


def index_bounds(graph: Graph, sizes: dict[str, int] | None = None) -> dict[str, int]:
    """For each parameter whose values reach gather's indices: the size of the smallest axis they index.

    Values in [-n, n) are then in range for every gather they reach (through
    the ops above and integer casts). Used to draw valid inputs.
    """
    bound: dict[int, int] = {}
    for n in reversed(graph.nodes):  # consumers before producers
        if n.op == "gather":
            size = dims.evaluate(graph.nodes[n.inputs[0]].type.shape[n.attr("axis")], sizes or {})
            bound[n.inputs[1]] = min(bound.get(n.inputs[1], size), size)
        if n.id not in bound:
            continue
        if n.op in _VALUE_PRESERVING or (n.op == "cast" and _ints(n.type.dtype, graph.nodes[n.inputs[0]].type.dtype)):
            sources = n.inputs
        elif n.op == "gather":
            sources = n.inputs[:1]
        else:
            sources = ()
        for i in sources:
            bound[i] = min(bound.get(i, bound[n.id]), bound[n.id])
    return {n.attr("name"): bound[n.id] for n in graph.nodes if n.op == "param" and n.id in bound}


def _ints(*dtypes: str) -> bool:
    return all(d in INT_DTYPES for d in dtypes)
