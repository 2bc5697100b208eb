"""Every user error: exit 1, a message, file:line:col, the line and a caret.

The table runs each malformed program through `stitch check` in process; a few
tests at the end run the real command to prove the exit codes end to end.
Rows marked "regression" were crashes (exit 3) found by tests/test_fuzz.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from stitch.engine.cli import main
from stitch.engine.ir.errors import StitchError, caret_context
from stitch.engine.ir.parse import IR_MISTAKES, MAX_NESTING, parse_program
from stitch.engine.ir.program import Pos

# Line 1 of most programs below; their bodies start on line 2.
HEAD = "func f(x: f32[2, 3], y: f32[3, 4], i: i32[2, 3], c: bool[2, 3]) -> f32[2, 3] {\n"


def body(*lines: str) -> str:
    """A func with HEAD's signature and these statements, one a line from line 2."""
    return HEAD + "".join(f"  {line}\n" for line in lines) + "}\n"


class Case(NamedTuple):
    id: str
    where: str  # "line:col" of the error
    text: str  # the program
    message: str  # a fragment of the error message

    @property
    def line(self) -> int:
        return int(self.where.split(":")[0])

    @property
    def col(self) -> int:
        return int(self.where.split(":")[1])


CASES = [
    # -- names, ops, attributes, arity ----------------------------------------------------
    Case("unknown-op", "2:10", body("return foo(x)"), "unknown op 'foo'"),
    Case("unknown-op-hint", "2:10", body("return exq(x)"), "did you mean 'exp'?"),
    Case("unknown-attr", "2:17", body("return sum(x, axis=[0])"),
         "sum has no attribute 'axis' (its attributes: axes, keepdims)"),
    Case("attr-on-unary", "3:17", body("a = neg(x)", "return neg(a, axes=[0])"), "neg has no attribute 'axes'"),
    Case("arity-few", "2:10", body("return add(x)"), "add takes 2 arguments, got 1"),
    Case("arity-many", "2:10", body("return neg(x, x)"), "neg takes 1 argument, got 2"),
    Case("arity-none", "2:10", body("return where()"), "where takes 3 arguments, got 0"),
    Case("missing-attr", "2:10", body("return reshape(x)"), "reshape needs the attribute 'shape='"),
    Case("undefined-name", "2:17", body("return add(x, z)"), "undefined name 'z'"),
    Case("undefined-name-hint", "2:17", body("return add(x, xx)"), "did you mean 'x'?"),
    Case("reused-name", "3:3", body("a = neg(x)", "a = neg(x)", "return a"),
         "name 'a' is already defined (at line 2, column 3)"),
    Case("param-reassigned", "2:3", body("x = neg(x)", "return x"),
         "name 'x' is already defined (at line 1, column 8)"),
    Case("duplicate-param", "1:19", "func f(x: f32[2], x: f32[2]) -> f32[2] {\n  return x\n}\n",
         "name 'x' is already defined"),
    Case("duplicate-func", "4:6", "func f() -> f32[] {\n  return 1.0\n}\nfunc f() -> f32[] {\n  return 2.0\n}\n",
         "func 'f' is defined twice (first at line 1)"),
    Case("duplicate-attr", "2:27", body("return sum(x, axes=[0], axes=[1])"),
         "attribute 'axes' is given twice"),  # regression
    Case("positional-after-keyword", "2:27", body("return sum(x, axes=[0], x)"),
         "positional argument after a keyword attribute"),  # regression
    Case("reserved-name", "2:3", body("true = neg(x)", "return true"), "'true' is a reserved word"),
    # -- types and shapes -------------------------------------------------------------------
    Case("shape-mismatch", "2:10", body("return add(x, y)"), "add: shapes do not broadcast: f32[2, 3], f32[3, 4]"),
    Case("matmul-inner", "2:10", body("return matmul(x, x)"),
         "matmul f32[2, 3] @ f32[2, 3]: inner dimensions differ (3 vs 2)"),
    Case("matmul-scalar", "2:10", "func f(s: f32[]) -> f32[] {\n  return matmul(s, s)\n}\n",
         "operands must have rank >= 1"),
    Case("bad-axis", "2:17", body("return sum(x, axes=[2])"),
         "sum: axis 2 is out of range for a tensor of rank 2 (the operand is f32[2, 3])"),
    Case("axis-twice", "2:17", body("return sum(x, axes=[0, -2])"), "axis 0 is given twice"),
    Case("axes-not-list", "2:17", body("return sum(x, axes=0)"), "attribute 'axes' must be a list of integers"),
    Case("keepdims-not-bool", "2:17", body("return sum(x, keepdims=1)"), "attribute 'keepdims' must be true or false"),
    Case("bad-perm", "2:23", body("return transpose(x, perm=[0, 0])"),
         "perm [0, 0] is not a permutation of the 2 axes of f32[2, 3]"),
    Case("short-perm", "2:23", body("return transpose(x, perm=[1])"), "perm [1] is not a permutation"),
    Case("reshape-size", "2:21", body("return reshape(x, shape=[4, 2])"),
         "cannot reshape f32[2, 3] (6 elements) to [4, 2] (8 elements)"),
    Case("reshape-infer", "2:21", body("return reshape(x, shape=[4, -1])"),
         "cannot reshape f32[2, 3] (6 elements) to [4, -1]"),
    Case("reshape-two-unknowns", "2:21", body("return reshape(x, shape=[-1, -1])"), "at most one dimension may be -1"),
    Case("broadcast-to", "2:26", body("return broadcast_to(x, shape=[4, 3])"), "cannot broadcast f32[2, 3] to [4, 3]"),
    Case("return-shape", "2:10", body("return y"),
         "return value 0 has type f32[3, 4] but the signature of 'f' declares f32[2, 3]"),
    Case("return-dtype", "2:10", body("return i"),
         "return value 0 has type i32[2, 3] but the signature of 'f' declares f32[2, 3]"),
    Case("too-many-returns", "2:3", body("return x, x"), "func 'f' returns 2 value(s) but its signature declares 1"),
    Case("too-few-returns", "2:3", "func f(x: f32[2]) -> (f32[2], f32[2]) {\n  return x\n}\n",
         "returns 1 value(s) but its signature declares 2"),
    Case("dtype-mismatch", "2:10", body("return add(x, i)"), "add: operand dtypes differ (f32[2, 3] and i32[2, 3])"),
    Case("float-only-op", "2:10", "func f(i: i32[2]) -> i32[2] {\n  return exp(i)\n}\n",
         "exp needs a float tensor, got i32[2]"),
    Case("numeric-only-op", "2:10", "func f(c: bool[2]) -> bool[2] {\n  return neg(c)\n}\n",
         "neg needs a numeric tensor, got bool[2]"),
    Case("where-cond-not-bool", "2:16", body("return where(x, x, x)"), "where's condition must be bool, got f32[2, 3]"),
    Case("where-cond-literal", "2:16", body("return where(1, x, x)"), "literal 1 used where a bool is expected"),
    Case("bool-literal-as-number", "2:17", body("return add(x, true)"),
         "literal true is a bool, but the operands are f32"),
    Case("float-literal-into-int", "2:17", "func f(i: i32[2]) -> i32[2] {\n  return add(i, 1.5)\n}\n",
         "literal 1.5 is not an integer, but the operands are i32"),
    Case("int-literal-overflow", "2:17", "func f(i: i32[2]) -> i32[2] {\n  return add(i, 3000000000)\n}\n",
         "literal 3000000000 does not fit in i32"),
    Case("unknown-dtype", "1:11", "func f(x: f33[2]) -> f32[2] {\n  return x\n}\n",
         "unknown dtype 'f33'"),  # regression
    Case("unknown-dtype-result", "1:22", "func f(x: f32[2]) -> float[2] {\n  return x\n}\n",
         "unknown dtype 'float'"),  # regression
    Case("unknown-cast-dtype", "2:18", body("return cast(x, dtype=f8)"), "cast: unknown dtype 'f8'"),
    Case("cast-dtype-not-name", "2:18", body("return cast(x, dtype=[1])"), "attribute 'dtype' must be a dtype name"),
    # -- movement ops: slice, concat, gather --------------------------------------------------
    Case("slice-missing-ends", "2:10", body("return slice(x, axes=[0], starts=[0])"),
         "slice needs the attribute 'ends='"),
    Case("slice-axes-not-list", "2:19", body("return slice(x, axes=0, starts=[0], ends=[1])"),
         "slice: attribute 'axes' must be a list of integers"),
    Case("slice-starts-not-list", "2:29", body("return slice(x, axes=[0], starts=0, ends=[1])"),
         "slice: attribute 'starts' must be a list of integers"),
    Case("slice-lengths-differ", "2:47", body("return slice(x, axes=[0, 1], starts=[0, 0], ends=[1])"),
         "slice: ends has 1 entry but axes has 2 entries; give one per sliced axis"),
    Case("slice-steps-length", "2:51", body("return slice(x, axes=[0], starts=[0], ends=[1], steps=[1, 1])"),
         "slice: steps has 2 entries but axes has 1 entry"),
    Case("slice-axis-range", "2:19", body("return slice(x, axes=[2], starts=[0], ends=[1])"),
         "slice: axis 2 is out of range for a tensor of rank 2 (the operand is f32[2, 3])"),
    Case("slice-axis-twice", "2:19", body("return slice(x, axes=[1, -1], starts=[0, 0], ends=[1, 1])"),
         "slice: axis 1 is given twice"),
    Case("slice-zero-step", "2:51", body("return slice(x, axes=[1], starts=[0], ends=[2], steps=[0])"),
         "slice: step 0 (axis 1) must be positive; negative steps are not supported"),
    Case("slice-negative-step", "2:52", body("return slice(x, axes=[-1], starts=[2], ends=[0], steps=[-1])"),
         "negative steps are not supported"),
    Case("slice-empty", "2:10", body("return slice(x, axes=[1], starts=[2], ends=[1])"),
         "slice: the result would be empty along axis 1 (start 2, end 1 on a dimension of 3)"),
    Case("slice-empty-clamped", "2:10", body("return slice(x, axes=[0], starts=[5], ends=[9])"),
         "the IR has no empty tensors"),
    Case("slice-return-type", "2:10", body("return slice(x, axes=[1], starts=[1], ends=[100])"),
         "return value 0 has type f32[2, 2] but the signature of 'f' declares f32[2, 3]"),
    Case("concat-no-operand", "2:10", body("return concat(axis=0)"), "concat takes 1 or more arguments, got 0"),
    Case("concat-missing-axis", "2:10", body("return concat(x, x)"), "concat needs the attribute 'axis='"),
    Case("concat-axis-list", "2:23", body("return concat(x, x, axis=[0])"),
         "concat: attribute 'axis' must be an integer"),
    Case("concat-axis-bool", "2:23", body("return concat(x, x, axis=true)"),
         "concat: attribute 'axis' must be an integer"),
    Case("concat-axis-range", "2:23", body("return concat(x, x, axis=-3)"),
         "concat: axis -3 is out of range for a tensor of rank 2"),
    Case("concat-dims", "2:23", body("return concat(x, x, y, axis=0)"),
         "concat: operand 2 has dimension 4 on axis 1 but operand 0 has 3 (only axis 0, the one concatenated, may differ)"),
    Case("concat-rank", "2:20", body("return concat(x, sum(x, axes=[0]), axis=1)"),
         "concat: operand 1 has rank 1 but operand 0 has rank 2"),
    Case("concat-dtype", "2:20", body("return concat(x, i, axis=0)"),
         "concat: operand 1 is i32[2, 3] but operand 0 is f32[2, 3]; operand dtypes must agree"),
    Case("concat-scalar", "2:27", body("return concat(1.0, 2.0, axis=0)"),
         "concat: axis 0 is out of range for a tensor of rank 0"),
    Case("gather-arity", "2:10", body("return gather(x, axis=0)"), "gather takes 2 arguments, got 1"),
    Case("gather-float-indices", "2:20", body("return gather(x, x, axis=0)"),
         "gather: indices must be i32 or i64, got f32[2, 3]"),
    Case("gather-float-literal", "2:20", body("return gather(x, 1.5, axis=0)"),
         "gather: indices must be i32 or i64, got f32[]"),
    Case("gather-bool-indices", "2:20", body("return gather(x, c, axis=0)"),
         "gather: indices must be i32 or i64, got bool[2, 3]"),
    Case("gather-axis-range", "2:23", body("return gather(x, i, axis=2)"),
         "gather: axis 2 is out of range for a tensor of rank 2 (the operands are f32[2, 3], i32[2, 3])"),
    Case("gather-missing-axis", "2:10", body("return gather(x, i)"), "gather needs the attribute 'axis='"),
    Case("gather-unknown-attr", "2:23", body("return gather(x, i, axes=[0])"),
         "gather has no attribute 'axes' (its attributes: axis)"),
    Case("gather-return-type", "2:10", body("return gather(x, i, axis=1)"),
         "return value 0 has type f32[2, 2, 3] but the signature of 'f' declares f32[2, 3]"),
    Case("zero-dim", "1:15", "func f(x: f32[0]) -> f32[2] {\n  return x\n}\n",
         "dimension 0 must be a positive integer"),  # regression
    Case("negative-dim", "1:18", "func f(x: f32[2, -3]) -> f32[2] {\n  return x\n}\n",
         "dimension -3 must be a positive integer"),  # regression
    Case("huge-dim", "1:15", "func f(x: f32[3000000000]) -> f32[2] {\n  return x\n}\n",
         "dimension 3000000000 is too large"),
    Case("huge-int-literal", "2:17", body("return add(x, " + "9" * 5000 + ")"),
         "integer literal 999999999999... is too large (5000 digits)"),  # regression
    Case("huge-int-dim", "1:15", "func f(x: f32[" + "7" * 5000 + "]) -> f32[2] {\n  return x\n}\n",
         "is too large (5000 digits)"),  # regression
    Case("huge-int-attr", "2:23", body("return sum(x, axes=[" + "1" * 5000 + "])"),
         "is too large (5000 digits)"),  # regression
    Case("float-literal-overflow", "2:17", body("return add(x, 1e999)"),
         "number 1e999 is too large for any float type"),  # regression (fmt)
    Case("deep-nesting", f"2:{10 + 4 * MAX_NESTING}", body("return " + "neg(" * 2000 + "x" + ")" * 2000),
         f"calls are nested more than {MAX_NESTING} deep"),  # regression
    # -- syntax -------------------------------------------------------------------------------
    Case("missing-paren", "3:1", body("return neg(x"), "missing ')' (found '}')"),
    Case("missing-paren-hint", "3:3", body("a = add(neg(x), x", "return a"),
         "the '(' at line 2, column 10 is not closed"),
    Case("missing-paren-params", "1:18", "func f(x: f32[2] -> f32[2] {\n  return x\n}\n", "missing ')'"),
    Case("unmatched-paren", "2:13", body("a = neg(x))", "return a"), "unmatched ')'"),
    Case("missing-return", "3:1", body("a = neg(x)"), "the func body ends without a 'return'"),
    Case("empty-body", "2:1", "func f(x: f32[2]) -> f32[2] {\n}\n", "the func body ends without a 'return'"),
    Case("return-without-value", "3:1", body("return"), "unexpected '}'; expected an expression"),
    Case("statement-after-return", "3:3", body("return x", "a = neg(x)"),
         "'return' must be the last statement of a func"),
    Case("two-returns", "3:3", body("return x", "return x"), "'return' must be the last statement"),
    Case("missing-arrow", "1:19", "func f(x: f32[2]) f32[2] {\n  return x\n}\n",
         "missing '->' before the result type (found name 'f32')"),
    Case("half-arrow", "1:19", "func f(x: f32[2]) - f32[2] {\n  return x\n}\n", "missing '->'"),
    Case("missing-brace", "2:3", "func f(x: f32[2]) -> f32[2]\n  return x\n}\n", "unexpected 'return'; expected '{'"),
    Case("unterminated-func", "2:11", HEAD + "  return x\n", "missing '}' at the end of the func (found end of file)"),
    Case("unterminated-before-next", "3:1", HEAD + "  return x\nfunc g() -> f32[] {\n  return 1.0\n}\n", "missing '}'"),
    Case("missing-colon", "1:10", "func f(x f32[2]) -> f32[2] {\n  return x\n}\n",
         "unexpected name 'f32'; expected ':'"),
    Case("missing-func-keyword", "1:1", "f(x: f32[2]) -> f32[2] {\n  return x\n}\n", "expected 'func' or end of file"),
    Case("stray-token", "3:3", body("a = neg(x) b", "return a"), "unexpected 'return'; expected '='"),
    Case("double-equals", "2:6", body("a == neg(x)", "return a"), "unexpected '='; expected an expression"),
    Case("trailing-comma", "2:19", body("return add(x, x,)"), "unexpected ')'; expected an expression"),
    Case("bad-literal", "2:20", body("return add(x, 1.2.3)"), "unexpected number .3; expected ')' or ','"),
    Case("bad-exponent", "2:18", body("return add(x, 1e)"), "unexpected name 'e'"),
    Case("float-dim", "1:16", "func f(x: f32[2.0]) -> f32[2] {\n  return x\n}\n",
         "unexpected number .0; expected ',' or ']'"),
    Case("float-axis", "2:24", body("return sum(x, axes=[0.5])"), "unexpected number .5; expected ',' or ']'"),
    Case("unclosed-list", "2:24", body("return sum(x, axes=[0)"), "unexpected ')'; expected ',' or ']'"),
    Case("bad-character", "2:12", body("return x @ y"), "unexpected character '@'; expected '(', ',' or '}'"),
    Case("semicolon", "2:11", body("return x;"), "unexpected character ';'"),
    Case("non-ascii", "2:11", body("return x\u00b2"), "unexpected character '\u00b2'"),
    Case("nul-byte", "2:11", body("return x\x00"), "unexpected character '\\x00'"),
    Case("form-feed-counts-no-line", "2:10", "func f(x: f32[2]) -> f32[2] {\x0c\n  return y\n}\n",
         "undefined name 'y'"),
    Case("crlf", "2:10", "func f(x: f32[2]) -> f32[2] {\r\n  return y\r\n}\r\n", "undefined name 'y'"),
]


