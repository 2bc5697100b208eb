"""The e-graph stage: program -> e-graph, analyses, saturation, limits, extraction."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.cli import main
from stitch.engine.ir.check import check_func, check_program
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.parse import parse_file, parse_program
from stitch.engine.ir.program import TensorType
from stitch.engine.ir.tolerance import differences
from stitch.engine.pipeline import load_rule_files, saturate_program
from stitch.engine.rewrite import saturate
from stitch.engine.rewrite.rules import builtin_rule_files, parse_rules
from stitch.engine.rewrite.saturate import EGraphRun, Limits
from stitch.engine.schedule.extract import choice_to_graph, extract_tree, improve_dag, reachable_classes, work_cost
from stitch.engine.schedule.target import load_target
from stitch_testing import graphs

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.ir"))
ALL_DTYPES = ("f16", "f32", "f64", "i8", "u8", "i32", "i64", "bool")


def graph_of(text: str):
    return check_func(parse_program(text).funcs[0])


def class_of_node(run: EGraphRun, node_id: int) -> str:
    sort, value = run.egraph.eval_expr(run.egraph.parse_program(f"(let $probe{node_id} $n{node_id})")[0].expr)
    return value


@settings(max_examples=30)
@given(graphs(dtypes=ALL_DTYPES, max_ops=8))
def test_analysis_types_equal_checker_types(graph):
    assert_analysis_types_equal_checker_types(graph)


@settings(max_examples=30)
@given(graphs(dtypes=ALL_DTYPES, max_ops=8, movement=True))
def test_analysis_types_equal_checker_types_with_movement_ops(graph):
    assert_analysis_types_equal_checker_types(graph)


def assert_analysis_types_equal_checker_types(graph):
    """The e-graph's shape and dtype analyses agree with the checker on every node."""
    run = EGraphRun(graph, [])
    run.run()
    for n in graph.nodes:
        (out,) = run.egraph.run_program(*run.egraph.parse_program(f"(extract (shape $n{n.id}))"))
        dims = [int(tok) for tok in str(out).replace("(vec-of", "").replace("(vec-empty", "").strip(" ()\n").split()]
        assert tuple(dims) == n.type.shape, (n, str(out))
        (out,) = run.egraph.run_program(*run.egraph.parse_program(f"(extract (dtype $n{n.id}))"))
        assert str(out).strip() == f'"{n.type.dtype}"', (n, str(out))


def assert_same_outputs(g1, g2, inputs):
    """`g2` (rewritten) computes what `g1` computes, within the tolerance `run --check` uses."""
    problems = differences(evaluate(g2, inputs), evaluate(g1, inputs), g1)
    assert not problems, problems


@settings(max_examples=25)
@given(graphs(dtypes=("f32", "f64", "i32"), max_ops=8), st.integers(0, 2**16))
def test_saturate_then_extract_preserves_meaning(graph, seed):
    assert_saturate_then_extract_preserves_meaning(graph, seed)


@settings(max_examples=25)
@given(graphs(dtypes=("f32", "f64", "i32"), max_ops=8, movement=True), st.integers(0, 2**16))
def test_saturate_then_extract_preserves_meaning_with_movement_ops(graph, seed):
    assert_saturate_then_extract_preserves_meaning(graph, seed)


def assert_saturate_then_extract_preserves_meaning(graph, seed):
    """Built-in rules + the trivial extractor give a program equal to the reference."""
    run, report = saturate_program(graph, builtin_rule_files())
    data = run.data()
    extracted = choice_to_graph(data, extract_tree(data), graph)
    assert extracted.output_types == graph.output_types
    assert_same_outputs(graph, extracted, random_inputs(graph, seed))


def _dag_cost(data, choice, cost):
    return sum(cost(choice[c]) for c in reachable_classes(data, choice))


