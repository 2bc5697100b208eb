"""A PyTorch FX graph of ATen ops -> one stitch func.

The graph is the one torch.compile's backend gets after AOTAutograd (functional ATen ops, the core
ATen decompositions applied: engine/torch_backend.py). Each node becomes program values through the
ONNX importer's `Builder` (onnx_builder.py), and the compound ops (layer and group norm, softmax,
GELU, convolution) through the ONNX importer's own converters, given the node's arguments as ONNX
attributes (`_Attrs`): one definition of each op's semantics for both frontends. The op table is
torch_aten.py.

Sizes: a node's shape is read from its `meta["val"]` (a FakeTensor), whose symbolic sizes are sympy
expressions of torch's shape symbols (`s27`); each symbol on a tensor input becomes a symbol of the
func, with the range torch's shape environment gives it, capped at `max_size`. Parameters and buffers
(`weights`, by placeholder name) are known values, bound at compile time; a node torch_aten.py has no
entry for, or whose translation stitch refuses, is `Unsupported`: `supported_nodes` lists the nodes
that translate, so that the backend can run the others in torch.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch

from ..engine.ir import dims
from ..engine.ir.errors import StitchError
from ..engine.ir.program import TensorType, Var
from .onnx_builder import Builder, Imported, Known, Unsupported, sanitize
from .onnx_lazy import Lazy
from .torch_aten import ATEN, DTYPES

# The largest size a dynamic dimension takes where torch's shape environment gives no bound (torch.compile's
# options={"max_size": N} or torch._dynamo.mark_dynamic(x, dim, max=N) change it): the top of the range the
# symbolic program is scheduled for, and above which a call runs in torch.
MAX_SIZE = 4096


@dataclass
class Translation:
    """One graph as a stitch program: the import (text, weights), and how a call's arguments map to it."""

    imported: Imported
    inputs: list[tuple[int, str]]  # (the placeholder's position, the program's parameter)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # each symbol's range