def run_check(capsys, path: Path) -> tuple[int, str]:
    code = main(["check", str(path)])
    out, err = capsys.readouterr()
    return code, out + err


def caret_column(output: str, line: int) -> int:
    """The 1-based column the caret under source line `line` points at.

    A long line is shown cut, as "...text..."; the column is then counted from
    the cut, and `caret_text` says what the caret points at.
    """
    shown, caret = _caret(output, line)
    return caret + 1


def caret_text(output: str, line: int) -> str:
    """The shown source text from the caret to the end of the line."""
    shown, caret = _caret(output, line)
    return shown[caret:]


def _caret(output: str, line: int) -> tuple[str, int]:
    lines = output.split("\n")
    for k, text in enumerate(lines[:-1]):
        gutter = re.match(rf"^ *{line} \| ", text)
        if gutter and re.fullmatch(r" *\^", lines[k + 1]):
            return text[gutter.end() :], len(lines[k + 1]) - 1 - gutter.end()
    raise AssertionError(f"no caret under line {line}:\n{output}")


def test_table_is_big_enough():
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_error(capsys, tmp_path, case):
    path = tmp_path / "bad.ir"
    path.write_bytes(case.text.encode())
    code, output = run_check(capsys, path)
    assert code == 1, output
    assert "Traceback" not in output and "internal error" not in output
    assert output.startswith(f"{path}:{case.line}:{case.col}: error: "), output
    assert case.message in output
    source_line = case.text.split("\n")[case.line - 1]
    if len(source_line) < 100:
        assert caret_column(output, case.line) == case.col
    else:  # shown cut around the caret
        assert source_line[case.col - 1 :].startswith(caret_text(output, case.line).removesuffix("..."))


