"""`stitch rules check`: sound rules pass, unsound ones are caught with a shrunk counterexample.

The rule files under tests/rules/ hold one rule per kind of mistake (unsound.rules)
and rules that hold only up to rounding (sound.rules). Every built-in rule file
must pass too. The number of instances per rule follows the hypothesis profile
(fewer with CI=true), at most 50.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from stitch.engine.cli import main
from stitch.engine.ir import Param, TensorType, Var
from stitch.engine.parse import parse_program
from stitch.engine.rules import RULES_DIR, load_rules, parse_rules
from stitch.engine.soundness import TOLERANCE, check_rule, check_rule_file, infer_type

HERE = Path(__file__).resolve().parent
SOUND = load_rules(HERE / "rules" / "sound.rules")
UNSOUND = load_rules(HERE / "rules" / "unsound.rules")
BUILTIN = sorted(RULES_DIR.glob("*.rules"))


def examples() -> int:
    # The profile conftest loaded (25 with CI=true), capped: ~100 rules are checked here.
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
    # log(a*b) = log a + log b only for positive a, b; elsewhere a side is nan and the input is skipped.
    assert check_rule(rule("rule l: log(mul(?a, ?b)) => add(log(?a), log(?b))"), examples()).status == "ok"
    # but sqrt(x*x) = x is false for negative x, where both sides are finite
    assert check_rule(rule("rule s: sqrt(mul(?x, ?x)) => ?x"), examples()).status == "unsound"


def test_conditions_steer_the_instances():
    r = rule("rule m: mean(?x, axes=[1]) => mul(sum(?x, axes=[1]), 0.25) where dim(?x, 1) == 4, rank(?x) == 2")
    assert check_rule(r, examples()).status == "ok"
    r = rule("rule a: sum(?x, axes=?ax) => sum(?x, axes=[0]) where ?ax == [0]")
    assert check_rule(r, examples()).status == "ok"


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
    bad = [v.render() for v in verdicts if v.status == "unsound"]
    assert not bad, "\n".join(bad)


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
    assert "0 unsound, 2 ok, 0 skipped" in out


def test_cli_exit_1_names_the_unsound_rule_and_its_line(tmp_path, capsys):
    path = write(tmp_path, "# a comment\nrule comm: add(?x, ?y) => add(?y, ?x)\nrule bad: sub(?x, ?y) => sub(?y, ?x)\n")
    assert main(["rules", "check", path, "--examples", "10"]) == 1
    out = capsys.readouterr().out
    assert f"{path}:2: comm: ok" in out
    assert f"{path}:3: bad: UNSOUND" in out and "counterexample:" in out
    assert "1 unsound, 1 ok, 0 skipped" in out


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
    import stitch.engine.soundness as soundness

    seen = []
    original = soundness._Drawer.slice_attrs

    def spy(self, p, t):
        drawn = original(self, p, t)
        seen.append((t.shape, drawn))
        return drawn

    monkeypatch.setattr(soundness._Drawer, "slice_attrs", spy)
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
