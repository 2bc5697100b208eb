"""Op -> C: the scalar C of every elementwise op, and its 16-lane AVX-512 form where it has one.

Both tables are keyed by the op names of engine/ir/ops.py and checked against it at import
(`check_tables`, by engine/ir/ops.py's `check_elementwise_table`): an elementwise op without an
entry fails then, naming the op, rather than as an internal error on the first program that uses
it. Only elementwise ops (unary, binary, compare,
select and cast) reach the printer as an `Op` node; reductions, matmul and the layout and
movement ops become loops, accumulators and index maps in lowering.

A scalar entry takes an `Operands` (the operands' C text and dtypes) and returns the C of the
result, cast to its dtype where C would widen it. Each step rounds to the dtype, as the
reference's numpy ops do. A vector entry takes the operands as st_vf32 text and returns the
st_vf32 result; None says the op has no 16-lane form (`vector_expr` then leaves the loop to gcc).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ...engine.ir.ops import OPS, check_elementwise_table
from ...engine.ir.program import INT_DTYPES
from ...lowering.loops import Op
from .prelude import C_TYPES

FLOATS = ("f16", "f32", "f64")
INTS = INT_DTYPES


@dataclass(frozen=True)
class Operands:
    """What a scalar entry needs: its operands' C text, the result's dtype and the first operand's."""

    args: tuple[str, ...]
    dtype: str  # the result's
    source: str  # the first operand's dtype (the result's for an op without operands)

    @property
    def a(self) -> str:
        return self.args[0] if self.args else ""

    @property
    def ctype(self) -> str:
        return C_TYPES[self.dtype]

    @property
    def is_float(self) -> bool:
        return self.source in FLOATS

    @property
    def suffix(self) -> str:
        """libm's suffix for the operand's type: f16 and f32 compute in float."""
        return "f" if self.source in ("f16", "f32") else ""

    def cast(self, text: str) -> str:
        return f"(({self.ctype})({text}))"


def _arith(symbol: str) -> Callable[[Operands], str]:
    return lambda x: x.cast(f"{x.a} {symbol} {x.args[1]}")


def _compare(symbol: str) -> Callable[[Operands], str]:
    return lambda x: f"({x.a} {symbol} {x.args[1]})"


def _libm(name: str) -> Callable[[Operands], str]:
    """libm's function for the operand's type (f16 and f32: the float one)."""
    return lambda x: f"(({x.ctype}){name}{x.suffix}({', '.join(x.args)}))"


def _own_f32(function: str, name: str) -> Callable[[Operands], str]:
    """The prelude's branch-free `function` for f16 and f32 (it vectorizes), libm's `name` for f64."""
    plain = _libm(name)
    return lambda x: f"(({x.ctype}){function}({x.a}))" if x.suffix == "f" else plain(x)


def _exp_name(x: Operands) -> str:
    return "st_expf" if x.suffix == "f" else "exp"


def _cast(x: Operands) -> str:
    if x.is_float and x.dtype in INTS:  # out of range is undefined in C: defined in the prelude
        return f"st_cast_{x.dtype}_{x.source}({x.a})"
    if x.source in INTS and x.dtype in FLOATS:
        # with -fno-trapping-math gcc folds (double)(int)x to trunc(x), which keeps x's sign at
        # zero (trunc(-0.3) is -0.0); an integer has no sign at zero (numpy: +0.0). The zero test
        # survives the fold and vectorizes.
        return f"st_float_{x.dtype}_{x.source}({x.a})"
    return x.cast(x.a)


C_OPS: dict[str, Callable[[Operands], str]] = {
    "neg": lambda x: f"(({x.ctype})(-({x.a})))",
    "abs": lambda x: f"(({x.ctype})fabs{x.suffix}({x.a}))" if x.is_float else f"st_abs_{x.dtype}({x.a})",
    "exp": lambda x: f"(({x.ctype}){_exp_name(x)}({x.a}))",
    "log": _libm("log"),
    "sqrt": _libm("sqrt"),
    # an f16 rsqrt is its f16 sqrt's reciprocal: computed in float and rounded once it differed
    # where a quotient neared a midpoint
    "rsqrt": lambda x: f"(({x.ctype})(1 / ({x.ctype})sqrt{x.suffix}({x.a})))",
    "tanh": _own_f32("st_tanhf", "tanh"),
    "sigmoid": lambda x: f"(({x.ctype})(1 / ({x.ctype})(1 + ({x.ctype}){_exp_name(x)}(-({x.a})))))",
    "relu": lambda x: f"st_relu_{x.dtype}({x.a})",
    "erf": _own_f32("st_erff", "erf"),
    "add": _arith("+"),
    "sub": _arith("-"),
    "mul": _arith("*"),
    "div": _arith("/"),
    "pow": lambda x: f"st_pow_{x.dtype}({x.a}, {x.args[1]})",
    "maximum": lambda x: f"st_max_{x.dtype}({x.a}, {x.args[1]})",
    "minimum": lambda x: f"st_min_{x.dtype}({x.a}, {x.args[1]})",
    "bitand": _arith("&"),
    "bitor": _arith("|"),
    "bitxor": _arith("^"),
    "shl": lambda x: f"st_shl_{x.dtype}({x.a}, {x.args[1]})",
    "shr": lambda x: f"st_shr_{x.dtype}({x.a}, {x.args[1]})",
    "less": _compare("<"),
    "greater": _compare(">"),
    "equal": _compare("=="),
    "where": lambda x: f"st_where_{x.dtype}({x.a}, {x.args[1]}, {x.args[2]})",
    "cast": _cast,
}