@pytest.mark.parametrize("case", CASES[:5], ids=lambda c: c.id)
def test_fmt_and_eval_report_the_same_error(capsys, tmp_path, case):
    path = tmp_path / "bad.ir"
    path.write_text(case.text)
    for command in (["fmt"], ["eval"]):
        assert main([*command, str(path)]) == 1
        assert f"{path}:{case.line}:{case.col}: error: " in capsys.readouterr().err


@pytest.mark.parametrize("mistake", IR_MISTAKES, ids=lambda m: m.message)
def test_each_known_mistake_is_recognised_from_its_own_examples(mistake):
    for example in mistake.examples:
        with pytest.raises(StitchError) as caught:
            parse_program(example)
        assert caught.value.message.startswith(f"syntax error: {mistake.message} (found "), example


def test_known_mistakes_are_recognised_at_any_depth():
    for prefix in ("", "a = neg(x)\n  ", "a = neg(x)\n  b = add(a, a)\n  "):
        for call in ("neg(x", "add(x, mul(x, x)", "sum(neg(add(x, sum(x, axes=[0])), keepdims=true"):
            text = HEAD + f"  {prefix}c = {call}\n  return c\n}}\n"
            with pytest.raises(StitchError, match=r"missing '\)'"):
                parse_program(text)