@settings(max_examples=25)
@given(graphs(dtypes=("f32",), max_ops=12, max_rank=3, max_dim=8), st.integers(0, 2**16))
def test_the_dag_pass_lowers_the_dag_cost_and_keeps_the_meaning(graph, seed):
    """The extraction start's DAG pass (each class counted once) never raises that cost, and the
    program it picks means what the input meant."""
    run, _ = saturate_program(graph, builtin_rule_files())
    data = run.data()
    cost = work_cost(data, load_target("cpu"))
    tree = extract_tree(data, cost)
    dag = improve_dag(data, tree, cost)
    assert _dag_cost(data, dag, cost) <= _dag_cost(data, tree, cost) + 1e-6
    assert_same_outputs(graph, choice_to_graph(data, dag, graph), random_inputs(graph, seed))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_saturate_within_a_second(path):
    graph = next(iter(__import__("stitch.engine.ir.check", fromlist=["x"]).check_program(parse_file(path)).values()))
    run, report = saturate_program(graph, builtin_rule_files())
    assert report.stop_reason == "saturated", report.render()
    assert report.seconds < 1.0
    assert report.enodes > len(graph.nodes)  # the rules added alternatives
    data = run.data()
    assert data.enode_count == report.enodes


def _examples_data(paths) -> list:
    out = []
    for path in paths:
        graph = next(iter(check_program(parse_file(path)).values()))
        run, _ = saturate_program(graph, builtin_rule_files())
        out.append((graph.name, run.data()))
        run.release()
    return out


def test_a_released_runs_rules_start_the_next_run_which_saturates_as_a_fresh_e_graph(monkeypatch):
    """The second run of the same rules on a thread starts from the first's loaded e-graph (no prelude,
    no rules loaded again), and every run, after any other program, reads back the e-graph a fresh
    e-graph would have made: the same classes, e-nodes in the same order, types and roots."""
    some = EXAMPLES[::3]
    fresh = {}
    for path in some:
        graph = next(iter(check_program(parse_file(path)).values()))
        fresh[graph.name] = EGraphRun(graph, builtin_rule_files())  # never released: a fresh e-graph each
        fresh[graph.name].run()
        fresh[graph.name] = fresh[graph.name].data()
    loads = []
    real = saturate.eb.EGraph
    monkeypatch.setattr(saturate.eb, "EGraph", lambda: loads.append(1) or real())
    saturate._LOADED.idle.clear()
    for name, data in _examples_data(some) + _examples_data(reversed(some)):
        want = fresh[name]
        assert (data.classes, data.types, data.roots) == (want.classes, want.types, want.roots), name
    assert len(loads) == 1


def test_loaded_rules_are_per_thread_and_rule_set_and_reused_only_once_released(monkeypatch):
    graph = graph_of("func f(x: f32[4]) -> f32[4] { return mul(neg(neg(x)), 1.0) }")
    ac = [parse_rules(AC_RULES, "ac.rules")]
    saturate._LOADED.idle.clear()
    for rules in (builtin_rule_files(), ac, builtin_rule_files()):
        run, _ = saturate_program(graph, rules)
        run.release()
    assert len(saturate._LOADED.idle) == 2  # the two rule sets, each loaded once
    seen = []

    def other_thread():  # egglog's e-graphs belong to their thread: another thread loads its own
        run, report = saturate_program(graph, builtin_rule_files())
        seen.append((report.stop_reason, len(saturate._LOADED.idle)))
        run.release()

    worker = threading.Thread(target=other_thread)
    worker.start()
    worker.join()
    assert seen == [("saturated", 0)] and len(saturate._LOADED.idle) == 2
    run, _ = saturate_program(graph, builtin_rule_files())  # never released (as after a failed run): not reused
    assert len(saturate._LOADED.idle) == 1
    again, report = saturate_program(graph, builtin_rule_files())
    assert report.stop_reason == "saturated" and again.egraph is not run.egraph
    monkeypatch.setattr(saturate, "LOADED_RUNS", 1)  # past its runs a loaded e-graph is dropped
    again.release()
    assert len(saturate._LOADED.idle) == 1


def sum_program(n: int) -> str:
    params = ", ".join(f"x{i}: f32[4]" for i in range(n))
    expr = "x0"
    for i in range(1, n):
        expr = f"add({expr}, x{i})"
    return f"func s({params}) -> f32[4] {{ return {expr} }}"


