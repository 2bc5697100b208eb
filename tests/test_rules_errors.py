"""Malformed `.rules` files: each error names the rule file, line and column, through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from stitch.engine.cli import main

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "mlp.ir")

# (rules text, expected line:col, message fragment)
BAD_RULES = [
    ("rule a mul(?x, 1.0) => ?x\n", "1:8", "syntax error"),
    ("rule a: mul(?x, 1.0) ?x\n", "1:22", "syntax error"),
    ("rule a: mul(?x 1.0) => ?x\n", "1:16", "syntax error"),
    ("rule a: mul(?x, 1.0) => ?x where\n", "1:33", "syntax error"),
    ("# c\nrule a: foo(?x) => ?x\n", "2:9", "unknown op 'foo'"),
    ("rule a: mull(?x, 1.0) => ?x\n", "1:9", "did you mean 'mul'"),
    ("rule a: mul(?x) => ?x\n", "1:9", "mul takes 2 argument(s), got 1"),
    ("rule a: exp(?x, ?y) => ?x\n", "1:9", "exp takes 1 argument(s), got 2"),
    ("rule a: sum(?x, axis=?a) => ?x\n", "1:17", "sum has no attribute 'axis'"),
    ("rule a: sum(?x) => ?x\n", "1:9", "must name its axes"),
    ("rule a: transpose(?x) => ?x\n", "1:9", "must name its perm"),
    ("rule a: add(?x, ?y) => mul(?x, ?z)\n", "1:32", "?z on the right side is not bound"),
    ("rule a: exp(?x) => ?x where rnk(?x) == 1\n", "1:29", "unknown property 'rnk'"),
    ("rule a: exp(?x) => ?x where elementwse(?x)\n", "1:29", "unknown condition 'elementwse'"),
    ("rule a: exp(?x) => ?x where scalar(?y)\n", "1:36", "which the left side does not bind"),
    ("rule a: exp(?x) => ?x\nrule a: log(?x) => ?x\n", "2:1", "rule 'a' is defined twice"),
    ("rule a: ?x => exp(?x)\n", "1:9", "the left side must be an op call"),
    ("rule a: global(?x) => ?x\n", "1:9", "cannot be a bare placement"),
    ("rule a: exp(?x) => global(exp(?x))\n", "1:20", "right side cannot be a bare placement"),
    ("rule a: exp(global(inline(?x))) => exp(?x)\n", "1:20", "cannot wrap another placement"),
    ("rule a: sum(?x, axes=[-1]) => ?x\n", "1:17", "distinct and non-negative"),
    ("rule a: sum(?x, axes=?a, keepdims=?a) => ?x\n", "1:35", "used both"),
    ("rule a: exp(?x) => ?x where rank(?x) == 1.5\n", "1:41", "compare integers"),
    ("rule a: exp(?x) => ?x where dim(?x, ?x) == 1\n", "1:37", "dim takes an integer axis"),
    ("rule a: ?f(?x, ?y, ?z, ?w) => ?x\n", "1:9", "no op takes 4 argument(s)"),
    ("rule a: mul(?x, 1.0) => ?x @\n", "1:28", "syntax error"),
    # slice, concat, gather: literal attributes in the e-graph's normal form
    ("rule a: concat(?x, axis=0) => ?x\n", "1:9", "concat in a rule takes 2 or more operands, got 1"),
    ("rule a: concat(?x, ?y) => ?x\n", "1:9", "concat needs the attribute 'axis='"),
    ("rule a: gather(?x, ?i, axis=-1) => ?x\n", "1:24", "axis in a rule must be non-negative"),
    ("rule a: gather(?x, ?i, axis=[0]) => ?x\n", "1:24", "gather: attribute 'axis' has the wrong kind of value"),
    ("rule a: slice(?x, axes=[1, 0], starts=[0, 0], ends=[1, 1]) => ?x\n", "1:19", "must be ascending"),
    ("rule a: slice(?x, axes=[0], starts=[-1], ends=[1]) => ?x\n", "1:29",
     "starts of a slice in a rule must be non-negative"),
    ("rule a: slice(?x, axes=[0], starts=[2], ends=[1]) => ?x\n", "1:41", "must be below its end"),
    ("rule a: slice(?x, axes=[0], starts=[0], ends=[1], steps=[0]) => ?x\n", "1:51", "steps of a slice in a rule must be positive"),
    ("rule a: slice(?x, axes=?a, starts=?s, ends=?e) => ?x\n", "1:9", "must name its steps when its axes are a variable"),
    ("rule a: slice(?x, axes=[0, 1], starts=[0], ends=[1]) => ?x\n", "1:9", "one entry per sliced axis"),
    ("rule a: concat(?x, ?y, axis=?k) => ?x where len(?k) == 1\n", "1:49", "?k holds one integer"),
    ("rule a: exp(?x) => ?x where movment(?x)\n", "1:29", "did you mean 'movement'"),
    # a literal's value: compared with numbers only, of a tensor variable
    ("rule a: exp(?x) => ?x where value(?x) > rank(?x)\n", "1:29", "value(?c) compares with a number"),
    ("rule a: exp(?x) => ?x where value(?x) == f32\n", "1:29", "value(?c) compares with a number"),
    ("rule a: sum(?x, axes=?a) => ?x where value(?a) > 0\n", "1:44", "value takes a tensor variable, but ?a is an attribute"),
    ("rule a: exp(?x) => ?x where literal(?y)\n", "1:37", "which the left side does not bind"),
    ("rule a: exp(?x) => ?x where rank(?x) > value(?x)\n", "1:40", "value(?c) compares with a number"),
    ("rule a: exp(?x) => ?x where value(?x) < 1e999\n", "1:41", "too large for any float type"),
    # `..`: the operands and attributes an op variable's call does not write
    ("rule a: exp(.., ?x) => ?x\n", "1:13", "an op variable does not name; exp(...) writes all of its own"),
    ("rule a: ?f(..) => ?x\n", "1:12", "`..` needs an operand beside it"),
    ("rule a: ?f(?x, .., ?y) => ?x\n", "1:16", "`..` goes first or last among the operands"),
    ("rule a: ?f(.., .., ?x) => ?x\n", "1:16", "`..` is written twice in a row"),
    ("rule a: ?f(?x, perm=?p, ..) => ?x\n", "1:25", "`..` goes before the keyword attributes"),
    ("rule a: ?f(...) => ?x\n", "1:14", "syntax error"),
    ("rule a: ?f(global(?p), ..) => ?f(inline(?p))\n", "1:31",
     "?f is written ?f(_) here but ?f(_, ..) at line 1"),
    ("rule a: ?f(.., global(?p), ..) => ?f(inline(?p), ..)\n", "1:35", "so that `..` stands for the same operands"),
    ("rule a: ?f(?f(?x, ..), ..) => ?x\n", "1:12", "?f is written with `..` on the left: it may appear there once"),
    ("rule a: ?f(?x, ?y, ?z, ?w, ..) => ?x\n", "1:9", "no op takes 4 or more argument(s)"),
    ("rule a: ?f(?x, ..) => ?x where operands(?f) == rank(?x)\n", "1:32", "operands(?f) compares with an integer"),
    ("rule a: exp(?x) => ?x where operands(?x) == 1\n", "1:38", "operands takes an op variable, but ?x is a tensor"),
    ("rule a: ?f(?x, ..) => ?x where rank(?f) == 1\n", "1:37", "rank takes a tensor variable, but ?f is an op"),
    ("rule a: exp(add(?x, ?y)) => ?x where not_broadcast(?x)\n", "1:52",
     "not_broadcast(?x) tests an operand of the left side's outer call"),
    # a new local edge: not broadcast by its consumer, which the rule says
    ("rule a: add(global(?m), ?b) => add(local(?m), ?b) where matmul(?m)\n", "1:36",
     "add may broadcast ?m, which a local edge cannot be: add the condition not_broadcast(?m)"),
    ("rule a: ?f(.., global(?m), ..) => ?f(.., local(?m), ..) where layout(?f)\n", "1:42",
     "?f may broadcast ?m"),
    ("rule a: exp(add(global(?m), ?b)) => exp(add(local(?m), ?b))\n", "1:45",
     "a new local(...) edge is a variable operand of the right side's outer call"),
]


@pytest.mark.parametrize("text, where, message", BAD_RULES, ids=[f"row{i}" for i in range(len(BAD_RULES))])
def test_bad_rule_file_reports_file_line_col(tmp_path, capsys, text, where, message):
    path = tmp_path / "bad.rules"
    path.write_text(text)
    code = main(["compile", EXAMPLE, "--emit", "egraph", "--rules", str(path)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"{path}:{where}:" in err, err
    assert message in err, err
    assert "^" in err and "Traceback" not in err


@pytest.mark.parametrize("text, where, message", BAD_RULES[:6], ids=[f"check{i}" for i in range(6)])
def test_rules_check_reports_the_same_errors(tmp_path, capsys, text, where, message):
    path = tmp_path / "bad.rules"
    path.write_text(text)
    assert main(["rules", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:{where}:" in err and message in err


def test_unreadable_rule_file(tmp_path, capsys):
    path = tmp_path / "latin1.rules"
    path.write_bytes(b"rule a: exp(?x) => ?x # \xe9\n")
    assert main(["compile", EXAMPLE, "--rules", str(path)]) == 1
    assert str(path) in capsys.readouterr().err


def test_missing_rule_file(capsys):
    assert main(["compile", EXAMPLE, "--rules", "/nonexistent/x.rules"]) == 1
    assert "/nonexistent/x.rules" in capsys.readouterr().err
