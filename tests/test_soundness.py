"""`stitch rules check`: sound rules pass, unsound ones are caught with a shrunk counterexample.

The rule files under tests/rules/ hold one rule per kind of mistake (unsound.rules)
and rules that hold only up to rounding (sound.rules). Every built-in rule file
must pass too. The number of instances per rule follows the hypothesis profile
(25 by default, more with `pytest --long`), at most 50.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings
from stitch.engine.cli import main
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.parse import parse_program
from stitch.engine.ir.program import Param, TensorType, Var
from stitch.engine.rewrite.check import TOLERANCE, check_rule, check_rule_file, infer_type
from stitch.engine.rewrite.rules import RULES_DIR, load_rules, parse_rules

HERE = Path(__file__).resolve().parent
SOUND = load_rules(HERE / "rules" / "sound.rules")
UNSOUND = load_rules(HERE / "rules" / "unsound.rules")
BUILTIN = sorted(RULES_DIR.glob("*.rules"))


def examples() -> int:
    # The profile conftest loaded (25 by default), capped: ~100 rules are checked here.
    return min(settings().max_examples, 50)


def rule(text: str):
    return parse_rules(text).rules[0]


@pytest.mark.parametrize("r", SOUND.rules, ids=lambda r: r.name)
def test_sound_rule_is_accepted(r):
    verdict = check_rule(r, examples())
    assert verdict.status == "ok", verdict.render()
    assert verdict.instances > 0


@pytest.mark.parametrize("r", UNSOUND.rules, ids=lambda r: r.name)
def test_unsound_rule_is_rejected_with_a_counterexample(r):
    verdict = check_rule(r, examples())
    assert verdict.status == "unsound", verdict.render()
    text = verdict.render()
    assert text.startswith(f"{UNSOUND.filename}:{r.pos.line}: {r.name}: UNSOUND")
    assert "counterexample:" in text and "left: " in text and "right:" in text


def test_the_files_cover_enough_kinds():
    assert len(SOUND.rules) >= 12 and len(UNSOUND.rules) >= 12


def test_counterexample_is_shrunk_and_shows_inputs_and_values():
    text = check_rule(rule("rule swap: sub(?x, ?y) => sub(?y, ?x)"), examples()).detail
    assert "?x: f32[]" in text and "?y: f32[]" in text  # shrunk to scalars
    assert "inputs:" in text and "x = " in text
    assert "left:  sub(x, y) : f32[] = " in text and "right: sub(y, x) : f32[] = " in text
    assert "they differ" in text and "tolerance" in text


def test_type_changing_rule_shows_both_types():
    text = check_rule(rule("rule k: sum(?x, axes=?ax, keepdims=true) => sum(?x, axes=?ax)"), examples()).detail
    assert "the two sides have different types" in text
    assert "?ax = [" in text


def test_right_side_that_does_not_type_check_is_a_counterexample():
    text = check_rule(rule("rule p: mul(?x, ?x) => pow(?x, 2.0)"), examples()).detail
    assert "the right side does not type-check" in text  # pow needs floats; the left side takes ints


def test_op_variable_binding_is_shown():
    text = check_rule(rule("rule f: ?f(add(?x, ?y)) => add(?f(?x), ?f(?y)) where unary(?f)"), examples()).detail
    assert "?f = " in text


def test_wrong_dtype_precision_is_caught():
    r = rule("rule c: cast(cast(?x, dtype=f16), dtype=f32) => ?x where dtype(?x) == f32")
    assert check_rule(r, examples()).status == "unsound"


def test_sound_only_on_a_domain():
    # log(a*b) = log a + log b only for positive a, b; elsewhere a side is nan and the input is skipped
    # on ordinary values (at edge values NaN counts: log((-1)*(-1)) is 0, log(-1) + log(-1) NaN)
    verdict = check_rule(rule("rule l: log(mul(?a, ?b)) => add(log(?a), log(?b))"), examples())
    assert verdict.status == "edge" and verdict.instances > 0
    # but sqrt(x*x) = x is false for negative x, where both sides are finite
    assert check_rule(rule("rule s: sqrt(mul(?x, ?x)) => ?x"), examples()).status == "unsound"


def test_conditions_steer_the_instances():
    r = rule("rule m: mean(?x, axes=[1]) => mul(sum(?x, axes=[1]), 0.25) where dim(?x, 1) == 4, rank(?x) == 2")
    assert check_rule(r, examples()).status == "ok"
    r = rule("rule a: sum(?x, axes=?ax) => sum(?x, axes=[0]) where ?ax == [0]")
    assert check_rule(r, examples()).status == "ok"


def test_a_literal_s_value_conditions_draw_its_values():
    """`value(?c) > 0` makes ?c a scalar drawn in its range (and at the edge values in it): scaling
    commutes with relu for positive factors only, and the checker finds the negative ones the
    looser bound lets in."""
    text = "rule r: relu(mul(?x, ?c)) => mul(relu(?x), ?c) where float(?c), "
    assert check_rule(rule(text + "value(?c) > 0"), examples()).status == "ok"
    assert check_rule(rule(text + "value(?c) >= 100, value(?c) < 1000"), examples()).status == "ok"
    loose = check_rule(rule(text + "value(?c) > -1"), examples())
    assert loose.status == "unsound" and "c = -" in loose.render(), loose.render()
    assert check_rule(rule(text + "literal(?c)"), examples()).status == "unsound"


def test_unsatisfiable_conditions_skip_the_rule():
    verdict = check_rule(rule("rule r: add(?x, ?y) => add(?y, ?x) where scalar(?x), rank(?x) == 2"), examples())
    assert verdict.status == "skipped" and "no rank satisfies" in verdict.detail
    verdict = check_rule(rule("rule r: add(?x, ?y) => add(?y, ?x) where size(?x) > 500"), 10)
    assert verdict.status == "skipped" and "conditions" in verdict.render()


def test_infer_type():
    params = (Param("x", TensorType("f32", (2, 3))),)
    assert infer_type(params, Var("x")) == TensorType("f32", (2, 3))
    call = parse_program("func f(x: f32[2, 3]) -> f32[3] { return sum(x, axes=[0]) }").funcs[0].returns[0]
    assert infer_type(params, call) == TensorType("f32", (3,))


@pytest.mark.parametrize("path", BUILTIN, ids=lambda p: p.name)
def test_builtin_rules_are_sound(path):
    verdicts = check_rule_file(load_rules(path), examples())
    bad = [v.render() for v in verdicts if v.failed]
    assert not bad, "\n".join(bad)


# -- edge values: NaN, inf, -0.0, the dtype's limits ------------------------------------------

EDGE_UNSAFE = [  # rules that hold on ordinary values only (issue 18.7)
    "rule s: sum(mul(?x, ?c), axes=?ax) => mul(sum(?x, axes=?ax), ?c) where scalar(?c)",
    "rule l: log(exp(?x)) => ?x",
    "rule e: mul(exp(?a), exp(?b)) => exp(add(?a, ?b))",
    "rule z: add(?x, 0.0) => ?x",  # -0.0 + 0.0 is +0.0
    "rule h: pow(?x, 0.5) => sqrt(?x)",  # pow(-inf, 0.5) is inf, sqrt(-inf) NaN
]


@pytest.mark.parametrize("text", EDGE_UNSAFE, ids=lambda t: t.split(":")[0])
def test_rules_that_fail_only_at_edge_values_are_reported(text):
    verdict = check_rule(rule(text), examples())
    assert verdict.status == "edge" and verdict.failed and verdict.instances > 0, verdict.render()
    assert "HOLDS ONLY AWAY FROM EDGE VALUES" in verdict.render() and "counterexample:" in verdict.edge
    name, rest = text.split(":", 1)
    tagged = check_rule(rule(f"{name} [unsafe-fp]:{rest}"), examples())
    assert tagged.status == "ok" and not tagged.failed and tagged.edge, tagged.render()
    assert "as its unsafe-fp tag says" in tagged.render()


def test_edge_counterexamples_show_the_special_values():
    verdict = check_rule(rule("rule l: log(exp(?x)) => ?x"), examples())
    assert "?x: f" in verdict.edge and "x = " in verdict.edge
    assert any(v in verdict.edge for v in ("inf", "nan", "-0.0", "e+")), verdict.edge


@pytest.mark.parametrize("text", ["rule m: mul(?x, 1.0) => ?x", "rule c: add(?x, ?y) => add(?y, ?x)",
                                  "rule q: sub(?x, 0.0) => ?x", "rule r: relu(?x) => maximum(?x, 0.0)",
                                  "rule n: max(neg(?x), axes=?ax) => neg(min(?x, axes=?ax)) where float(?x)"])
def test_rules_exact_at_edge_values_pass_both_phases(text):
    verdict = check_rule(rule(text), examples())
    assert verdict.status == "ok" and not verdict.edge and verdict.edge_instances > 0, verdict.render()


def test_a_needless_unsafe_fp_tag_is_noted():
    verdict = check_rule(rule("rule m [unsafe-fp]: mul(?x, 1.0) => ?x"), examples())
    assert verdict.status == "ok" and "held at every edge value tried" in verdict.render()


def test_rule_tags_parse_and_unknown_ones_are_errors():
    rf = parse_rules("rule a [unsafe-fp]: log(exp(?x)) => ?x\nrule b: mul(?x, 1.0) => ?x\n")
    assert [r.tags for r in rf.rules] == [("unsafe-fp",), ()] and rf.rules[0].unsafe_fp
    with pytest.raises(StitchError, match="unknown tag 'unsafe_fp'") as exc:
        parse_rules("rule a [unsafe_fp]: log(exp(?x)) => ?x\n", "t.rules")
    assert exc.value.pos.line == 1 and exc.value.pos.col == 9 and "did you mean 'unsafe-fp'" in exc.value.render()


def test_builtin_rules_that_change_results_at_edge_values_are_tagged():
    tagged = {r.name for p in BUILTIN for r in load_rules(p).rules if r.unsafe_fp}
    assert {"sum-scale", "sum-scale-l", "mean-scale", "log-exp", "exp-sum", "exp-diff", "pow-half",
            "add-zero", "add-zero-l", "sum-neg"} == tagged


def test_unsafe_fp_rules_are_used_only_when_allowed(tmp_path, capsys):
    """sum(mul(x, 0.5)) on [3e38, 3e38] is 3e38; moving the scale out of the sum (sum-scale) gives inf."""
    import numpy as np
    import stitch

    text = "func f(x: f32[2]) -> f32[] {\n  return sum(mul(x, 0.5))\n}\n"
    x = np.full(2, 3e38, np.float32)
    for target in ("cpu", "accel"):
        assert stitch.compile(text, target=target, cache_dir=tmp_path)(x=x)[0] == np.float32(3e38)
    # log(exp(x)) => x always pays, so extraction takes it when it may
    log_exp = "func f(x: f32[]) -> f32[] {\n  return log(exp(x))\n}\n"
    hundred = np.array(100, np.float32)
    assert np.isposinf(stitch.compile(log_exp, target="accel")(x=hundred)[0])
    assert stitch.compile(log_exp, target="accel", unsafe_fp=True)(x=hundred)[0] == 100
    path = tmp_path / "f.ir"
    path.write_text(text)
    assert main(["compile", str(path), "--emit", "egraph"]) == 0
    assert "sum-scale" not in capsys.readouterr().out
    assert main(["compile", str(path), "--emit", "egraph", "--unsafe-fp"]) == 0
    assert "sum-scale " in capsys.readouterr().out


def test_cli_exit_1_for_a_rule_that_fails_only_at_edge_values(tmp_path, capsys):
    path = write(tmp_path, "rule le: log(exp(?x)) => ?x\nrule ok [unsafe-fp]: log(exp(?x)) => ?x\n")
    assert main(["rules", "check", path, "--examples", "10"]) == 1
    out = capsys.readouterr().out
    assert f"{path}:1: le: HOLDS ONLY AWAY FROM EDGE VALUES" in out and f"{path}:2: ok: ok away" in out
    assert "0 unsound, 1 only away from edge values, 1 ok, 0 skipped" in out and "edge values:" in out


# -- the command line ---------------------------------------------------------


def write(tmp_path, text: str) -> str:
    path = tmp_path / "mine.rules"
    path.write_text(text)
    return str(path)


def test_cli_exit_0_when_every_rule_is_sound(tmp_path, capsys):
    path = write(tmp_path, "rule comm: add(?x, ?y) => add(?y, ?x)\nrule one: mul(?x, 1.0) => ?x\n")
    assert main(["rules", "check", path, "--examples", "10"]) == 0
    out = capsys.readouterr().out
    assert TOLERANCE in out
    assert f"{path}:1: comm: ok" in out and f"{path}:2: one: ok" in out
    assert "0 unsound, 0 only away from edge values, 2 ok, 0 skipped" in out


def test_cli_exit_1_names_the_unsound_rule_and_its_line(tmp_path, capsys):
    path = write(tmp_path, "# a comment\nrule comm: add(?x, ?y) => add(?y, ?x)\nrule bad: sub(?x, ?y) => sub(?y, ?x)\n")
    assert main(["rules", "check", path, "--examples", "10"]) == 1
    out = capsys.readouterr().out
    assert f"{path}:2: comm: ok" in out
    assert f"{path}:3: bad: UNSOUND" in out and "counterexample:" in out
    assert "1 unsound, 0 only away from edge values, 1 ok, 0 skipped" in out


def test_cli_reports_a_broken_rule_file(tmp_path, capsys):
    path = write(tmp_path, "rule bad: frobnicate(?x) => ?x\n")
    assert main(["rules", "check", path]) == 1
    assert f"{path}:1:" in capsys.readouterr().err


def test_cli_rejects_a_bad_example_count(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["rules", "check", write(tmp_path, ""), "--examples", "0"])
    assert exc.value.code == 2


# -- slice, concat, gather -------------------------------------------------------------


def test_right_side_reading_out_of_range_is_a_counterexample():
    text = check_rule(rule("rule r: gather(concat(?a, ?b, axis=0), ?i, axis=0) => gather(?a, ?i, axis=0)"),
                      examples()).detail
    assert "the right side fails: gather: index" in text and "is out of range for axis 0" in text
    assert "?i: i" in text  # gather's indices are drawn i32 or i64


def test_slice_attributes_are_drawn_in_normal_form(monkeypatch):
    from stitch.engine.rewrite.check.draw import Drawer

    seen = []
    original = Drawer.slice_attrs

    def spy(self, p, t):
        drawn = original(self, p, t)
        seen.append((t.shape, drawn))
        return drawn

    monkeypatch.setattr(Drawer, "slice_attrs", spy)
    verdict = check_rule(rule("rule r: exp(slice(?x, axes=?ax, starts=?s, ends=?e, steps=?t)) => "
                              "slice(exp(?x), axes=?ax, starts=?s, ends=?e, steps=?t)"), examples())
    assert verdict.status == "ok"
    assert any(d["axes"] for _, d in seen)
    for shape, d in seen:
        assert list(d["axes"]) == sorted(set(d["axes"]))
        for a, start, end, step in zip(d["axes"], d["starts"], d["ends"], d["steps"]):
            assert 0 <= start < end <= shape[a] and step >= 1


def test_op_variable_draws_movement_ops_with_their_axis():
    text = check_rule(rule("rule r: ?f(?a, ?b) => ?f(?b, ?a) where movement(?f)"), examples()).detail
    assert "?f = concat(axis=" in text


# -- op variables over ops with attributes, and `..` ---------------------------------------


def test_an_op_variable_is_checked_on_each_op_it_can_stand_for():
    from stitch.engine.rewrite.check.constraints import op_instances

    r = rule("rule r: ?f(.., neg(neg(?x)), ..) => ?f(.., ?x, ..)")
    ops = {v.ops["?f"] for v in op_instances(r)}
    assert {"transpose", "reshape", "broadcast_to", "cast", "slice", "sum", "where", "concat", "gather"} <= ops
    positions = [v.rule.lhs for v in op_instances(r) if v.ops["?f"] == "where"]
    assert len(positions) == 3  # neg(neg(?x)) at each of where's operands
    verdict = check_rule(r, examples())
    assert verdict.status == "ok", verdict.render()
    assert verdict.instances >= len(op_instances(r))


def test_a_rule_wrong_for_one_op_of_its_group_is_caught_on_that_op():
    """neg commutes with transpose, reshape and broadcast_to, not with a cast to bool (no neg of a bool)."""
    verdict = check_rule(rule("rule r: ?f(neg(?x), ..) => neg(?f(?x, ..)) where layout(?f)"), examples())
    assert verdict.status == "unsound", verdict.render()
    assert "?f = cast(dtype=" in verdict.detail


def test_a_rest_rule_that_drops_an_op_shows_the_op_and_its_attributes():
    verdict = check_rule(rule("rule r: ?f(exp(?x), ..) => ?f(?x, ..) where movement(?f)"), examples())
    assert verdict.status == "unsound", verdict.render()
    assert "?f = slice(" in verdict.detail or "?f = concat(axis=" in verdict.detail \
        or "?f = gather(axis=" in verdict.detail


def test_placement_rules_with_rest_are_sound_for_every_op():
    r = rule("rule r: ?f(.., global(?p), ..) => ?f(.., inline(?p), ..) where injective(?p), operands(?f) <= 2, "
             "not_broadcast(?p)")
    verdict = check_rule(r, examples())
    assert verdict.status == "ok" and verdict.instances > 0, verdict.render()