class Translator:
    """The values of the graph's nodes as the Builder emits them (`env`), node by node."""

    def __init__(self, weights: dict[str, torch.Tensor], max_size: int = MAX_SIZE):
        self.b = Builder(21)  # the ONNX converters run with opset 21's semantics (GroupNormalization's scale)
        self.weights = weights
        self.max_size = max_size
        self.env: dict[torch.fx.Node, object] = {}
        self.symbols: dict[str, str] = {}  # torch's symbol name -> the func's

    # -- values -----------------------------------------------------------------------------------------

    def declare(self, val) -> None:
        """A symbol for each of torch's symbols in the sizes of a tensor input, with its range."""
        for size in val.shape:
            if isinstance(size, torch.SymInt):
                for s in sorted(size.node.expr.free_symbols, key=str):
                    if str(s) not in self.symbols:
                        low, high = symbol_range(size.node.shape_env, s, self.max_size)
                        name = self.b.fresh(str(s))
                        self.b.names.discard(name)  # (b.symbol takes it)
                        self.b.symbol(name, (low, high), given=True)
                        self.symbols[str(s)] = name

    def dim(self, size) -> dims.Dim:
        """A size (an int or a SymInt) as a stitch dimension."""
        if isinstance(size, bool):
            raise Unsupported("shape", f"a bool {size} where a size was expected")
        if isinstance(size, int):
            return size
        if isinstance(size, torch.SymInt):
            expr = size.node.expr
            if expr.is_number:
                return int(expr)
            return sympy_dim(expr, self.symbols)
        raise Unsupported("shape", f"a size of type {type(size).__name__}")

    def shape(self, val) -> tuple[dims.Dim, ...]:
        return tuple(self.dim(s) for s in val.shape)

    def type_of(self, val) -> TensorType:
        if not isinstance(val, torch.Tensor):
            raise Unsupported("dtype", f"a value of type {type(val).__name__}, not a tensor")
        if val.dtype not in DTYPES:
            raise Unsupported("dtype", f"{val.dtype} (stitch has float32, float16, float64, int8, uint8, int32, "
                                       "int64, bool)")
        if val.device.type != "cpu":
            raise Unsupported("op", f"a tensor on {val.device} (stitch runs on the CPU)")
        shape = self.shape(val)
        if 0 in shape:
            raise Unsupported("shape", f"a tensor of shape {list(shape)} (stitch tensors are never empty)")
        return TensorType(DTYPES[val.dtype], shape)

    def arg(self, a):
        """An argument of a node as the op table takes it: a node's value (a SymInt node's: its dimension),
        lists element by element, anything else as it is."""
        if isinstance(a, torch.fx.Node):
            val = a.meta.get("val")
            if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
                return self.dim(val)
            if a not in self.env:
                raise Unsupported("op", f"reads '{a.name}', which stitch did not translate")
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    # -- nodes ------------------------------------------------------------------------------------------

    def placeholder(self, node: torch.fx.Node) -> None:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return  # a SymInt: read where used, through its meta value
        if node.name in self.weights:
            array = self.weights[node.name].detach().numpy()
            self.env[node] = Known(array, param=sanitize(node.name), name=node.name)
            return
        self.declare(val)
        typ = self.type_of(val)
        self.env[node] = self.b.param(node.name, typ, input=node.name)

    def call(self, node: torch.fx.Node) -> None:
        if node.target is operator.getitem:
            values = self.arg(node.args[0])
            got = values[node.args[1]] if isinstance(values, (list, tuple)) else None
            if got is None:
                raise Unsupported("op", f"output {node.args[1]} of '{node.args[0]}' is not translated")
            self.env[node] = got
            return
        handler = ATEN.get(node.target)
        if handler is None:
            raise Unsupported("op", f"stitch has no translation for {op_name(node)}")
        args = [self.arg(a) for a in node.args]
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
        result = handler(self, node, *args, **kwargs)
        self.check(node, result)
        self.env[node] = result

    def check(self, node: torch.fx.Node, result) -> None:
        """The translation's type is the one torch computed (else the translation is wrong: refused)."""
        val = node.meta.get("val")
        pairs = zip(result, val) if isinstance(result, (list, tuple)) else [(result, val)]
        for got, want in pairs:
            if got is None or not isinstance(want, torch.Tensor):
                continue
            have, expect = self.b.type_of(got), self.type_of(want)
            if have.dtype != expect.dtype or not same_shape(have.shape, expect.shape):
                raise Unsupported("shape", f"{op_name(node)} translated to {have}, torch computes {expect}")

    def output(self, node: torch.fx.Node) -> list[Var]:
        returns = []
        for a in node.args[0]:
            value = self.arg(a)
            if not isinstance(value, (Known, Lazy)) and not hasattr(value, "name"):
                raise Unsupported("op", f"output '{a}' is not a tensor stitch computes")
            returns.append(self.b.data(value, a.name))
        return returns


def same_shape(a, b) -> bool:
    return len(a) == len(b) and all(dims.add(x, dims.mul(-1, y)) == 0 for x, y in zip(a, b))


def op_name(node: torch.fx.Node) -> str:
    """aten.cumprod, operator.add, ...: how a warning names the op of a node."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target._opname}" if target.namespace == "aten" else str(target.overloadpacket)
    return getattr(target, "__name__", str(target))


def symbol_range(shape_env, symbol, max_size: int) -> tuple[int, int]:
    """A symbol's range: torch's bounds for it (from its guards, `mark_dynamic(min=, max=)`), its upper
    bound at most `max_size` and no more than the top of the IR's range."""
    low, high = 1, max_size
    ranges = getattr(shape_env, "var_to_range", {}).get(symbol)
    if ranges is not None:
        if getattr(ranges.lower, "is_Integer", False):
            low = max(1, int(ranges.lower))
        if getattr(ranges.upper, "is_Integer", False):  # (unbounded: int_oo)
            high = min(int(ranges.upper), dims.DEFAULT_RANGE[1])
    return low, max(low, high)


