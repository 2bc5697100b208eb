"""The closed set of tensor ops, in named groups, with their signatures.

Everything that needs to know "what kind of op is this" (the checker, the
interpreter, the rule compiler, the cost model, lowering) asks this table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

# Which dtypes an op accepts for its (value) operands.
FLOAT = "float"  # f16 f32 f64
NUMERIC = "numeric"  # floats and ints
INTEGER = "integer"  # i8 u8 i32 i64 (the bit operations)
ANY = "any"  # numeric and bool


class OpGroup(StrEnum):
    """The op groups. A StrEnum, so `spec.group == "layout"` keeps working."""

    UNARY = "unary"
    BINARY = "binary"
    COMPARE = "compare"  # binary, -> bool
    SELECT = "select"  # where(cond, a, b)
    REDUCE = "reduce"
    MATMUL = "matmul"
    LAYOUT = "layout"  # transpose reshape broadcast_to cast: the whole operand, rearranged or converted
    MOVEMENT = "movement"  # slice concat gather: parts of operands, moved
    INDEX = "index"  # iota: a value computed from its own position, reading nothing


# Attribute kinds: what value an attribute holds in a program.
#   axes   a list of distinct axes (negative ones count from the end)
#   perm   a permutation of the axes
#   shape  a list of dimensions (reshape allows one -1)
#   ints   a list of integers, any sign (slice's starts, ends, steps)
#   int    one integer, any sign (an axis)
#   bool   true or false
#   dtype  a dtype name (iota's: one of INDEX_DTYPES)
ATTR_KINDS = ("axes", "perm", "shape", "ints", "int", "bool", "dtype")
LIST_KINDS = ("axes", "perm", "shape", "ints")


@dataclass(frozen=True)
class AttrSpec:
    kind: str  # one of ATTR_KINDS
    required: bool = False

    def __post_init__(self):
        assert self.kind in ATTR_KINDS, self.kind


@dataclass(frozen=True)
class OpSpec:
    name: str
    group: OpGroup
    arity: int  # the number of operands; for a variadic op, the fewest it takes
    dtypes: str
    attrs: dict[str, AttrSpec] = field(default_factory=dict)
    variadic: bool = False  # takes `arity` or more operands (concat)

    def takes(self, n: int) -> bool:
        """Whether the op takes n operands."""
        return n == self.arity or (self.variadic and n > self.arity)

    def arity_text(self) -> str:
        """'2 arguments', '1 argument', '1 or more arguments': for error messages."""
        if self.variadic:
            return f"{self.arity} or more arguments"
        return f"{self.arity} argument{'s' if self.arity != 1 else ''}"

    @property
    def elementwise(self) -> bool:
        return self.group in ELEMENTWISE_GROUPS or self.name == "cast"

    @property
    def injective(self) -> bool:
        return self.group in INJECTIVE_GROUPS


UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "erf")
UNARY_FLOAT = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "bitand", "bitor", "bitxor", "shl", "shr")
BINARY_FLOAT = ("div", "pow")
# numpy's bitwise_and, bitwise_or, bitwise_xor, left_shift, right_shift: integer operands only
BINARY_INTEGER = ("bitand", "bitor", "bitxor", "shl", "shr")
COMPARE = ("less", "greater", "equal")
REDUCE = ("sum", "mean", "max", "min")
# Ops that fold the elements along reduced axes into an accumulator: the reductions and matmul.
ACCUMULATING = REDUCE + ("matmul",)
# Those whose accumulator adds (it starts at 0; its rounding grows with the terms summed).
SUMMING = ("sum", "mean", "matmul")
LAYOUT = ("transpose", "reshape", "broadcast_to", "cast")
MOVEMENT = ("slice", "concat", "gather")
INDEX = ("iota",)
ELEMENTWISE_GROUPS = (OpGroup.UNARY, OpGroup.BINARY, OpGroup.COMPARE, OpGroup.SELECT)
# Every output element reads at most one element of each operand: such an op
# fuses into its consumer as an index map (docs/reference/ir.md).
INJECTIVE_GROUPS = ELEMENTWISE_GROUPS + (OpGroup.LAYOUT, OpGroup.MOVEMENT, OpGroup.INDEX)
# Dtypes gather's indices and iota's values may have.
INDEX_DTYPES = ("i32", "i64")

_REDUCE_ATTRS = {"axes": AttrSpec("axes"), "keepdims": AttrSpec("bool")}
_SLICE_ATTRS = {
    "axes": AttrSpec("axes", required=True),
    "starts": AttrSpec("ints", required=True),
    "ends": AttrSpec("ints", required=True),
    "steps": AttrSpec("ints"),
}
_AXIS = {"axis": AttrSpec("int", required=True)}


def _table() -> dict[str, OpSpec]:
    G = OpGroup
    ops: dict[str, OpSpec] = {}
    for name in UNARY:
        ops[name] = OpSpec(name, G.UNARY, 1, FLOAT if name in UNARY_FLOAT else NUMERIC)
    for name in BINARY:
        ops[name] = OpSpec(name, G.BINARY, 2,
                           FLOAT if name in BINARY_FLOAT else INTEGER if name in BINARY_INTEGER else NUMERIC)
    ops["less"] = OpSpec("less", G.COMPARE, 2, NUMERIC)
    ops["greater"] = OpSpec("greater", G.COMPARE, 2, NUMERIC)
    ops["equal"] = OpSpec("equal", G.COMPARE, 2, ANY)
    ops["where"] = OpSpec("where", G.SELECT, 3, ANY)
    for name in REDUCE:
        ops[name] = OpSpec(name, G.REDUCE, 1, FLOAT if name == "mean" else NUMERIC, _REDUCE_ATTRS)
    ops["matmul"] = OpSpec("matmul", G.MATMUL, 2, NUMERIC)
    ops["transpose"] = OpSpec("transpose", G.LAYOUT, 1, ANY, {"perm": AttrSpec("perm")})
    ops["reshape"] = OpSpec("reshape", G.LAYOUT, 1, ANY, {"shape": AttrSpec("shape", required=True)})
    ops["broadcast_to"] = OpSpec("broadcast_to", G.LAYOUT, 1, ANY, {"shape": AttrSpec("shape", required=True)})
    ops["cast"] = OpSpec("cast", G.LAYOUT, 1, ANY, {"dtype": AttrSpec("dtype", required=True)})
    ops["slice"] = OpSpec("slice", G.MOVEMENT, 1, ANY, _SLICE_ATTRS)
    ops["concat"] = OpSpec("concat", G.MOVEMENT, 1, ANY, _AXIS, variadic=True)
    # gather(x, indices): `dtypes` is x's; indices are INDEX_DTYPES.
    ops["gather"] = OpSpec("gather", G.MOVEMENT, 2, ANY, _AXIS)
    # iota(shape=[...], axis=K, dtype=i32): each element's index along axis K (np.indices(shape)[K]);
    # no operands, so `dtypes` speaks of none. dtype defaults to i32.
    ops["iota"] = OpSpec("iota", G.INDEX, 0, ANY, {"shape": AttrSpec("shape", required=True),
                                                    "axis": AttrSpec("int", required=True),
                                                    "dtype": AttrSpec("dtype")})
    return ops


OPS: dict[str, OpSpec] = _table()


def is_elementwise(op: str) -> bool:
    spec = OPS.get(op)
    return spec is not None and spec.elementwise


def is_injective(op: str) -> bool:
    """Elementwise, layout and movement ops: each output element reads at most one element of each operand."""
    spec = OPS.get(op)
    return spec is not None and spec.injective


def value_positions(spec: OpSpec, n_args: int) -> range:
    """The operands that share the op's value dtype (where's condition and gather's indices do not)."""
    if spec.group == OpGroup.SELECT:
        return range(1, n_args)
    if spec.name == "gather":
        return range(1)
    return range(n_args)


def check_elementwise_table(table: Mapping[str, object], where: str) -> None:
    """Raise, naming the op, unless `table` has an entry for every elementwise op of OPS and for no
    other name. Each implementation of the ops (the reference interpreter, the C backend) checks its
    table so at import: adding an op to OPS without its implementation fails at once, not on the
    first program that uses it (docs/howto/add-an-op.md)."""
    wanted = {name for name, spec in OPS.items() if spec.elementwise}
    missing, extra = sorted(wanted - set(table)), sorted(set(table) - wanted)
    if missing:
        raise NotImplementedError(f"{where} has no entry for the elementwise op{'s' * (len(missing) > 1)} "
                                  f"{', '.join(missing)} of engine/ir/ops.py")
    if extra:
        raise ValueError(f"{where} has an entry for {', '.join(extra)}, not an elementwise op of engine/ir/ops.py")
