"""What a new user asked of the IR (issue 51, item 3): inf, -inf and nan literals (P11), iota (P21) and
calls between the funcs of one file (P12), each through the CLI or the API, against the reference."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import stitch
from stitch.engine.cli import main
from stitch.engine.ir.check import check_program
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.parse import parse_program
from stitch.engine.pipeline import compile_graph, load_rule_files
from stitch.engine.rewrite.egraph import graph_to_egglog
from stitch.engine.schedule.target import load_target
from stitch.lowering.loops import print_loops
from stitch.lowering.lower import lower
from stitch.targets.c.source import c_source
from stitch_testing import EXAMPLES, needs_cc

NEWCOMER = Path(__file__).resolve().parent / "fixtures" / "newcomer"  # the new user's reproducers (issue 51)

# A causal softmax: -inf where a key comes after its query, nan and inf in outputs of their own.
CAUSAL = """
func causal(s: f32[2, 8, 8]) -> (f32[2, 8, 8], f32[2, 8], f32[2, 8]) {
  future = greater(iota(shape=[8, 8], axis=1), iota(shape=[8, 8], axis=0))
  masked = where(future, -inf, s)
  m = max(masked, axes=[-1], keepdims=true)
  e = exp(sub(masked, m))
  return div(e, sum(e, axes=[-1], keepdims=true)), maximum(sum(s, axes=[2]), nan), minimum(sum(s, axes=[2]), inf)
}
"""


def _write(tmp_path: Path, text: str, name: str = "p.ir") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _run_checks(capsys, path: str, tmp_path: Path, *extra: str) -> str:
    code = main(["run", path, "--check", "--cache-dir", str(tmp_path / "cache"), *extra])
    out = capsys.readouterr().out
    assert code == 0 and "check: outputs equal the reference within tolerance" in out, out
    return out


# -- P11: inf, -inf and nan ----------------------------------------------------------------------


@needs_cc
@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_nonfinite_literals_run_and_check_through_the_cli_P11(target, tmp_path, capsys):
    """P11: `where(keep, s, -inf)` was a syntax error at the '-'."""
    _run_checks(capsys, _write(tmp_path, CAUSAL), tmp_path, "--target", target)


def test_the_causal_reproducer_checks_and_runs_P11(tmp_path, capsys):
    """P11: the newcomer's causal_inf.ir (a bool mask and -inf) checks, and its outputs equal the reference."""
    path = NEWCOMER / "causal_inf.ir"
    assert main(["check", str(path)]) == 0
    _run_checks(capsys, str(path), tmp_path, "--target", "accel")


def test_nonfinite_literals_survive_the_egraph_and_reach_the_c_P11():
    """P11: the literals enter egglog as its own inf, -inf and NaN, come back out of extraction with
    their values, and print in the loops as themselves and in the C as math.h's INFINITY and NAN."""
    graph = check_program(parse_program(CAUSAL))["causal"]
    text, _ = graph_to_egglog(graph)
    assert "(Const -inf " in text and "(Const NaN " in text and "(Const inf " in text
    compiled = compile_graph(graph, load_rule_files([]), load_target("cpu"))
    loops = lower(compiled)
    printed = print_loops(loops)
    assert "-inf:f32" in printed and "nan:f32" in printed and " inf:f32" in printed
    source = c_source(loops)[0]
    assert "((float)(-INFINITY))" in source and "((float)(NAN))" in source and "((float)(INFINITY))" in source


def test_nonfinite_literals_are_refused_where_they_cannot_be_P11():
    """P11: inf in an integer context is an error at the literal; a name may not be inf or nan; a
    number too large for any float points at inf."""
    cases = {
        "func f(x: i32[2]) -> i32[2] { return add(x, inf) }": "literal inf is not an integer, but the operands are i32",
        "func f(nan: f32[2]) -> f32[2] { return nan }": "'nan' is a reserved word and cannot name a parameter",
        "func f(x: f32[2]) -> f32[2] { return add(x, 1e999) }": "write inf for an infinity",
        "func f(x: f32[2]) -> f32[2] { return add(x, -nan) }": "syntax error: unexpected 'nan'; expected 'inf'",
    }
    assert_refused(cases)


