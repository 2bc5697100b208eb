"""No placement a rule proposes can crash the compiler.

Placement rules are sound by construction (a placement is the identity), so `stitch rules check`
passes every one of them; whatever they propose, compiling either uses it (and the program then
equals the reference) or refuses it with a reason (a StitchError). Never an internal error.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.interp import evaluate, random_inputs
from stitch.engine.ir.ops import BINARY, COMPARE, REDUCE, UNARY
from stitch.engine.ir.tolerance import differences
from stitch.engine.pipeline import compile_graph
from stitch.engine.rewrite.rules import builtin_rule_files, parse_rules
from stitch.engine.schedule.target import load_target
from stitch.lowering.execute import execute
from stitch.lowering.lower import lower
from stitch_testing import executes_like_the_reference, graphs

TARGETS = [load_target("cpu"), load_target("accel")]

# Each consumer, with the operand the rule re-places written {p}.
CONSUMERS = (
    [f"{op}({{p}})" for op in UNARY]
    + [f"{op}({{p}}, ?b)" for op in BINARY + COMPARE] + [f"{op}(?a, {{p}})" for op in BINARY + COMPARE]
    + [f"{op}({{p}}, axes=?ax, keepdims=?k)" for op in REDUCE]
    + ["matmul({p}, ?b)", "matmul(?a, {p})", "where({p}, ?a, ?b)", "where(?c, {p}, ?b)",
       "transpose({p}, perm=?pm)", "reshape({p}, shape=?s)", "broadcast_to({p}, shape=?s)", "cast({p}, dtype=?d)",
       "slice({p}, axes=?ax, starts=?st, ends=?en, steps=?sp)", "concat({p}, ?b, axis=?k)",
       "concat(?a, {p}, axis=?k)", "gather({p}, ?i, axis=?k)", "gather(?x, {p}, axis=?k)",
       "?f({p})", "?f({p}, ?b)", "?f(?a, {p})"]
)
CLASSES = (None, "elementwise", "reduction", "matmul", "injective", "layout", "movement", "input")


@st.composite
def placement_rules(draw):
    lines = []
    for i in range(draw(st.integers(1, 3))):
        consumer = draw(st.sampled_from(CONSUMERS))
        before = draw(st.sampled_from(("global", "shared", "local", "inline")))
        after = draw(st.sampled_from(("global", "shared", "local", "inline")))
        cls = draw(st.sampled_from(CLASSES))
        rule = f"rule user-{i}: {consumer.format(p=f'{before}(?p)')} => {consumer.format(p=f'{after}(?p)')}"
        conds = [f"{cls}(?p)"] if cls else []
        if after == "local" and draw(st.booleans()):
            conds.append("not_broadcast(?p)")  # without it, a consumer that can broadcast ?p is refused
        if conds:
            rule += " where " + ", ".join(conds)
        lines.append(rule)
    return "\n".join(lines) + "\n"


@settings(max_examples=40)
@given(placement_rules(), graphs(dtypes=("f32", "i32"), max_ops=6, max_rank=3, max_dim=4, movement=True),
       st.sampled_from(TARGETS), st.integers(0, 100))
def test_placement_rules_are_used_or_refused_never_a_crash(text, graph, target, seed):
    try:
        rules = parse_rules(text, "user.rules")
    except StitchError:
        return  # a pattern the language refuses (e.g. a placement the left side cannot bind)
    try:
        c = compile_graph(graph, builtin_rule_files() + [rules], target)
        program = lower(c)
    except StitchError as err:
        assert "internal" not in str(err)
        return
    executes_like_the_reference(program, graph, seed)


def test_the_reshape_rule_of_issue_15_is_used():
    """`reshape(global(?p), shape=?s) => reshape(local(?p), shape=?s) where matmul(?p)` crashed
    lowering (exit 3); the reshaped product is now kept on chip and read through the reshape."""
    from stitch.engine.ir.check import check_program
    from stitch.engine.ir.parse import parse_program

    rules = parse_rules("rule keep: reshape(global(?p), shape=?s) => reshape(local(?p), shape=?s) where matmul(?p)\n",
                        "user.rules")
    graph = next(iter(check_program(parse_program(
        "func f(a: f32[16, 8], b: f32[8, 12]) -> f32[4, 48] { return exp(reshape(matmul(a, b), shape=[4, 48])) }"
    )).values()))
    for target, rule_files in itertools.product(TARGETS, ([rules], builtin_rule_files() + [rules])):
        c = compile_graph(graph, rule_files, target)
        # alone the rule fuses the product into the reshape; with the built-in rules the exp joins
        assert len(c.schedule.kernels) == (1 if len(rule_files) > 1 else 2)
        kernel = next(k for k in c.schedule.kernels if any(i.node.op == "reshape" for i in k.instances))
        assert {i.node.op: i.hold.value for i in kernel.instances}["matmul"] == "local"
        inputs = random_inputs(graph, 1)
        outs, _ = execute(lower(c), inputs)
        assert differences(outs, evaluate(graph, inputs), graph) == []