def test_long_lines_are_cut_around_the_caret(capsys, tmp_path):
    path = tmp_path / "long.ir"
    path.write_text(body("return add(" + "x, " * 200 + "1.2.3)"))
    code, output = run_check(capsys, path)
    assert code == 1
    assert "..." in output and max(len(line) for line in output.splitlines()) < 200
    assert caret_text(output, 2).startswith(".3)")


def test_tabs_keep_the_caret_aligned(capsys, tmp_path):
    path = tmp_path / "tabs.ir"
    path.write_text(HEAD + "\t# a comment\n\treturn\tadd(x, z)\n}\n")
    code, output = run_check(capsys, path)
    assert code == 1 and f"{path}:3:16: error: undefined name 'z'" in output
    assert caret_column(output, 3) == 16


def test_wide_and_control_characters_in_the_shown_line():
    shown = caret_context("a = \u4e2d\u6587\x1b[2J(x)", Pos("f.ir", 1, 7))
    line, caret = shown.split("\n")
    assert "\x1b" not in line and "?[2J" in line
    assert caret.index("^") - line.index("\u4e2d") == 4  # two wide characters, two columns each


# -- files that are not programs ---------------------------------------------------------


@pytest.mark.parametrize(
    "content, where, message",
    [
        (b"", ":1:1: ", "the file defines no func"),
        (b"# nothing but a comment\n", ":1:1: ", "the file defines no func"),
        (b"\xef\xbb\xbf", ":1:1: ", "the file defines no func"),
        (b"func f(x: f32[2]) -> f32[2] {\n  return x # \xe9t\xe9\n}\n", ":2:14: ", "byte 0xe9 is not valid UTF-8"),
        (b"\xff\xfe\x00\x01garbage\x80", ":1:1: ", "is not valid UTF-8"),
        (bytes(range(32)) * 4, ":1:1: ", "syntax error: unexpected character '\\x00'"),
        (b"func" * 10000, ":1:40001: ", "unexpected end of file; expected '('"),
        (b"{" * 100000, ":1:1: ", "syntax error"),
    ],
    ids=["empty", "comment-only", "bom-only", "latin1", "binary", "control-chars", "keyword-soup", "braces"],
)
def test_malformed_files(capsys, tmp_path, content, where, message):
    path = tmp_path / "junk.ir"
    path.write_bytes(content)
    code, output = run_check(capsys, path)
    assert code == 1, output
    assert output.startswith(f"{path}{where}error: "), output
    assert message in output