@needs_cc
def test_a_rule_on_literals_never_matches_a_nonfinite_one_P11(tmp_path, capsys):
    """P11: `rules check` draws a literal's value finite, so a rule that holds for every finite literal
    must not match inf or nan: sub(?c, ?c) => 0.0 would turn inf - inf (nan) into 0."""
    rules = tmp_path / "zero.rules"
    rules.write_text("rule sub-self-literal: sub(?c, ?c) => 0.0 where literal(?c), dtype(?c) == f32\n")
    path = _write(tmp_path, "func f(x: f32[4]) -> (f32[4], f32[4]) {\n"
                            "  return add(x, sub(inf, inf)), add(x, sub(2.5, 2.5))\n}\n")
    out = _run_checks(capsys, path, tmp_path, "--rules", str(rules))
    assert "out0: f32[4] min=nan" in out


# -- P21: iota -----------------------------------------------------------------------------------


IOTA = """
func picks(logits: f32[4, 6], labels: i64[4]) -> (f32[4], i32[4, 6], i64[3, 4, 5]) {
  hot = equal(iota(shape=[4, 6], axis=-1, dtype=i64), reshape(labels, shape=[4, 1]))
  return sum(where(hot, logits, 0.0), axes=[1]), iota(shape=[4, 6], axis=0), iota(shape=[3, 4, 5], axis=1, dtype=i64)
}
"""


def test_iota_is_each_elements_index_along_its_axis_P21():
    """P21: iota(shape, axis, dtype) is np.indices(shape)[axis]; a one-hot pick needs no index input."""
    graph = check_program(parse_program(IOTA))["picks"]
    logits = np.arange(24, dtype=np.float32).reshape(4, 6)
    labels = np.array([0, 5, 2, -1])
    got = evaluate(graph, {"logits": logits, "labels": labels})
    np.testing.assert_array_equal(got[0], np.array([0, 11, 14, 0], np.float32))  # -1 picks nothing
    np.testing.assert_array_equal(got[1], np.indices((4, 6), dtype=np.int32)[0])
    np.testing.assert_array_equal(got[2], np.indices((3, 4, 5))[1])
    assert got[1].dtype == np.int32 and got[2].dtype == np.int64


@needs_cc
@pytest.mark.parametrize("target", ["cpu", "accel"])
def test_iota_runs_and_checks_through_the_cli_P21(target, tmp_path, capsys):
    """P21: iota inlined into its reader (a compare, a one-hot pick) and written out as an output of its own."""
    _run_checks(capsys, _write(tmp_path, IOTA), tmp_path, "--target", target)
    assert main(["compile", _write(tmp_path, IOTA), "--emit", "loops"]) == 0
    assert re.search(r"out2\[.*\] = index\([^)]*p1\):i64\n", capsys.readouterr().out)


@needs_cc
def test_cross_entropy_takes_its_row_offsets_from_iota_P21(tmp_path):
    """P21: the newcomer's xent16.ir took its row offsets (0, 1000, ...) as an input; iota makes them."""
    text = """
func xent16(logits: f16[32, 1000], labels: i64[32]) -> (f32[], f16[32, 1000]) {
  m = max(logits, axes=[1], keepdims=true)
  z = sub(logits, m)
  lse = log(sum(exp(z), axes=[1]))
  offs = mul(iota(shape=[32], axis=0, dtype=i64), 1000)
  picked = gather(reshape(z, shape=[32000]), add(offs, labels), axis=0)
  rows = cast(sub(lse, picked), dtype=f32)
  return mean(rows), exp(sub(z, reshape(lse, shape=[32, 1])))
}
"""
    program = stitch.compile(text, cache_dir=tmp_path / "cache")
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((32, 1000)).astype(np.float16)
    labels = rng.integers(0, 1000, 32)
    loss, _ = program(logits=logits, labels=labels)
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    want = np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(32), labels])
    assert abs(float(loss) - want) < 1e-2


def test_iota_errors_name_the_attribute_P21():
    cases = {
        "iota(shape=[3, 4], axis=2)": "iota: axis 2 is out of range for a tensor of rank 2",
        "iota(shape=[3], axis=0, dtype=f32)": "iota: dtype must be i32 or i64, got f32",
        "iota(shape=[3])": "iota needs the attribute 'axis='",
        "iota(x, shape=[3], axis=0)": "iota takes 0 arguments, got 1",
    }
    assert_refused({f"func f(x: i32[3]) -> i32[3] {{ return {call} }}": message for call, message in cases.items()})


# -- P12: calls between funcs --------------------------------------------------------------------


TWO_FUNCS = """func g(a: f32[4]) -> f32[4] {
  return f(a, 2.0)
}
func f(a: f32[4], s: f32[]) -> f32[4] {
  b = mul(a, s)
  return neg(b)
}
"""


