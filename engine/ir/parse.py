"""Parse `.ir` text into the dataclasses of `program.py`.

The grammar lives in `grammar/ir.lark`. Lark builds a tree with positions, a
thin transformer turns it into dataclasses, and syntax errors become
StitchErrors with file:line:col, the line and a caret.
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from pathlib import Path
from typing import NamedTuple

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError
from lark.parsers.lalr_interactive_parser import InteractiveParser

from . import dims
from .comments import FuncLines, attach_comments, find_comments
from .errors import StitchError
from .program import (
    DTYPES,
    Assign,
    Attr,
    Call,
    Const,
    DTypeName,
    Func,
    Param,
    Pos,
    Program,
    SymbolDecl,
    TensorType,
    Var,
)

GRAMMAR_DIR = Path(__file__).resolve().parents[2] / "grammar"

# Limits that keep every later stage (all of them recursive over expressions,
# all of them sizing arrays from shapes) away from RecursionError and overflow.
MAX_NESTING = 100  # calls nested inside one another in one expression
MAX_DIM = 2**31 - 1  # one dimension of a tensor type
MAX_INT_DIGITS = 300  # an integer literal; more would not even fit in an f64
MAX_FILE_BYTES = 16 * 2**20
RESERVED = ("func", "return", "true", "false", "inf", "nan")


@cache
def ir_parser() -> Lark:
    # cache=True: lark keeps the built tables in the temporary directory, keyed by the grammar's hash and
    # lark's version (50 ms to build, 3 ms to load: a `stitch check` pays it on every run)
    return Lark.open(str(GRAMMAR_DIR / "ir.lark"), parser="lalr", propagate_positions=True, maybe_placeholders=False,
                     cache=True)


def parse_program(text: str, filename: str = "<string>") -> Program:
    """Parse a whole `.ir` file. Raises StitchError on malformed input."""
    parser = ir_parser()
    try:
        tree = parser.parse(text)
    except UnexpectedInput as err:
        raise syntax_error(err, text, filename, parser, ir_mistakes()) from None
    _check_nesting(tree, text, filename)
    to_ir = _ToIR(filename, text)
    try:
        funcs = to_ir.transform(tree)
    except VisitError as err:  # lark wraps what the transformer raises
        if isinstance(err.orig_exc, StitchError):
            raise err.orig_exc from None
        raise
    funcs, end_comments = attach_comments(funcs, to_ir.func_lines, find_comments(text))
    program = Program(tuple(funcs), source=text, filename=filename, end_comments=end_comments)
    _check_unique_funcs(program)
    return program


def parse_file(path: str | Path) -> Program:
    return parse_program(read_source(path), str(path))


def read_source(path: str | Path) -> str:
    """The UTF-8 text of a source file (a leading byte-order mark dropped)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise StitchError(f"cannot read the file: {err.strerror or err}", Pos(str(path), 0, 0)) from None
    except ValueError as err:  # e.g. a NUL byte in the path
        raise StitchError(f"cannot read the file: {err}", Pos(repr(str(path)), 0, 0)) from None
    if len(data) > MAX_FILE_BYTES:
        raise StitchError(f"the file is larger than {MAX_FILE_BYTES // 2**20} MiB", Pos(str(path), 0, 0))
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        line_start = data.rfind(b"\n", 0, err.start) + 1
        col = len(data[line_start : err.start].decode("utf-8", "replace")) + 1
        text = data.decode("utf-8", "replace")
        message = f"byte 0x{data[err.start]:02x} is not valid UTF-8; source files must be UTF-8 text"
        raise StitchError(message, Pos(str(path), line, col), text) from None


