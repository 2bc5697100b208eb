"""Print programs as canonical `.ir` text (what `stitch fmt` shows), with their comments.

`parse_program(print_program(p)) == p` holds for every program, and printing
what it parses back gives the same text, comments included (`comments.py`
says where each comment goes).
"""

from __future__ import annotations

from .program import Attr, Call, Comments, Const, DTypeName, Expr, Func, Program, TensorType, Var


def print_program(program: Program) -> str:
    text = "\n".join(print_func(f) for f in program.funcs)
    if program.end_comments:
        text += "\n" + "".join(f"{c}\n" for c in program.end_comments)
    return text


def print_func(f: Func) -> str:
    params = ", ".join(f"{p.name}: {print_type(p.type)}" for p in f.params)
    if len(f.results) == 1:
        results = print_type(f.results[0])
    else:
        results = "(" + ", ".join(print_type(t) for t in f.results) + ")"
    symbols = "[" + ", ".join(f"{s.name}: {s.low}..{s.high}" for s in f.symbols) + "]" if f.symbols else ""
    lines = _commented(f"func {f.name}{symbols}({params}) -> {results} {{", f.comments, "")
    for a in f.body:
        lines += _commented(f"  {a.name} = {print_expr(a.expr)}", a.comments, "  ")
    lines += _commented("  return " + ", ".join(print_expr(e) for e in f.returns), f.return_comments, "  ")
    lines += _commented("}", f.end_comments, "  ")
    return "\n".join(lines) + "\n"


def _commented(line: str, comments: Comments, indent: str) -> list[str]:
    """A statement's line after its comment lines, with its end-of-line comment."""
    return [indent + c for c in comments.before] + [f"{line}  {comments.after}" if comments.after else line]


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
        return repr(v)  # 1e-05, -0.0, inf, -inf and nan are all literals of .ir text
    return str(v)
