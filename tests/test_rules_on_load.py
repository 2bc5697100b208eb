"""A user's rule file is checked as it loads (issue 51 item 1, P13; engine/rewrite/check/on_load.py):
an unsound rule is refused with its counterexample through the API and the CLI, a rule that holds
only away from edge values needs the [unsafe-fp] tag, --trust-rules opts out, and verdicts are
cached by the rules' text."""

from __future__ import annotations

import pytest
import stitch
from stitch.engine.cli import main
from stitch.engine.ir.errors import StitchError
from stitch.engine.rewrite.check import on_load

PROGRAM = "func f(x: f32[4, 8], y: f32[4, 8]) -> f32[4] { return max(add(x, y), axes=[1]) }"
UNSOUND = ("rule bad-max-add: max(add(?x, ?y), axes=?ax, keepdims=?k) => "
           "add(max(?x, axes=?ax, keepdims=?k), max(?y, axes=?ax, keepdims=?k)) where same_shape(?x, ?y)\n")
EDGE = "rule sub-self{tag}: sub(?x, ?x) => mul(?x, 0.0)\n"  # -0.0 for x = -0.0, NaN for inf


def rules_file(tmp_path, text: str, name: str = "mine.rules"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_P13_an_unsound_user_rule_is_refused_with_its_counterexample(tmp_path, cache):
    path = rules_file(tmp_path, UNSOUND)
    with pytest.raises(StitchError, match=r"(?s)bad-max-add: UNSOUND.*counterexample.*--trust-rules"):
        stitch.compile(PROGRAM, rules=[path], cache_dir=cache)
    program = stitch.compile(PROGRAM, rules=[path], cache_dir=cache, trust_rules=True)  # at the user's word
    assert program.compiled.report.matches["bad-max-add"] >= 1


def test_P13_the_cli_refuses_it_and_trust_rules_opts_out(tmp_path, cache, capsys):
    ir = tmp_path / "f.ir"
    ir.write_text(PROGRAM)
    path = rules_file(tmp_path, UNSOUND)
    assert main(["run", str(ir), "--rules", path, "--cache-dir", str(cache)]) == 1
    assert "bad-max-add: UNSOUND" in capsys.readouterr().err
    assert main(["compile", str(ir), "--rules", path, "--trust-rules"]) == 0


def test_P13_a_rule_wrong_only_at_edge_values_needs_the_unsafe_fp_tag(tmp_path, cache):
    with pytest.raises(StitchError, match="HOLDS ONLY AWAY FROM EDGE VALUES"):
        stitch.compile(PROGRAM, rules=[rules_file(tmp_path, EDGE.format(tag=""))], cache_dir=cache)
    tagged = rules_file(tmp_path, EDGE.format(tag=" [unsafe-fp]"), "tagged.rules")
    stitch.compile(PROGRAM, rules=[tagged], cache_dir=cache)  # loads; used only with unsafe_fp
    stitch.compile(PROGRAM, rules=[tagged], cache_dir=cache, unsafe_fp=True)


def test_P13_verdicts_are_cached_by_the_rules_text(tmp_path, cache, monkeypatch):
    sound = rules_file(tmp_path, "rule twice: add(?x, ?x) => mul(?x, 2.0)\n")
    stitch.compile(PROGRAM, rules=[sound], cache_dir=cache)
    assert len(list((cache / "rules").glob("*.json"))) == 1
    monkeypatch.setattr(on_load, "check_rule_file", lambda *a: pytest.fail("checked again"))
    stitch.compile(PROGRAM, rules=[sound], cache_dir=cache)  # the same text: the cached verdict
    changed = rules_file(tmp_path, "rule twice: add(?x, ?x) => mul(2.0, ?x)\n")
    with pytest.raises(pytest.fail.Exception, match="checked again"):
        stitch.compile(PROGRAM, rules=[changed], cache_dir=cache)
