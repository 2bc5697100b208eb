"""The closed set of tensor ops, in named groups, with their signatures.

Everything that needs to know "what kind of op is this" (the checker, the
interpreter, the rule compiler, the cost model, lowering) asks this table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Which dtypes an op accepts for its (value) operands.
FLOAT = "float"  # f16 f32 f64
NUMERIC = "numeric"  # floats and ints
ANY = "any"  # numeric and bool


@dataclass(frozen=True)
class AttrSpec:
    kind: str  # "axes" | "bool" | "perm" | "shape" | "dtype"
    required: bool = False


@dataclass(frozen=True)
class OpSpec:
    name: str
    group: str  # "unary" | "binary" | "compare" | "select" | "reduce" | "matmul" | "layout"
    arity: int
    dtypes: str
    attrs: dict[str, AttrSpec] = field(default_factory=dict)

    @property
    def elementwise(self) -> bool:
        return self.group in ELEMENTWISE_GROUPS or self.name == "cast"


UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "erf")
UNARY_FLOAT = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")
BINARY_FLOAT = ("div", "pow")
COMPARE = ("less", "greater", "equal")
REDUCE = ("sum", "mean", "max", "min")
LAYOUT = ("transpose", "reshape", "broadcast_to", "cast")
ELEMENTWISE_GROUPS = ("unary", "binary", "compare", "select")

_REDUCE_ATTRS = {"axes": AttrSpec("axes"), "keepdims": AttrSpec("bool")}


def _table() -> dict[str, OpSpec]:
    ops: dict[str, OpSpec] = {}
    for name in UNARY:
        ops[name] = OpSpec(name, "unary", 1, FLOAT if name in UNARY_FLOAT else NUMERIC)
    for name in BINARY:
        ops[name] = OpSpec(name, "binary", 2, FLOAT if name in BINARY_FLOAT else NUMERIC)
    ops["less"] = OpSpec("less", "compare", 2, NUMERIC)
    ops["greater"] = OpSpec("greater", "compare", 2, NUMERIC)
    ops["equal"] = OpSpec("equal", "compare", 2, ANY)
    ops["where"] = OpSpec("where", "select", 3, ANY)
    for name in REDUCE:
        ops[name] = OpSpec(name, "reduce", 1, FLOAT if name == "mean" else NUMERIC, _REDUCE_ATTRS)
    ops["matmul"] = OpSpec("matmul", "matmul", 2, NUMERIC)
    ops["transpose"] = OpSpec("transpose", "layout", 1, ANY, {"perm": AttrSpec("perm")})
    ops["reshape"] = OpSpec("reshape", "layout", 1, ANY, {"shape": AttrSpec("shape", required=True)})
    ops["broadcast_to"] = OpSpec("broadcast_to", "layout", 1, ANY, {"shape": AttrSpec("shape", required=True)})
    ops["cast"] = OpSpec("cast", "layout", 1, ANY, {"dtype": AttrSpec("dtype", required=True)})
    return ops


OPS: dict[str, OpSpec] = _table()


def is_elementwise(op: str) -> bool:
    spec = OPS.get(op)
    return spec is not None and spec.elementwise