def sympy_dim(expr, symbols: dict[str, str]) -> dims.Dim:
    """A sympy size expression (sums, products, floor division and modulo by integers) as a dimension."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        if str(expr) not in symbols:
            raise Unsupported("shape", f"the size {expr} is not a size of an input (stitch takes a symbol's "
                                       "value from the inputs' shapes)")
        return dims.symbol(symbols[str(expr)])
    parts = [sympy_dim(a, symbols) for a in expr.args]
    kind = type(expr).__name__
    if expr.is_Add:
        out = parts[0]
        for p in parts[1:]:
            out = dims.add(out, p)
        return out
    if expr.is_Mul:
        out = parts[0]
        for p in parts[1:]:
            out = dims.mul(out, p)
        return out
    if kind in ("FloorDiv", "CleanDiv") and isinstance(parts[1], int) and parts[1] > 0:
        return dims.floordiv(parts[0], parts[1])
    if kind in ("Mod", "PythonMod") and isinstance(parts[1], int) and parts[1] > 0:
        return dims.mod(parts[0], parts[1])
    raise Unsupported("shape", f"the size {expr} ({kind}) has no stitch dimension expression")


def supported_nodes(graph: torch.fx.Graph, weights: dict[str, torch.Tensor],
                    max_size: int = MAX_SIZE) -> tuple[set[torch.fx.Node], dict[torch.fx.Node, str]]:
    """(the call nodes that translate, {each other call node: why not}). A node that reads a node that
    does not translate is tried as if that value were an input, as it is when the graph is split there."""
    t = Translator(weights, max_size)
    good, bad = set(), {}
    for node in graph.nodes:
        if node.op == "placeholder":
            try:
                t.placeholder(node)
            except (Unsupported, StitchError):
                pass
        elif node.op == "call_function":
            if isinstance(node.meta.get("val"), (torch.SymInt, int)):
                continue  # size arithmetic: read through its value where used, left to torch
            try:
                for a in node.all_input_nodes:
                    if a not in t.env and a.op == "call_function" and isinstance(a.meta.get("val"), torch.Tensor):
                        t.env[a] = t.b.param(a.name, t.type_of(a.meta["val"]))  # as the split graph's input
                t.call(node)
                good.add(node)
            except (Unsupported, StitchError, NotImplementedError) as err:
                bad[node] = getattr(err, "reason", None) or str(err)
        elif node.op == "get_attr":
            bad[node] = "a module attribute"
    return good, bad


def translate(graph: torch.fx.Graph, name: str, weights: dict[str, torch.Tensor],
              max_size: int = MAX_SIZE, winograd: bool = True) -> Translation:
    """The whole graph as one stitch func (Unsupported: a node that does not translate, and why);
    `winograd` as import_onnx's."""
    t = Translator(weights, max_size)
    t.b.winograd = winograd
    inputs = []
    returns = None
    for position, node in enumerate(n for n in graph.nodes if n.op == "placeholder"):
        t.placeholder(node)
        value = t.env.get(node)
        if value is not None and not isinstance(value, Known):
            inputs.append((position, value.name))
    for node in graph.nodes:
        if node.op == "call_function":
            if isinstance(node.meta.get("val"), (torch.SymInt, int)):
                continue
            t.call(node)
        elif node.op == "output":
            returns = t.output(node)
        elif node.op != "placeholder":
            raise Unsupported("op", f"a {node.op} node ('{node.name}')")
    t.b.prune(returns, {p for _, p in inputs})
    imported = t.b.finish(name, returns, {p: p for _, p in inputs}, [r.name for r in returns])
    kept = {p.name for p in imported.checked.funcs[0].params}
    return Translation(imported, [(k, p) for k, p in inputs if p in kept], dict(t.b.ranges))