def _check_nesting(tree: Tree, text: str, filename: str) -> None:
    """Reject calls nested deeper than MAX_NESTING (walked without recursion)."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if node.data == "call":
            depth += 1
            if depth > MAX_NESTING:
                pos = Pos(filename, node.meta.line, node.meta.column)
                hint = "name some of the inner values with `name = ...` statements"
                raise StitchError(f"calls are nested more than {MAX_NESTING} deep", pos, text, hint)
        stack.extend((child, depth) for child in node.children if isinstance(child, Tree))


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
    end: tuple[int, int]  # offset and line just past the results (the `{` follows)


class _Return(NamedTuple):
    exprs: tuple
    pos: Pos
    lines: tuple[int, int]  # its first and last


class LiteralTransformer(Transformer):
    """Positions, checked numbers and attribute values: shared by the program and rule transformers."""

    def __init__(self, filename: str, source: str):
        super().__init__()
        self.filename = filename
        self.source = source

    def _pos(self, item) -> Pos:
        line = getattr(item, "line", None)
        col = getattr(item, "column", None)
        return Pos(self.filename, line or 0, col or 0)

    def _error(self, message: str, tok: Token, hint: str = "") -> StitchError:
        return StitchError(message, self._pos(tok), self.source, hint)

    def _int(self, tok: Token) -> int:
        if len(tok.lstrip("+-")) > MAX_INT_DIGITS:
            raise self._error(f"integer literal {tok[:12]}... is too large ({len(tok.lstrip('+-'))} digits)", tok)
        return int(tok)

    def _number(self, tok: Token) -> int | float:
        text = str(tok)
        if not any(c in text for c in ".eE"):
            return self._int(tok)
        value = float(text)
        if value in (float("inf"), float("-inf")):
            shown = text if len(text) <= 20 else text[:12] + "..."
            raise self._error(f"number {shown} is too large for any float type", tok,
                              f"write {'-inf' if value < 0 else 'inf'} for an infinity")
        return value

    def attr_number(self, items):
        return self._number(items[0])

    def attr_true(self, items):
        return True

    def attr_false(self, items):
        return False

    def attr_name(self, items):
        return DTypeName(str(items[0]))

    def attr_list(self, items):
        return tuple(self._int(t) for t in items)


class _ToIR(LiteralTransformer):
    """One method per grammar alias, straight onto dataclasses; the lines of each func's parts are
    kept in `func_lines` for its comments (`comments.attach_comments`)."""

    def __init__(self, filename: str, source: str):
        super().__init__(filename, source)
        self.func_lines: list[FuncLines] = []
        self._assign_lines: dict[int, tuple[int, int]] = {}  # id(Assign) -> its first and last line

    def _name(self, tok: Token, what: str) -> str:
        if str(tok) in RESERVED:
            raise self._error(f"'{tok}' is a reserved word and cannot name a {what}", tok)
        return str(tok)

    def start(self, funcs):
        return list(funcs)

    @v_args(meta=True)
    def func(self, meta, items):
        name = items[0]
        symbols = next((i for i in items[1:] if isinstance(i, tuple) and i and isinstance(i[0], SymbolDecl)), ())
        params = tuple(i for i in items[1:] if isinstance(i, Param))
        results = next(i for i in items if isinstance(i, _Results))
        body = tuple(i for i in items if isinstance(i, Assign))
        ret = items[-1]
        self.func_lines.append(FuncLines(meta.line, _line_after(self.source, *results.end),
                                         (*(self._assign_lines[id(a)] for a in body), ret.lines), meta.end_line))
        return Func(
            self._name(name, "func"),
            params,
            results.types,
            body,
            ret.exprs,
            pos=self._pos(name),
            return_pos=ret.pos,
            results_pos=results.pos,
            symbols=symbols,
        )

    def symbols(self, items):
        seen = set()
        for s in items:
            if s.name in seen:
                raise StitchError(f"symbol '{s.name}' is declared twice", s.pos, self.source)
            seen.add(s.name)
        return tuple(items)

    def symbol(self, items):
        name, low, high = items
        lo, hi = self._int(low), self._int(high)
        if not 1 <= lo <= hi <= MAX_DIM:
            raise self._error(f"the range of symbol '{name}' must be {{low}}..{{high}} with 1 <= low <= high <= "
                              f"{MAX_DIM}, got {lo}..{hi}", low)
        return SymbolDecl(self._name(name, "symbol"), lo, hi, self._pos(name))

    def param(self, items):
        name, typ = items
        return Param(self._name(name, "parameter"), typ, self._pos(name))

    @v_args(meta=True)
    def one_result(self, meta, items):
        return _Results(tuple(items), Pos(self.filename, meta.line, meta.column), (meta.end_pos, meta.end_line))

    @v_args(meta=True)
    def many_results(self, meta, items):
        return _Results(tuple(items), Pos(self.filename, meta.line, meta.column), (meta.end_pos, meta.end_line))

    def type(self, items):
        name, *dims = items
        if str(name) not in DTYPES:
            close = difflib.get_close_matches(str(name), DTYPES, n=1)
            hint = f"did you mean '{close[0]}'?" if close else ""
            raise self._error(f"unknown dtype '{name}'; expected one of {', '.join(DTYPES)}", name, hint)
        for d in dims:
            if isinstance(d, int) and d <= 0:
                raise self._error(f"dimension {d} must be a positive integer", getattr(d, "token", name))
            if isinstance(d, int) and d > MAX_DIM:
                raise self._error(f"dimension {d} is too large (at most {MAX_DIM})", getattr(d, "token", name))
        return TensorType(str(name), tuple(_plain(d) for d in dims))

    # dimensions: ints, or symbolic expressions in dims.py's canonical form

    def dim_int(self, items):
        return _IntAt(self._int(items[0]), items[0])

    def dim_symbol(self, items):
        return dims.symbol(self._name(items[0], "symbol"))

    def dim_neg(self, items):
        return dims.mul(items[0], -1)

    def dim_add(self, items):
        return dims.add(items[0], items[1])

    def dim_sub(self, items):
        return dims.add(items[0], dims.mul(items[1], -1))

    def dim_mul(self, items):
        return dims.mul(items[0], items[1])

    @v_args(meta=True)
    def dim_floordiv(self, meta, items):
        return dims.floordiv(items[0], self._divisor(items[1], "//", meta))

    @v_args(meta=True)
    def dim_mod(self, meta, items):
        return dims.mod(items[0], self._divisor(items[1], "%", meta))

    def _divisor(self, d, op: str, meta) -> int:
        if not isinstance(d, int) or d <= 0:
            raise StitchError(f"a dimension is divided ({op}) only by a positive integer, not {d}",
                              Pos(self.filename, meta.line, meta.column), self.source)
        return int(d)

    def attr_list(self, items):
        return tuple(_plain(d) for d in items)

    @v_args(meta=True)
    def assign(self, meta, items):
        name, expr = items
        assign = Assign(self._name(name, "value"), expr, self._pos(name))
        self._assign_lines[id(assign)] = (meta.line, meta.end_line)
        return assign

    @v_args(meta=True)
    def ret(self, meta, items):
        return _Return(tuple(items[1:]), self._pos(items[0]), (meta.line, meta.end_line))

    def var(self, items):
        (tok,) = items
        return Var(str(tok), self._pos(tok))

    def number(self, items):
        (tok,) = items
        return Const(self._number(tok), self._pos(tok))

    def inf(self, items):
        return Const(float("inf"), self._pos(items[0]))

    @v_args(meta=True)
    def neg_inf(self, meta, items):
        return Const(float("-inf"), Pos(self.filename, meta.line, meta.column))

    def nan(self, items):
        return Const(float("nan"), self._pos(items[0]))

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



class _IntAt(int):
    """An integer dimension and the token it was written as (for an error's position)."""

    def __new__(cls, value: int, token: Token):
        out = super().__new__(cls, value)
        out.token = token
        return out


def _plain(d):
    return int(d) if isinstance(d, int) else d


def _expr_pos(e) -> Pos:
    return e.pos


_GAP = re.compile(r"(?:\s|#[^\n]*)*")  # whitespace and comments


def _line_after(text: str, at: int, line: int) -> int:
    """The line of the first token at or after offset `at` (on line `line`), past whitespace and comments."""
    return line + text.count("\n", at, _GAP.match(text, at).end())


# ---------------------------------------------------------------------------
# Syntax errors


class Mistake(NamedTuple):
    """A common mistake: what to say, and a few bad inputs that show it."""

    message: str
    hint: str
    examples: tuple[str, ...]


# Common mistakes in `.ir` text. An error is recognised by what the parser would
# have accepted where it stopped, what it found instead and whether that came
# first on its line: unlike lark's `match_examples`, whose LR state also counts
# the stack depth, this key does not depend on how deeply the mistake is nested
# or how many parameters the func has.
_HEAD = "func f(x: f32[2]) -> f32[2] {\n"
IR_MISTAKES = [
    Mistake(
        "missing ')'",
        "",  # syntax_error names the '(' left open
        (
            _HEAD + "  return g(x\n}\n",
            _HEAD + "  return g(x, 1\n}\n",
            _HEAD + "  return g(x, axes=[0]\n}\n",
            _HEAD + "  a = g(x\n  return a\n}\n",
            _HEAD + "  a = g(x, 1\n  return a\n}\n",
            _HEAD + "  a = g(x\n  b = a\n  return b\n}\n",
            _HEAD + "  a = g(h(x)\n  b = a\n  return b\n}\n",
            _HEAD + "  return g(x",
            _HEAD + "  return g(g(x)",
            "func f(x: f32[2] -> f32[2] {\n  return x\n}\n",
            "func f(x: f32[2] {\n  return x\n}\n",
        ),
    ),
    Mistake(
        "the func body ends without a 'return'",
        "end the body with `return VALUE, ...`",
        (
            _HEAD + "}\n",
            _HEAD + "  a = x\n}\n",
            _HEAD + "  a = g(x)\n}\n",
            _HEAD + "  a = 1\n}\n",
            _HEAD + "  a = x\n",
            _HEAD + "  a = g(x)\n",
        ),
    ),
    Mistake(
        "missing '}' at the end of the func",
        "",
        (
            _HEAD + "  return x\n",
            _HEAD + "  return g(x)\n",
            _HEAD + "  return 1\n",
            _HEAD + "  return x\nfunc g() -> f32[] {\n  return 1.0\n}\n",
            _HEAD + "  return g(x)\nfunc g() -> f32[] {\n  return 1.0\n}\n",
            _HEAD + "  return 1\nfunc g() -> f32[] {\n  return 1.0\n}\n",
        ),
    ),
    Mistake(
        "'return' must be the last statement of a func",
        "move this statement before the 'return'",
        (
            _HEAD + "  return x\n  a = x\n}\n",
            _HEAD + "  return g(x)\n  a = x\n}\n",
            _HEAD + "  return 1\n  a = x\n}\n",
            _HEAD + "  return x\n  return x\n}\n",
            _HEAD + "  return g(x)\n  return x\n}\n",
            _HEAD + "  return 1\n  return x\n}\n",
        ),
    ),
    Mistake(
        "missing '->' before the result type",
        "write `func NAME(PARAMS) -> TYPE {`",
        (
            "func f(x: f32[2]) f32[2] {\n  return x\n}\n",
            "func f(x: f32[2]) - f32[2] {\n  return x\n}\n",
            "func f(x: f32[2]) => f32[2] {\n  return x\n}\n",
            "func f(x: f32[2]) : f32[2] {\n  return x\n}\n",
            "func f(x: f32[2]) {\n  return x\n}\n",
        ),
    ),
]


@cache
def ir_mistakes() -> dict[tuple, Mistake]:
    return mistake_table(ir_parser(), IR_MISTAKES)


def mistake_table(parser: Lark, mistakes: list[Mistake]) -> dict[tuple, Mistake]:
    """Key each mistake by how its examples stop `parser`; the first mistake wins a key."""
    table: dict[tuple, Mistake] = {}
    for mistake in mistakes:
        for example in mistake.examples:
            try:
                parser.parse(example)
            except UnexpectedInput as err:
                table.setdefault(_stop(err, example).key, mistake)
            else:
                raise AssertionError(f"an example of {mistake.message!r} parses: {example!r}")
    return table


_TERMINAL_NAMES = {
    "NAME": "a name",
    "SIGNED_NUMBER": "a number",
    "SIGNED_INT": "an integer",
    "RETURN": "'return'",
    "TRUE": "'true'",
    "FALSE": "'false'",
    "INF": "'inf'",
    "NAN": "'nan'",
    "$END": "end of file",
}

_EXPRESSION = {"NAME", "SIGNED_NUMBER", "TRUE", "FALSE", "INF", "NAN", "MINUS"}  # MINUS: -inf


class _Stop(NamedTuple):
    """Where and why the parser stopped, in terms that do not depend on depth."""

    line: int
    col: int
    offset: int
    found: str  # how to show what was found
    key: tuple  # (acceptable terminals, kind of what was found, first on its line)
    expected: frozenset[str]


def syntax_error(
    err: UnexpectedInput, text: str, filename: str, parser: Lark, mistakes: dict[tuple, Mistake] | None = None
) -> StitchError:
    """A StitchError for lark's `err`: a known mistake (see `mistake_table`) or what was expected."""
    stop = _stop(err, text)
    mistake = (mistakes or {}).get(stop.key)
    hint = ""
    if mistake is not None:
        message, hint = f"syntax error: {mistake.message} (found {stop.found})", mistake.hint
    elif stop.found == "')'" and not _unclosed_paren(text, stop.offset):
        message = "syntax error: unmatched ')'"
    else:
        message = f"syntax error: unexpected {stop.found}"
        if stop.expected:
            message += f"; expected {_describe_expected(stop.expected, parser)}"
    if mistake is not None and mistake.message.startswith("missing ')'"):
        opened = _unclosed_paren(text, stop.offset)
        if opened:
            hint = f"the '(' at line {opened[0]}, column {opened[1]} is not closed"
    return StitchError(message, Pos(filename, stop.line, stop.col), text, hint)


def _stop(err: UnexpectedInput, text: str) -> _Stop:
    acceptable = _acceptable(err)
    if isinstance(err, UnexpectedToken):
        tok = err.token
        if tok.type == "$END":
            # Just after the last token, however much blank space or comment follows it.
            line, col, offset = tok.end_line or 1, tok.end_column or 1, tok.end_pos or 0
            found, kind = "end of file", "$END"
        else:
            line, col, offset = tok.line, tok.column, tok.start_pos
            found, kind = _describe_token(tok), "FUNC" if tok == "func" else tok.type
    elif isinstance(err, UnexpectedCharacters):
        line, col, offset = err.line, err.column, err.pos_in_stream
        found, kind = f"character {text[offset]!r}", "<char>"
    else:  # pragma: no cover - LALR raises only the kinds above
        line, col, offset = getattr(err, "line", 1), getattr(err, "column", 1), len(text)
        found, kind = "end of file", "$END"
    first_on_line = not text[offset - col + 1 : offset].strip() if col > 1 else True
    return _Stop(line, col, offset, found, (acceptable, kind, first_on_line), acceptable)


def _acceptable(err: UnexpectedInput) -> frozenset[str]:
    """The terminals that would have let the parse go on, as precisely as lark can tell."""
    accepts = getattr(err, "accepts", None)
    if not accepts and getattr(err, "state", None) is not None:
        try:
            accepts = InteractiveParser(None, err.state, err.state.lexer).accepts()
        except Exception:  # only a nicer message is lost
            accepts = None
    return frozenset(accepts or getattr(err, "expected", None) or getattr(err, "allowed", None) or ())


def _unclosed_paren(text: str, end: int) -> tuple[int, int] | None:
    """(line, column) of the innermost '(' still open at `end`, skipping comments."""
    opened: list[tuple[int, int]] = []
    line, line_start, k = 1, 0, 0
    while k < end:
        c = text[k]
        if c == "#":
            k = text.find("\n", k)
            if k < 0:
                break
            continue
        if c == "\n":
            line, line_start = line + 1, k + 1
        elif c == "(":
            opened.append((line, k - line_start + 1))
        elif c == ")" and opened:
            opened.pop()
        k += 1
    return opened[-1] if opened else None


def _describe_token(tok: Token) -> str:
    if tok.type == "NAME":
        return f"name '{tok}'"
    if tok.type in ("SIGNED_NUMBER", "SIGNED_INT"):
        return f"number {tok}"
    return f"'{tok}'"


_DIMENSION_OPERATORS = {"'+'", "'-'", "'*'", "'//'", "'%'"}


def _describe_expected(terminals: frozenset[str], parser: Lark) -> str:
    names = set(terminals)
    described = []
    if {"NAME", "SIGNED_NUMBER"} <= names:
        described.append("an expression")
        names -= _EXPRESSION
    shown = {describe_terminal(t, parser) for t in names}
    if shown & {"','", "']'"}:  # inside a list of dimensions: the operators that could go on are not news
        shown -= _DIMENSION_OPERATORS
    described += sorted(shown)
    if len(described) > 8:
        described = described[:8] + ["..."]
    if len(described) <= 2:
        return " or ".join(described)
    return ", ".join(described[:-1]) + " or " + described[-1]


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