AC_RULES = """
rule add-comm:   add(?a, ?b) => add(?b, ?a)
rule add-assoc:  add(?a, add(?b, ?c)) => add(add(?a, ?b), ?c)
rule add-assoc2: add(add(?a, ?b), ?c) => add(?a, add(?b, ?c))
"""


def test_ac_on_a_30_term_sum_stops_at_the_node_limit():
    graph = graph_of(sum_program(30))
    run = EGraphRun(graph, [parse_rules(AC_RULES, "ac.rules")])
    report = run.run(Limits(iterations=100, nodes=5_000, seconds=30.0, match_limit=500))
    assert report.stop_reason == "node limit"
    assert report.enodes > 5_000
    assert report.matches["add-comm"] > 0 and report.matches["add-assoc"] > 0
    text = report.render()
    assert "node limit" in text and "add-assoc2" in text


def test_ac_stops_at_the_iteration_and_time_limits():
    graph = graph_of(sum_program(30))
    report = EGraphRun(graph, [parse_rules(AC_RULES, "ac.rules")]).run(Limits(iterations=3, nodes=10**7))
    assert (report.stop_reason, report.iterations) == ("iteration limit", 3)
    report = EGraphRun(graph, [parse_rules(AC_RULES, "ac.rules")]).run(
        Limits(iterations=1000, nodes=10**7, seconds=0.05)
    )
    assert report.stop_reason == "time limit"


def test_back_off_keeps_each_step_bounded():
    """With a small match limit, one step cannot add more than rules x limit matches."""
    graph = graph_of(sum_program(30))
    run = EGraphRun(graph, [parse_rules(AC_RULES, "ac.rules")])
    report = run.run(Limits(iterations=4, nodes=10**7, seconds=30.0, match_limit=50))
    assert report.enodes < 2_000


def test_saturation_reaches_a_fixpoint_and_says_so():
    graph = graph_of("func f(x: f32[4]) -> f32[4] { return mul(neg(neg(x)), 1.0) }")
    run, report = saturate_program(graph, load_rule_files([], builtin=True))
    assert report.stop_reason == "saturated"
    assert report.matches["neg-neg"] >= 1 and report.matches["mul-one"] >= 1
    data = run.data()
    choice = extract_tree(data)
    root = data.roots[0]
    assert choice[root].op == "param"  # mul(neg(neg(x)), 1) == x


def test_placements_stay_distinct_from_values():
    """inline(p) and global(p) are separate e-classes; the consumer's class holds both forms."""
    graph = graph_of("func f(x: f32[4]) -> f32[4] { return exp(neg(x)) }")
    run, _ = saturate_program(graph, load_rule_files([], builtin=True))
    data = run.data()
    root = data.classes[data.roots[0]]
    placements = sorted(data.classes[n.children[0]][0].op for n in root)
    assert placements == ["global", "inline"]
    for cid, nodes in data.classes.items():
        kinds = {n.is_placement for n in nodes}
        assert len(kinds) == 1, f"e-class {cid} mixes a placement with a value"


def test_op_variable_rule_expands_per_family():
    rf = parse_rules("rule f: ?f(global(?p)) => ?f(inline(?p)) where elementwise(?p)", "u.rules")
    graph = graph_of("func f(x: f32[4], y: f32[4]) -> f32[4] { return tanh(exp(add(x, y))) }")
    run, report = saturate_program(graph, [rf])
    assert report.matches["f"] >= 2
    data = run.data()
    inlined = sorted(data.classes[n.children[0]][0].op for ns in data.classes.values() for n in ns if n.op == "inline")
    assert inlined == ["add", "exp"]  # tanh(exp) and exp(add); add reads params, which are not elementwise


