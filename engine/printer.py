"""Print programs as canonical `.ir` text (what `stitch fmt` shows).

`parse_program(print_program(p)) == p` holds for every program.
"""

from __future__ import annotations

from .ir import Attr, Call, Const, DTypeName, Expr, Func, Program, TensorType, Var


def print_program(program: Program) -> str:
    return "\n".join(print_func(f) for f in program.funcs)


def print_func(f: Func) -> str:
    params = ", ".join(f"{p.name}: {print_type(p.type)}" for p in f.params)
    if len(f.results) == 1:
        results = print_type(f.results[0])
    else:
        results = "(" + ", ".join(print_type(t) for t in f.results) + ")"
    lines = [f"func {f.name}({params}) -> {results} {{"]
    for a in f.body:
        lines.append(f"  {a.name} = {print_expr(a.expr)}")
    lines.append("  return " + ", ".join(print_expr(e) for e in f.returns))
    lines.append("}")
    return "\n".join(lines) + "\n"


def print_type(t: TensorType) -> str:
    return f"{t.dtype}[{', '.join(str(d) for d in t.shape)}]"


def print_expr(e: Expr) -> str:
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        return print_scalar(e.value)
    if isinstance(e, Call):
        parts = [print_expr(a) for a in e.args] + [print_attr(a) for a in e.attrs]
        return f"{e.op}({', '.join(parts)})"
    raise TypeError(f"not an expression: {e!r}")


def print_attr(a: Attr) -> str:
    return f"{a.name}={print_attr_value(a.value)}"


def print_attr_value(v) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(str(i) for i in v) + "]"
    if isinstance(v, DTypeName):
        return v.name
    return print_scalar(v)


def print_scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        text = repr(v)
        if text in ("inf", "-inf", "nan"):
            raise ValueError(f"{text} has no literal form in .ir text")
        return text
    return str(v)