@needs_cc
def test_a_func_calls_another_of_its_file_P12(tmp_path, capsys):
    """P12: one func calling another was `unknown op 'f'`; it is inlined before saturation, so the
    schedule sees one func whose kernel holds the callee's ops."""
    path = _write(tmp_path, TWO_FUNCS)
    assert main(["check", path]) == 0
    assert capsys.readouterr().out == "func g(a: f32[4]) -> f32[4]\nfunc f(a: f32[4], s: f32[]) -> f32[4]\n"
    assert main(["compile", path]) == 0
    schedule = capsys.readouterr().out
    assert "mul(global a, 2.0)" in schedule and "neg(inline %0)" in schedule and "1 kernel(s)" in schedule
    _run_checks(capsys, path, tmp_path)
    _run_checks(capsys, path, tmp_path, "--entry", "f")


def test_the_two_funcs_reproducer_checks_P12(capsys):
    path = NEWCOMER / "twofuncs.ir"
    assert main(["check", str(path)]) == 0
    assert main(["eval", str(path), "--entry", "g", "--seed", "1"]) == 0


def test_the_example_with_a_call_equals_its_reference_P12():
    program = parse_program((EXAMPLES / "causal_attention.ir").read_text())
    graph = check_program(program)["causal_attention"]
    assert all(n.op != "row_softmax" for n in graph.nodes) and any(n.op == "exp" for n in graph.nodes)
    inputs = random_inputs(graph, seed=3)
    (got,) = evaluate(graph, inputs)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    s = q @ k.transpose(0, 2, 1) * np.float32(0.125)
    s = np.where(np.triu(np.ones((128, 128), bool), 1), -np.inf, s)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(got, (e / e.sum(axis=-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("text, message, at", [
    ("func f(a: f32[4]) -> f32[4] {\n  return f(a)\n}\n",
     "recursive call: 'f' calls 'f' (p.ir:2:10)", "p.ir:2:10"),
    ("func f(a: f32[4]) -> f32[4] {\n  return h(a)\n}\nfunc g(a: f32[4]) -> f32[4] {\n  return f(a)\n}\n"
     "func h(a: f32[4]) -> f32[4] {\n  return g(neg(a))\n}\n",
     "recursive call: 'f' calls 'h' (p.ir:2:10), 'h' calls 'g' (p.ir:8:10), 'g' calls 'f' (p.ir:5:10)", "p.ir:5:10"),
    ("func f(a: f32[4]) -> f32[4] {\n  return g(a, a)\n}\nfunc g(a: f32[4]) -> f32[4] {\n  return a\n}\n",
     "func 'g' takes 1 argument(s), got 2", "p.ir:2:10"),
    ("func f(a: f32[4]) -> f32[4] {\n  return g(cast(a, dtype=f64))\n}\nfunc g(a: f32[4]) -> f32[4] {\n  return a\n}\n",
     "argument 0 of the call to 'g' is f64[4], but its parameter 'a' is f32[4]", "p.ir:2:12"),
    ("func f(a: f32[4]) -> f32[4] {\n  return g(a)\n}\nfunc g(a: f32[4]) -> (f32[4], f32[4]) {\n  return a, a\n}\n",
     "func 'g' returns 2 values: only a func of one result can be called", "p.ir:2:10"),
])
def test_recursion_and_bad_calls_are_errors_naming_the_calls_P12(text, message, at, tmp_path, capsys):
    """P12: recursion is an error naming each call of the cycle at its file:line:col."""
    path = _write(tmp_path, text)
    assert main(["check", path]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{tmp_path / at}: error: ") and message.replace("p.ir", str(tmp_path / "p.ir")) in err, err


def test_rules_over_iota_are_checked_like_any_other_P21(tmp_path, capsys):
    """P21: `rules check` draws an iota's shape, axis and dtype; a rule that moves its axis is unsound."""
    rules = tmp_path / "iota.rules"
    rules.write_text("rule iota-axis: iota(axis=?a, shape=?s, dtype=?d) => iota(shape=?s, axis=0, dtype=?d)\n"
                     "rule iota-floor: maximum(iota(shape=?s, axis=?a, dtype=?d), 0)\n"
                     "  => iota(shape=?s, axis=?a, dtype=?d)\n")
    assert main(["rules", "check", str(rules), "--examples", "30"]) == 1
    out = capsys.readouterr().out
    assert "iota-axis: UNSOUND" in out and "iota-floor: ok" in out, out


def assert_refused(cases: dict[str, str]) -> None:
    """Each program text of `cases` is refused by the parser or the checker with its message."""
    for text, message in cases.items():
        with pytest.raises(StitchError) as err:
            check_program(parse_program(text))
        assert message in str(err.value), str(err.value)