def test_conditions_filter_matches():
    rf = parse_rules(
        """
rule big:    exp(?x) => exp(?x) where rank(?x) >= 2, dim(?x, -1) == 8, size(?x) == 32
rule small:  exp(?x) => exp(?x) where rank(?x) < 2
rule isf64:  exp(?x) => exp(?x) where dtype(?x) == f64
rule shp:    exp(?x) => exp(?x) where shape(?x) == [4, 8]
rule space:  sum(?x, axes=?ax) => sum(?x, axes=?ax) where space(?x) == [4, 8], len(?ax) == 1
rule space2: exp(?x) => exp(?x) where space(?x) == [4]
""",
        "c.rules",
    )
    graph = graph_of("func f(x: f32[4, 8]) -> (f32[4, 8], f32[4]) { return exp(x), sum(exp(x), axes=[1]) }")
    _, report = saturate_program(graph, [rf])
    assert report.matches["big"] >= 1 and report.matches["shp"] >= 1 and report.matches["space"] >= 1
    assert report.matches["small"] == 0 and report.matches["isf64"] == 0 and report.matches["space2"] == 0


def test_iteration_space_of_reductions_and_matmuls():
    graph = graph_of("func f(x: f32[4, 8], w: f32[8, 3]) -> (f32[4], f32[4, 3]) "
                     "{ return sum(x, axes=[1]), matmul(x, w) }")
    run = EGraphRun(graph, [])
    run.run()
    s, m = graph.outputs
    for check in (f"(has-space $n{s} (vec-of 4 8))", f"(has-space $n{m} (vec-of 4 3 8))"):
        run.egraph.run_program(*run.egraph.parse_program(f"(check {check})"))
    with pytest.raises(Exception):
        run.egraph.run_program(*run.egraph.parse_program(f"(check (has-space $n{s} (vec-of 4)))"))


def test_compile_cli_prints_the_report_and_writes_dot(tmp_path, capsys):
    dot = tmp_path / "g.dot"
    assert main(["compile", str(EXAMPLES[0].parent / "layernorm.ir"), "--emit", "egraph", "--dot", str(dot)]) == 0
    out = capsys.readouterr().out
    assert "stopped: saturated" in out and "e-nodes" in out and "inline-injective" in out
    assert dot.read_text().startswith("digraph")


def test_compile_cli_user_rules_only(tmp_path, capsys):
    rules = tmp_path / "mine.rules"
    rules.write_text("rule twice-neg: neg(neg(?x)) => ?x\n")
    assert main(["compile", str(EXAMPLES[0].parent / "mlp.ir"), "--emit", "egraph", "--no-builtin-rules",
                 "--rules", str(rules)]) == 0
    out = capsys.readouterr().out
    assert "rulesets: mine" in out and "twice-neg" in out and "fusion" not in out


def test_compile_cli_bad_rule_file_points_into_it(tmp_path, capsys):
    rules = tmp_path / "bad.rules"
    rules.write_text("# comment\nrule r: add(?x, ?y) => mul(?x, ?z)\n")
    assert main(["compile", str(EXAMPLES[0].parent / "mlp.ir"), "--rules", str(rules)]) == 1
    err = capsys.readouterr().err
    assert f"{rules}:2:32" in err and "?z" in err and "Traceback" not in err


def test_right_side_cannot_be_a_bare_placement():
    from stitch.engine.ir.errors import StitchError

    with pytest.raises(StitchError, match="bare placement"):
        parse_rules("rule bad: exp(?x) => global(exp(?x))", "p.rules")


def test_integer_literals_beyond_float64_survive_the_egraph():
    """The e-graph keeps literals as f64; INT64_MAX must still come back exact (it wrapped to INT64_MIN)."""
    from stitch.engine.api import compile as compile_program
    from stitch.lowering.execute import execute

    text = "func f(x: i64[3]) -> i64[3] { return neg(add(9223372036854775807, x)) }"
    program = compile_program(text, target="accel")
    inputs = {"x": np.array([0, 1, 5], np.int64)}
    want = evaluate(program.graph, inputs)[0]
    np.testing.assert_array_equal(execute(program.loops, inputs)[0][0], want)
    assert list(want) == [-(2**63) + 1, -(2**63), 2**63 - 4]  # wraps as numpy does


