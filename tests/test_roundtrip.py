"""Every printed program parses back to the same structure, and printing is a fixed point."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from stitch.engine.ir.parse import parse_file, parse_program
from stitch.engine.ir.printer import print_program
from stitch.engine.ir.program import NOPOS, Assign, Attr, Call, Const, DTypeName, Func, Param, Program, TensorType, Var
from stitch_testing import ALL_DTYPES, programs

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.ir"))


def assert_roundtrips(program: Program) -> None:
    text = print_program(program)
    again = parse_program(text)
    assert again == program, text
    assert print_program(again) == text


def test_examples_exist():
    assert len(EXAMPLES) >= 10


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_roundtrips(path):
    program = parse_file(path)
    assert program.funcs
    assert_roundtrips(program)


@given(programs(dtypes=ALL_DTYPES, max_funcs=3))
def test_generated_program_roundtrips(program):
    assert_roundtrips(program)


@given(programs(dtypes=ALL_DTYPES, max_funcs=2, movement=True))
def test_generated_program_with_movement_ops_roundtrips(program):
    assert_roundtrips(program)


def test_movement_ops_roundtrip():
    x, i = Var("x"), Var("i")
    body = (
        Assign("a", Call("slice", (x,), (Attr("axes", (-1, 0)), Attr("starts", (-3, 0)), Attr("ends", (2**31 - 1, -1)),
                                        Attr("steps", (2, 1))))),
        Assign("b", Call("concat", (x,), (Attr("axis", -2),))),
        Assign("c", Call("concat", (x, Var("a"), x, x), (Attr("axis", 0),))),
        Assign("d", Call("gather", (x, i), (Attr("axis", -1),))),
        Assign("e", Call("gather", (x, Const(-2)), (Attr("axis", 1),))),
    )
    t = TensorType("f32", (4, 6))
    func = Func("moves", (Param("x", t), Param("i", TensorType("i64", (2,)))), (t,) * 4, body,
                (Var("a"), Var("b"), Var("c"), Var("d")))
    assert_roundtrips(Program((func,)))
    assert "slice(x, axes=[-1, 0], starts=[-3, 0], ends=[2147483647, -1], steps=[2, 1])" in print_program(
        Program((func,)))


def test_parsed_positions_do_not_affect_equality():
    parsed = parse_program("func f(x: f32[2]) -> f32[2] {\n  return neg(x)\n}\n")
    t = TensorType("f32", (2,))
    built = Program((Func("f", (Param("x", t),), (t,), (), (Call("neg", (Var("x"),)),)),))
    assert parsed.funcs[0].pos != NOPOS
    assert parsed == built


@pytest.mark.parametrize(
    "literal, other",
    [(Const(1), Const(1.0)), (Const(True), Const(1)), (Const(0.0), Const(0)), (Const(1e-5), Const(1e-6))],
)
def test_literals_keep_their_kind(literal, other):
    def program(c):
        call = Call("add", (Var("x"), c))
        return Program((Func("f", (Param("x", TensorType("f32", ())),), (TensorType("f32", ()),), (), (call,)),))

    assert literal != other
    assert_roundtrips(program(literal))
    assert parse_program(print_program(program(literal))) != program(other)


def test_every_construct_roundtrips():
    # Syntax only: the result types do not match (the printer and parser do not check).
    x = Var("x")
    f32 = TensorType("f32", (2, 3))
    body = (
        Assign("a", Call("sum", (x,), (Attr("axes", (-1, 0)), Attr("keepdims", True)))),
        Assign("b", Call("transpose", (x,), (Attr("perm", (1, 0)),))),
        Assign("c", Call("reshape", (x,), (Attr("shape", (-1,)),))),
        Assign("d", Call("cast", (x,), (Attr("dtype", DTypeName("i64")),))),
        Assign("e", Call("max", (x,), (Attr("axes", ()),))),
        Assign("g", Call("where", (Const(False), x, Const(-2.5e-12)))),
        Assign("h", Var("g")),
    )
    returns = (Var("a"), Var("b"), Var("c"), Var("d"), Var("h"), Const(-7))
    func = Func("every", (Param("x", f32), Param("s", TensorType("bool", ()))), (f32,) * 6, body, returns)
    assert_roundtrips(Program((func, Func("other", (), (TensorType("i32", ()),), (), (Const(3),)))))


def test_nonfinite_literals_print_and_parse_back_P11():
    """P11: inf, -inf and nan are literals; each prints as written and parses back to itself."""
    t = TensorType("f32", ())
    for value, text in ((float("inf"), "inf"), (float("-inf"), "-inf"), (float("nan"), "nan")):
        func = Func("f", (Param("x", t),), (t,), (), (Call("add", (Var("x"), Const(value))),))
        printed = print_program(Program((func,)))
        assert f"add(x, {text})" in printed
        assert_roundtrips(Program((func,)))


# -- comments: `stitch fmt` keeps them with their statements ------------------------------------------

COMMENTED = """\
# file header
# second line

