"""Parse `.ir` text into the dataclasses of `ir.py`.

The grammar lives in `grammar/ir.lark`. Lark builds a tree with positions, a
thin transformer turns it into dataclasses, and syntax errors become
StitchErrors with file:line:col, the line and a caret.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import NamedTuple

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from .errors import StitchError
from .ir import DTYPES, Assign, Attr, Call, Const, DTypeName, Func, Param, Pos, Program, TensorType, Var

GRAMMAR_DIR = Path(__file__).resolve().parent.parent / "grammar"


@cache
def ir_parser() -> Lark:
    return Lark.open(str(GRAMMAR_DIR / "ir.lark"), parser="lalr", propagate_positions=True, maybe_placeholders=False)


def parse_program(text: str, filename: str = "<string>") -> Program:
    """Parse a whole `.ir` file. Raises StitchError on malformed input."""
    try:
        tree = ir_parser().parse(text)
    except UnexpectedInput as err:
        raise syntax_error(err, text, filename, ir_parser()) from None
    funcs = _ToIR(filename, text).transform(tree)
    program = Program(tuple(funcs), source=text, filename=filename)
    _check_unique_funcs(program)
    return program


def parse_file(path: str | Path) -> Program:
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise StitchError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}") from None
    return parse_program(text, str(path))


def _check_unique_funcs(program: Program) -> None:
    seen: dict[str, Func] = {}
    for f in program.funcs:
        if f.name in seen:
            raise StitchError(
                f"func '{f.name}' is defined twice (first at line {seen[f.name].pos.line})", f.pos, program.source
            )
        seen[f.name] = f


class _Results(NamedTuple):
    types: tuple[TensorType, ...]
    pos: Pos


class _Return(NamedTuple):
    exprs: tuple
    pos: Pos


class _ToIR(Transformer):
    """One method per grammar alias, straight onto dataclasses."""

    def __init__(self, filename: str, source: str):
        super().__init__()
        self.filename = filename
        self.source = source

    def _pos(self, item) -> Pos:
        line = getattr(item, "line", None)
        col = getattr(item, "column", None)
        return Pos(self.filename, line or 0, col or 0)

    def start(self, funcs):
        return list(funcs)

    @v_args(meta=True)
    def func(self, meta, items):
        name = items[0]
        params = tuple(i for i in items[1:] if isinstance(i, Param))
        results = next(i for i in items if isinstance(i, _Results))
        body = tuple(i for i in items if isinstance(i, Assign))
        ret = items[-1]
        return Func(
            str(name),
            params,
            results.types,
            body,
            ret.exprs,
            pos=self._pos(name),
            return_pos=ret.pos,
            results_pos=results.pos,
        )

    def param(self, items):
        name, typ = items
        return Param(str(name), typ, self._pos(name))

    @v_args(meta=True)
    def one_result(self, meta, items):
        return _Results(tuple(items), Pos(self.filename, meta.line, meta.column))

    @v_args(meta=True)
    def many_results(self, meta, items):
        return _Results(tuple(items), Pos(self.filename, meta.line, meta.column))

    def type(self, items):
        name, *dims = items
        if str(name) not in DTYPES:
            raise StitchError(
                f"unknown dtype '{name}'; expected one of {', '.join(DTYPES)}", self._pos(name), self.source
            )
        for tok in dims:
            if int(tok) <= 0:
                raise StitchError(f"dimension {tok} must be a positive integer", self._pos(tok), self.source)
        return TensorType(str(name), tuple(int(t) for t in dims))

    def dim(self, items):
        return items[0]

    def assign(self, items):
        name, expr = items
        return Assign(str(name), expr, self._pos(name))

    def ret(self, items):
        return _Return(tuple(items[1:]), self._pos(items[0]))

    def var(self, items):
        (tok,) = items
        return Var(str(tok), self._pos(tok))

    def number(self, items):
        (tok,) = items
        return Const(_number(tok), self._pos(tok))

    def true(self, items):
        return Const(True, self._pos(items[0]))

    def false(self, items):
        return Const(False, self._pos(items[0]))

    def call(self, items):
        name, *args = items
        pos = self._pos(name)
        positional = []
        attrs = []
        for a in args:
            if isinstance(a, Attr):
                if any(b.name == a.name for b in attrs):
                    raise StitchError(f"attribute '{a.name}' is given twice", a.pos, self.source)
                attrs.append(a)
            elif attrs:
                raise StitchError("positional argument after a keyword attribute", _expr_pos(a), self.source)
            else:
                positional.append(a)
        return Call(str(name), tuple(positional), tuple(attrs), pos)

    def kwarg(self, items):
        name, value = items
        return Attr(str(name), value, self._pos(name))

    def attr_number(self, items):
        return _number(items[0])

    def attr_true(self, items):
        return True

    def attr_false(self, items):
        return False

    def attr_name(self, items):
        return DTypeName(str(items[0]))

    def attr_list(self, items):
        return tuple(int(t) for t in items)


def _expr_pos(e) -> Pos:
    return e.pos


def _number(tok: Token) -> int | float:
    text = str(tok)
    if any(c in text for c in ".eE") or text.lstrip("+-").lower() in ("inf", "nan"):
        return float(text)
    return int(text)


# ---------------------------------------------------------------------------
# Syntax errors


_TERMINAL_NAMES = {
    "NAME": "a name",
    "SIGNED_NUMBER": "a number",
    "SIGNED_INT": "an integer",
    "RETURN": "'return'",
    "TRUE": "'true'",
    "FALSE": "'false'",
    "$END": "end of file",
}


def describe_terminal(name: str, parser: Lark) -> str:
    if name in _TERMINAL_NAMES:
        return _TERMINAL_NAMES[name]
    try:
        pattern = parser.get_terminal(name).pattern
    except KeyError:
        return name
    if pattern.type == "str":
        return f"'{pattern.value}'"
    return name.lower()


def syntax_error(err: UnexpectedInput, text: str, filename: str, parser: Lark) -> StitchError:
    line = getattr(err, "line", 0) or 0
    col = getattr(err, "column", 0) or 0
    if isinstance(err, UnexpectedEOF) or (isinstance(err, UnexpectedToken) and err.token.type == "$END"):
        lines = text.splitlines() or [""]
        line, col = len(lines), len(lines[-1]) + 1
        found = "end of file"
    elif isinstance(err, UnexpectedToken):
        found = f"'{err.token}'"
    elif isinstance(err, UnexpectedCharacters):
        found = f"character {text[err.pos_in_stream]!r}"
    else:  # pragma: no cover - lark raises only the kinds above
        found = "input"
    expected = sorted({describe_terminal(t, parser) for t in (getattr(err, "expected", None) or getattr(err, "allowed", None) or ())})
    message = f"syntax error: unexpected {found}"
    if expected:
        if len(expected) > 8:
            expected = expected[:8] + ["..."]
        message += f"; expected {_one_of(expected)}"
    return StitchError(message, Pos(filename, line, col), text)


def _one_of(items: list[str]) -> str:
    if len(items) == 1:
        return items[0]
    return "one of " + ", ".join(items)