def test_integer_literals_an_f64_cannot_tell_apart_are_an_error(tmp_path, capsys):
    path = tmp_path / "close.ir"
    path.write_text("func f(x: i64[3]) -> i64[3] {\n"
                    "  return sub(add(x, 9223372036854775807), 9223372036854775806)\n}\n")
    assert main(["compile", str(path)]) == 1
    err = capsys.readouterr().err
    assert "too close to tell apart" in err and "close.ir:2:" in err


# -- slice, concat, gather in the e-graph ----------------------------------------------------

MOVES = """func f(x: f32[4, 6], y: f32[2, 6], i: i32[3]) -> (f32[10, 6], f32[4, 6], f32[3, 6], f32[2, 3]) {
  c = concat(x, y, x, axis=-2)
  d = concat(x, axis=1)
  g = gather(c, i, axis=0)
  s = slice(y, axes=[1], starts=[-6], ends=[100], steps=[2])
  return c, d, g, s
}"""


def test_movement_ops_enter_in_normal_form_with_variadic_concat_left_nested():
    graph = graph_of(MOVES)
    run = EGraphRun(graph, [])
    run.run()
    data = run.data()
    c, d, g, s = data.roots
    (outer,) = data.classes[c]
    assert (outer.ctor, outer.op, outer.attrs) == ("Concat", "concat", (("axis", 0),))
    inner_edge, x_edge = outer.children
    (inner,) = [n for n in data.classes[data.classes[inner_edge][0].children[0]] if n.op == "concat"]
    assert data.classes[inner_edge][0].op == "global" and data.types[inner_edge] == TensorType("f32", (6, 6))
    assert [data.classes[data.classes[k][0].children[0]][0].attr("name") for k in inner.children] == ["x", "y"]
    assert data.classes[data.classes[x_edge][0].children[0]][0].attr("name") == "x"
    assert data.classes[d][0].op == "param"  # a one-operand concat is its operand
    (gather,) = data.classes[g]
    assert (gather.ctor, len(gather.children), gather.attrs) == ("Gather", 2, (("axis", 0),))
    assert data.types[gather.children[1]] == TensorType("i32", (3,))
    (sl,) = data.classes[s]
    assert sl.attrs == (("axes", (1,)), ("starts", (0,)), ("ends", (6,)), ("steps", (2,)))
    assert [data.types[r] for r in data.roots] == graph.output_types


def test_movement_ops_are_injective_and_have_their_shape_as_space():
    graph = graph_of(MOVES)
    run = EGraphRun(graph, [])
    run.run()
    for n in graph.nodes:
        if n.op in ("slice", "gather") or (n.op == "concat" and len(n.inputs) > 1):
            shape = " ".join(map(str, n.type.shape))
            for check in (f"(is-injective $n{n.id})", f"(is-movement $n{n.id})",
                          f"(has-space $n{n.id} (vec-of {shape}))"):
                run.egraph.run_program(*run.egraph.parse_program(f"(check {check})"))
    x = graph.params[0]
    with pytest.raises(Exception):
        run.egraph.run_program(*run.egraph.parse_program(f"(check (is-injective $n{x}))"))


def test_extraction_prints_nested_concats_back():
    graph = graph_of(MOVES)
    run = EGraphRun(graph, [])
    run.run()
    data = run.data()
    extracted = choice_to_graph(data, extract_tree(data), graph)
    assert [n.op for n in extracted.nodes].count("concat") == 2  # concat(x, y, x) as concat(concat(x, y), x)
    inputs = random_inputs(graph, 1)
    for a, b in zip(evaluate(graph, inputs), evaluate(extracted, inputs), strict=True):
        np.testing.assert_array_equal(a, b)