func f(x: f32[2]) -> f32[2] {   # header note
  # about a
  a = add(x,   # inside a call
          x)   # end of a
  b = mul(a, a)  # b
  # before return

  return b   # returned
  # after return
}  # closing f
# between funcs
func g(y: f32[3]) -> f32[3] { return neg(y) }  # one-liner
# trailing file comment
"""

COMMENTED_FORMATTED = """\
# file header
# second line
func f(x: f32[2]) -> f32[2] {  # header note
  # about a
  # inside a call
  a = add(x, x)  # end of a
  b = mul(a, a)  # b
  # before return
  return b  # returned
  # after return
}  # closing f

# between funcs
func g(y: f32[3]) -> f32[3] {
  return neg(y)  # one-liner
}

# trailing file comment
"""


def test_comments_stay_with_their_statements():
    """Regression: `stitch fmt` dropped every comment."""
    program = parse_program(COMMENTED)
    assert print_program(program) == COMMENTED_FORMATTED
    assert parse_program(COMMENTED_FORMATTED) == program
    assert print_program(parse_program(COMMENTED_FORMATTED)) == COMMENTED_FORMATTED


def test_fmt_prints_the_comments(tmp_path, capsys):
    from stitch.engine.cli import main

    path = tmp_path / "c.ir"
    path.write_text(COMMENTED)
    assert main(["fmt", str(path)]) == 0
    assert capsys.readouterr().out == COMMENTED_FORMATTED


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_keep_every_comment(path):
    text = path.read_text()
    formatted = print_program(parse_program(text))
    assert sorted(_comments(formatted)) == sorted(_comments(text))


def _comments(text: str) -> list[str]:
    return [line[line.index("#"):].rstrip() for line in text.splitlines() if "#" in line]


@st.composite
def commented_programs(draw) -> tuple[str, list[str]]:
    """A generated program's text with numbered comments on lines of their own and at line ends."""
    lines = print_program(draw(programs(max_funcs=2))).splitlines()
    out, comments = [], []
    for line in lines:
        for _ in range(draw(st.integers(0, 2))):
            comments.append(f"# c{len(comments)}")
            out.append("  " + comments[-1])
        if draw(st.booleans()):
            comments.append(f"# c{len(comments)} {draw(st.sampled_from(['', '{ } ( )', 'return', '#']))}".rstrip())
            line += "  " + comments[-1]
        out.append(line)
    return "\n".join(out) + "\n", comments


@given(commented_programs())
def test_generated_comments_survive_formatting_once_each(case):
    text, comments = case
    program = parse_program(text)
    formatted = print_program(program)
    assert sorted(_comments(formatted)) == sorted(comments), formatted
    assert parse_program(formatted) == program
    assert print_program(parse_program(formatted)) == formatted


# -- rules -------------------------------------------------------------------------------

RULE_FILES = sorted((Path(__file__).resolve().parent.parent / "rules").glob("*.rules")) + sorted(
    (Path(__file__).resolve().parent / "rules").glob("*.rules"))
RULE_FORMS = [
    "rule a: ?f(.., global(?p), ..) => ?f(.., inline(?p), ..) where injective(?p), operands(?f) <= 2",
    "rule b: ?f(global(?p), ..) => ?f(shared(?p), ..) where elementwise(?p), reduction(?f)",
    "rule c: ?f(.., global(?m)) => ?f(.., local(?m)) where matmul(?m), not_broadcast(?m)",
    "rule d: ?f(?x, .., axes=?ax) => ?f(?x, .., axes=?ax) where len(?ax) == 1",
    "rule e [unsafe-fp]: sum(mul(?x, ?c), axes=[0, 2], keepdims=true) => mul(sum(?x, axes=[0, 2], keepdims=true), ?c)"
    " where scalar(?c), value(?c) >= -1.5, dtype(?x) == f32, shape(?x) == [2, 3, 4], dim(?x, -1) != 1",
    "rule f: cast(?x, dtype=f16) => ?x where dtype(?x) == f16",
]


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_rule_files_roundtrip(path):
    from stitch.engine.rewrite.rule_printer import print_rules
    from stitch.engine.rewrite.rules import load_rules, parse_rules

    rf = load_rules(path)
    text = print_rules(rf)
    again = parse_rules(text, str(path))
    assert again == rf, text
    assert print_rules(again) == text


@pytest.mark.parametrize("text", RULE_FORMS, ids=lambda t: t.split(":")[0])
def test_every_rule_form_roundtrips(text):
    from stitch.engine.rewrite.rule_printer import print_rule
    from stitch.engine.rewrite.rules import parse_rules

    rule = parse_rules(text).rules[0]
    assert print_rule(rule) == text
    assert parse_rules(print_rule(rule)).rules[0] == rule