def test_byte_order_mark_is_allowed(capsys, tmp_path):
    path = tmp_path / "bom.ir"
    path.write_bytes(b"\xef\xbb\xbf" + body("return x").encode())
    assert run_check(capsys, path)[0] == 0


@pytest.mark.parametrize("name", ["missing.ir", ".", "nul\x00byte.ir"], ids=["missing", "directory", "nul-in-path"])
def test_unreadable_paths(capsys, tmp_path, name):
    path = tmp_path / name if name != "nul\x00byte.ir" else Path(name)
    code = main(["check", str(path)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "error: cannot read the file" in err and "Traceback" not in err


def test_bad_usage_exits_2(capsys):
    assert main([]) == 2
    for argv in (["check"], ["frobnicate", "x.ir"], ["check", "a.ir", "b.ir"], ["eval", "a.ir", "--seed", "x"]):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == 2
    assert "usage:" in capsys.readouterr().err


# -- end to end: the installed command ----------------------------------------------------


def stitch(*runs: tuple[str, ...]) -> list[tuple[int, str]]:
    """Run `stitch ARGS...` for each of `runs`, all at once: [(exit code, stderr)]."""
    command = shutil.which("stitch")
    prefix = [command] if command else [sys.executable, "-m", "stitch.engine.cli"]
    procs = [
        subprocess.Popen([*prefix, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for args in runs
    ]
    errs = [proc.communicate(timeout=120)[1] for proc in procs]
    return [(proc.returncode, err) for proc, err in zip(procs, errs)]


def test_command_exit_codes_end_to_end(tmp_path):
    bad = tmp_path / "bad.ir"
    bad.write_text(body("return add(x, y)"))
    deep = tmp_path / "deep.ir"
    deep.write_text(body("return " + "neg(" * 5000 + "x" + ")" * 5000))
    junk = tmp_path / "junk.ir"
    junk.write_bytes(bytes(range(256)) * 8)
    good = tmp_path / "good.ir"
    good.write_text(body("return x"))
    runs = {
        "good": (("check", str(good)), 0),
        "bad": (("check", str(bad)), 1),
        "deep": (("check", str(deep)), 1),
        "junk": (("check", str(junk)), 1),
        "directory": (("check", str(tmp_path)), 1),
        "missing": (("eval", str(tmp_path / "missing.ir")), 1),
        "usage": (("check",), 2),
    }
    results = dict(zip(runs, stitch(*(args for args, _ in runs.values()))))
    for name, (_, code) in runs.items():
        got, err = results[name]
        assert got == code, (name, err)
        assert "Traceback" not in err, name
    err = results["bad"][1]
    assert f"{bad}:2:10: error: add: shapes do not broadcast" in err
    assert re.search(r"^ +\^$", err, re.MULTILINE)


def test_nesting_up_to_the_limit_is_fine(capsys, tmp_path):
    path = tmp_path / "deep.ir"
    path.write_text(body("return " + "neg(" * MAX_NESTING + "x" + ")" * MAX_NESTING))
    assert main(["check", str(path)]) == 0
    assert main(["fmt", str(path)]) == 0
    assert main(["eval", str(path)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("command", ["check", "eval", "compile", "run"])
def test_tensors_beyond_int64_bytes_are_refused_by_the_checker(command, capsys, tmp_path):
    # regressions: eval raised ValueError (exit 3); compile and run blamed the rules (issue 18.4)
    path = tmp_path / "huge.ir"
    path.write_text("func f(x: f32[2147483647, 2147483647, 2147483647]) -> f32[] {\n  return sum(x)\n}\n")
    assert main([command, str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:1:8: error: f32[2147483647, 2147483647, 2147483647] is too large" in err and "2**63" in err
    path.write_text("func g(x: f32[65536, 65536]) -> f32[65536, 65536, 65536, 65536] {\n"
                    "  return broadcast_to(x, shape=[65536, 65536, 65536, 65536])\n}\n")
    assert main([command, str(path)]) == 1
    assert f"{path}:2:10: error: f32[65536, 65536, 65536, 65536] is too large" in capsys.readouterr().err


def test_numpy_refusing_a_size_is_out_of_memory(capsys, tmp_path):
    path = tmp_path / "big.ir"  # 2**62 bytes: within int64, beyond what numpy allocates
    path.write_text("func f(x: f32[1073741824, 1073741824]) -> f32[1073741824] {\n  return sum(x, axes=[1])\n}\n")
    assert main(["eval", str(path)]) == 1
    assert "out of memory" in capsys.readouterr().err


def test_eval_out_of_memory_is_a_user_error(capsys, tmp_path, monkeypatch):
    import stitch.engine.ir.interp as interp

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(interp, "random_inputs", no_memory)
    path = tmp_path / "ok.ir"
    path.write_text(body("return x"))
    assert main(["eval", str(path)]) == 1
    assert "error: out of memory" in capsys.readouterr().err