def test_rules_over_movement_ops_fire_and_keep_meaning():
    rf = parse_rules(
        """
rule cast-gather: cast(gather(?x, ?i, axis=?k), dtype=?d) => gather(cast(?x, dtype=?d), ?i, axis=?k)
rule neg-concat3: neg(concat(?a, ?b, ?c, axis=0)) => concat(neg(?a), neg(?b), neg(?c), axis=0)
rule slice-t:     slice(transpose(?x, perm=[1, 0]), axes=[0], starts=?s, ends=?e, steps=?t)
                    => transpose(slice(?x, axes=[1], starts=?s, ends=?e, steps=?t), perm=[1, 0])
rule first-row:   slice(?x, axes=[0], starts=[0], ends=[1]) => ?x where rank(?x) == 9
rule moved:       exp(?x) => exp(?x) where movement(?x), injective(?x)
rule not-moved:   exp(?x) => exp(?x) where movement(?x), rank(?x) == 5
""",
        "m.rules",
    )
    graph = graph_of("""func f(x: f32[4, 6], y: f32[2, 6], i: i64[3]) -> (f64[3, 6], f32[10, 6], f32[2, 4], f32[3, 6]) {
      c = concat(x, y, x, axis=0)
      return cast(gather(c, i, axis=0), dtype=f64), neg(c),
             slice(transpose(x, perm=[1, 0]), axes=[0], starts=[1], ends=[6], steps=[3]), exp(gather(x, i, axis=0))
    }""")
    run, report = saturate_program(graph, [rf])
    assert report.stop_reason == "saturated"
    for name in ("cast-gather", "neg-concat3", "slice-t", "moved"):
        assert report.matches[name] >= 1, name
    assert report.matches["first-row"] == 0 and report.matches["not-moved"] == 0
    data = run.data()
    rewritten = {n.op for cid in data.roots for n in data.classes[cid]}
    assert {"gather", "concat", "transpose"} <= rewritten
    extracted = choice_to_graph(data, extract_tree(data), graph)
    assert_same_outputs(graph, extracted, random_inputs(graph, 2))


def test_op_variables_expand_to_concat_and_gather_with_their_axis():
    rf = parse_rules("rule f: ?f(global(?p), ?b) => ?f(inline(?p), ?b) where elementwise(?p)", "u.rules")
    graph = graph_of("""func f(x: f32[4], y: f32[2], i: i32[3]) -> (f32[6], f32[3]) {
      return concat(exp(x), y, axis=-1), gather(neg(x), i, axis=0)
    }""")
    run, report = saturate_program(graph, [rf])
    assert report.matches["f"] >= 2
    data = run.data()
    for root, op in zip(data.roots, ("concat", "gather")):
        forms = [n for n in data.classes[root] if n.op == op]
        assert sorted(data.classes[n.children[0]][0].op for n in forms) == ["global", "inline"]
        assert {n.attrs for n in forms} == {(("axis", 0),)}


REST_PROGRAM = """func f(x: f32[4, 6], y: f32[6, 4]) -> (f32[6, 4], f32[24], f32[2, 4, 6], f32[4, 6], f32[2, 6]) {
  return transpose(exp(x), perm=[1, 0]), reshape(exp(x), shape=[24]), broadcast_to(exp(x), shape=[2, 4, 6]),
         cast(exp(x), dtype=f32), slice(exp(x), axes=[0], starts=[1], ends=[3])
}"""


def test_an_op_variable_with_rest_matches_ops_with_attributes_and_keeps_them():
    """`?f(.., global(?p), ..)` fires on transpose, reshape, broadcast_to, cast and slice (which an op
    variable without `..` never matches), and the right side keeps each op's attributes."""
    rf = parse_rules("rule f: ?f(.., global(?p), ..) => ?f(.., inline(?p), ..) where unary(?p)", "u.rules")
    graph = graph_of(REST_PROGRAM)
    run, report = saturate_program(graph, [rf])
    data = run.data()
    for root, op in zip(data.roots, ("transpose", "reshape", "broadcast_to", "cast", "slice")):
        forms = [n for n in data.classes[root] if n.op == op]
        assert sorted(data.classes[n.children[0]][0].op for n in forms) == ["global", "inline"], op
        assert len({n.attrs for n in forms}) == 1, op  # the attributes travel unchanged
    extracted = choice_to_graph(data, extract_tree(data), graph)
    assert_same_outputs(graph, extracted, random_inputs(graph, 3))
    without_rest = parse_rules("rule f: ?f(global(?p)) => ?f(inline(?p)) where unary(?p)", "u.rules")
    assert saturate_program(graph, [without_rest])[1].matches["f"] == 0