def _vector_arith(symbol: str) -> Callable[[list[str]], str]:
    return lambda args: f"({args[0]} {symbol} {args[1]})"


# f32 on 16 lanes (AVX-512): what `vector_expr` can write; None where it has no form.
VECTOR_OPS: dict[str, Callable[[list[str]], str] | None] = {
    "neg": lambda args: f"(-{args[0]})",
    "abs": None,
    "exp": lambda args: f"st_expv_f32({args[0]})",
    "log": None,
    "sqrt": None,
    "rsqrt": None,
    "tanh": lambda args: f"st_tanhv_f32({args[0]})",
    # the scalar's bits: 1 / (1 + exp(-x)), each step rounded to f32 (vector_math.h)
    "sigmoid": lambda args: f"st_sigmoidv_f32({args[0]})",
    "relu": None,
    "erf": None,
    "add": _vector_arith("+"),
    "sub": _vector_arith("-"),
    "mul": _vector_arith("*"),
    "div": _vector_arith("/"),
    "pow": None,
    "maximum": None,
    "minimum": None,
    "bitand": None,
    "bitor": None,
    "bitxor": None,
    "shl": None,
    "shr": None,
    "less": None,
    "greater": None,
    "equal": None,
    "where": None,
    "cast": None,
}

# ops worth vectorizing a loop for, its loads and stores aside (`read_order`)
TRANSCENDENTAL = ("exp", "log", "erf", "tanh", "sigmoid", "pow", "sqrt", "rsqrt")
# ops whose vector form (st_expv_f32, st_tanhv_f32: vector_math.h) pays over gcc's vectors of the
# scalar functions (vscalefps on AVX-512; on AVX2, 1.4-1.5x over gcc's 8 lanes of st_expf)
EXPONENTIALS = ("exp", "sigmoid", "tanh")


def check_tables(tables: Mapping[str, Mapping[str, object]]) -> None:
    """Raise naming the op when a table lacks an elementwise op of engine/ir/ops.py or names another
    op, or when TRANSCENDENTAL or EXPONENTIALS names one that is not elementwise."""
    for table_name, table in tables.items():
        check_elementwise_table(table, f"targets/c/ops.py's {table_name}")
    for name in TRANSCENDENTAL + EXPONENTIALS:
        if not (name in OPS and OPS[name].elementwise):
            raise ValueError(f"targets/c/ops.py: {name} is not an elementwise op of engine/ir/ops.py")


check_tables({"C_OPS": C_OPS, "VECTOR_OPS": VECTOR_OPS})


def scalar_op(op: str, dtype: str, args: list[str], arg_dtypes: list[str]) -> str:
    """The C of elementwise op `op` with result dtype `dtype` on operands `args` (their dtypes)."""
    return C_OPS[op](Operands(tuple(args), dtype, arg_dtypes[0] if arg_dtypes else dtype))


def vector_op(op: str, args: list[str]) -> str | None:
    """An f32 op on 16 lanes (st_vf32 operands), or None where it has no such form."""
    form = VECTOR_OPS.get(op)
    return form(args) if form is not None else None


def computes(e, ops: tuple[str, ...]) -> bool:
    """Whether an expression applies any of these ops."""
    return isinstance(e, Op) and (e.op in ops or any(computes(a, ops) for a in e.args))


def exponentials(e) -> bool:
    """Whether an expression computes exp, sigmoid or tanh (EXPONENTIALS)."""
    return computes(e, EXPONENTIALS)


def literal(value, dtype: str) -> str:
    """A constant of `dtype`: a double literal, rounded to the dtype by the cast as numpy rounds it."""
    if dtype == "bool":
        return "1" if value else "0"
    if dtype in INTS:
        if dtype == "i64":
            return f"{int(value)}LL" if value != -2 ** 63 else "INT64_MIN"
        return f"(({C_TYPES[dtype]}){int(value)})" if dtype in ("i8", "u8") else str(int(value))
    v = float(value)
    if math.isinf(v):
        text = "INFINITY" if v > 0 else "-INFINITY"
    elif math.isnan(v):
        text = "NAN"
    else:
        text = repr(v)
    return f"(({C_TYPES[dtype]})({text}))"