def test_rest_on_both_sides_matches_every_operand_and_keeps_the_others_placements():
    rf = parse_rules("""
rule first: ?f(.., global(?p), ..) => ?f(.., inline(?p), ..) where unary(?p), binary(?f)
rule then:  ?f(.., global(?p), ..) => ?f(.., shared(?p), ..) where input(?p), binary(?f)
""", "u.rules")
    graph = graph_of("func f(x: f32[4], y: f32[4]) -> f32[4] { return sub(exp(x), y) }")
    run, report = saturate_program(graph, [rf])
    assert report.matches["first"] >= 1 and report.matches["then"] >= 1
    data = run.data()
    edges = {tuple(data.classes[c][0].op if data.classes[c][0].is_placement else "?" for c in n.children)
             for n in data.classes[data.roots[0]] if n.op == "sub"}
    # y shared with exp(x) still inline: the operand `..` left out kept its placement
    assert ("inline", "shared") in edges and ("global", "shared") in edges


def test_operands_condition_and_classes_narrow_an_op_variable():
    rf = parse_rules("""
rule two:   ?f(.., global(?p), ..) => ?f(.., inline(?p), ..) where unary(?p), operands(?f) == 2
rule shape: ?f(global(?p), ..) => ?f(inline(?p), ..) where unary(?p), layout(?f)
""", "u.rules")
    graph = graph_of("func f(x: f32[4], y: f32[4]) -> (f32[4], f32[4]) { return add(exp(x), y), "
                     "where(less(x, y), exp(y), x) }")
    run, report = saturate_program(graph, [rf])
    assert report.matches["two"] >= 1 and report.matches["shape"] == 0
    data = run.data()
    inlined_into = {n.op for ns in data.classes.values() for n in ns
                    if any(data.classes[c][0].op == "inline" for c in n.children)}
    assert inlined_into == {"add"}  # add's exp(x), not where's exp(y): where has three operands


def test_not_broadcast_holds_where_the_consumer_reads_its_operand_once_per_element():
    rf = parse_rules("rule f: ?f(.., global(?m), ..) => ?f(.., local(?m), ..) where matmul(?m), not_broadcast(?m)",
                     "u.rules")
    graph = graph_of("""func f(a: f32[1, 8], b: f32[8, 6], x: f32[4, 6]) -> (f32[4, 6], f32[1, 6], f32[3, 1, 6]) {
      p = matmul(a, b)
      return add(x, p), exp(p), broadcast_to(p, shape=[3, 1, 6])
    }""")
    run, _ = saturate_program(graph, [rf])
    data = run.data()
    local_into = {n.op for ns in data.classes.values() for n in ns
                  if any(data.classes[c][0].op == "local" for c in n.children)}
    assert local_into == {"exp"}  # add and broadcast_to broadcast the [1, 6] product


SCALE_TWICE = "rule scale-twice: mul(mul(?x, ?a), ?b) => mul(?x, mul(?a, ?b)) where scalar(?a), scalar(?b)"


@pytest.mark.parametrize("dtype, a, b, folded", [
    ("f32", "3.0", "0.5", 1.5),
    ("f64", "-2.0", "0.25", -0.5),
    ("f16", "3.0", "0.5", 1.5),
    ("f32", "1e30", "1e30", None),  # over f32's largest: the dtype's product is inf
    ("f16", "300.0", "300.0", None),  # 90000 is over f16's 65504
    ("f32", "1e-30", "1e-30", None),  # under f32's smallest normal
    ("f32", "0.0", "-1.0", None),  # -0.0, which an f64 in the e-graph cannot tell from 0.0
    ("i32", "3", "5", None),  # integer arithmetic is not folded
])
def test_literal_arithmetic_a_rule_writes_folds_into_a_literal(dtype, a, b, folded):
    """A rule's right side may multiply two scalars (`mul(?a, ?b)`); where both are literals the
    analysis makes the product a literal of the dtype, only where it is a normal number of it."""
    graph = graph_of(f"func f(x: {dtype}[4]) -> {dtype}[4] {{ return mul(mul(x, {a}), {b}) }}")
    run, report = saturate_program(graph, [parse_rules(SCALE_TWICE, "s.rules")])
    assert report.matches["scale-twice"] >= 1
    data = run.data()
    consts = {n.attr("value") for ns in data.classes.values() for n in ns if n.op == "const"}
    assert consts == {float(a), float(b)} | ({folded} if folded is not None else set()), consts
    extracted = choice_to_graph(data, extract_tree(data), graph)
    if folded is not None:  # mul(x, 1.5): one multiply, of the folded literal
        assert [n.op for n in extracted.nodes if n.op not in ("param", "const")] == ["mul"]
    assert_same_outputs(graph, extracted, random_inputs(graph, 3))


@pytest.mark.parametrize("rule, program, folded", [
    ("add(add(?x, ?a), ?b) => add(?x, add(?a, ?b))", "add(add(x, 3.0), 0.5)", 3.5),
    ("add(sub(?x, ?a), ?b) => add(?x, sub(?b, ?a))", "add(sub(x, 3.0), 0.5)", -2.5),
    ("mul(div(?x, ?a), ?b) => mul(?x, div(?b, ?a))", "mul(div(x, 4.0), 3.0)", 0.75),
])
def test_sums_differences_and_quotients_of_literals_fold_too(rule, program, folded):
    rf = parse_rules(f"rule r: {rule} where scalar(?a), scalar(?b)", "r.rules")
    graph = graph_of(f"func f(x: f32[4]) -> f32[4] {{ return {program} }}")
    run, report = saturate_program(graph, [rf])
    data = run.data()
    assert report.matches["r"] >= 1
    assert folded in {n.attr("value") for ns in data.classes.values() for n in ns if n.op == "const"}
    extracted = choice_to_graph(data, extract_tree(data), graph)
    assert len([n for n in extracted.nodes if n.op not in ("param", "const")]) == 1
    assert_same_outputs(graph, extracted, random_inputs(graph, 4))


@pytest.mark.parametrize("condition, scaled", [
    ("value(?c) > 0", {0}),
    ("value(?c) > -0.0", {0}),  # compares as 0.0 does
    ("value(?c) < 0", {1}),
    ("value(?c) == 2.5", {0}),
    ("value(?c) >= -2.5, value(?c) < 1", {1}),
    ("literal(?c)", {0, 1}),
    ("scalar(?c)", {0, 1, 2}),
])
def test_value_conditions_match_literals_in_their_range_only(condition, scaled):
    """`literal(?c)` holds where ?c's e-class holds a literal, `value(?c)` compares that literal's
    value; neither holds for a scalar parameter, whose value is not known at compile time."""
    graph = graph_of("func f(x: f32[4], s: f32[]) -> (f32[4], f32[4], f32[4]) "
                     "{ return relu(mul(x, 2.5)), relu(mul(x, -2.5)), relu(mul(x, s)) }")
    rf = parse_rules(f"rule r: relu(mul(?x, ?c)) => mul(relu(?x), ?c) where {condition}", "r.rules")
    run, _ = saturate_program(graph, [rf])
    data = run.data()
    rewritten = {i for i, root in enumerate(data.roots) if any(n.op == "mul" for n in data.classes[root])}
    assert rewritten == scaled


def test_the_default_node_and_time_limits_grow_with_the_program():
    """Limits.for_program: 20,000 e-nodes and 10 s, or 8 e-nodes and 5 ms per op where that is more;
    limits given are kept."""
    from stitch.engine.rewrite.limits import Limits

    assert (Limits().for_program(100).nodes, Limits().for_program(100).seconds) == (20_000, 10.0)
    assert (Limits().for_program(4000).nodes, Limits().for_program(4000).seconds) == (32_000, 20.0)
    assert Limits(nodes=50, seconds=0.25).for_program(4000) == Limits(nodes=50, seconds=0.25)
