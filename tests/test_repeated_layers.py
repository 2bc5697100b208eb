"""Repeated structure compiled once: kernels of one shape priced once (engine/schedule/canonical.py).

A layer repeated on other weights forms kernels equal up to which e-classes they name. The search
prices the first and renames its plan for the others; the schedule must be the one pricing each
kernel apart gives, and every renamed plan the plan that kernel's own pricing finds."""

from __future__ import annotations

from dataclasses import replace

import pytest
import stitch_testing
from hypothesis import given, settings
from stitch.engine.ir.graph import Graph
from stitch.engine.pipeline import check_entry, compile_graph, read_program
from stitch.engine.rewrite.rules import builtin_rule_files
from stitch.engine.schedule import space as space_module
from stitch.engine.schedule.canonical import kernel_shape, renamed_cost
from stitch.engine.schedule.cost import kernel_cost
from stitch.engine.schedule.target import load_target
from stitch_testing import graphs

CPU, ACCEL = load_target("cpu"), load_target("accel")


def layers(n: int, rows: int = 128, hidden: int = 768, inner: int = 3072) -> str:
    """A pre-norm MLP block repeated `n` times, each on its own weights (compiled, not run: at a
    transformer's sizes, where each layer is kernels of its own)."""
    params = ", ".join(f"g{i}: f32[{hidden}], w{i}: f32[{hidden}, {inner}], v{i}: f32[{inner}, {hidden}]"
                       for i in range(n))
    body = []
    for i in range(n):
        h = f"h{i}" if i else "x"
        body += [f"  m{i} = mean({h}, axes=[-1], keepdims=true)",
                 f"  d{i} = sub({h}, m{i})",
                 f"  s{i} = mean(mul(d{i}, d{i}), axes=[-1], keepdims=true)",
                 f"  n{i} = mul(mul(d{i}, rsqrt(add(s{i}, 1e-5))), g{i})",
                 f"  u{i} = tanh(matmul(n{i}, w{i}))",
                 f"  h{i + 1} = add({h}, matmul(u{i}, v{i}))"]
    return (f"func block(x: f32[{rows}, {hidden}], {params}) -> f32[{rows}, {hidden}] {{\n"
            + "\n".join(body) + f"\n  return h{n}\n}}\n")


def doubled(graph: Graph) -> Graph:
    """`graph` twice, side by side: the second copy reads parameters of its own, and its float
    literals are others (as a quantized layer's scales are)."""
    n = len(graph.nodes)

    def attr(node, k, v):
        if node.op == "param" and k == "name":
            return v + "_2"
        if node.op == "const" and k == "value" and isinstance(v, float) and v == v and abs(v) < 1e30:
            return v * 1.5 + 0.25
        return v

    second = [replace(node, id=node.id + n, inputs=tuple(i + n for i in node.inputs),
                      name=node.name and node.name + "_2", attrs=tuple((k, attr(node, k, v)) for k, v in node.attrs))
              for node in graph.nodes]
    return Graph(graph.name, list(graph.nodes) + second, graph.params + [p + n for p in graph.params],
                 graph.outputs + [o + n for o in graph.outputs],
                 list(graph.param_names) + [f"{name}_2" for name in graph.param_names], dict(graph.symbols))


def compiled(graph: Graph, target, shapes: bool, monkeypatch):
    monkeypatch.setattr(space_module, "SHAPE_CACHE", shapes)
    priced = []
    monkeypatch.setattr(space_module, "kernel_cost",
                        lambda k, types, t, *variants: priced.append(k) or kernel_cost(k, types, t, *variants))
    return compile_graph(graph, builtin_rule_files(), target), len(priced)


@pytest.mark.parametrize("target", [CPU, ACCEL], ids=["cpu", "accel"])
def test_repeated_layers_get_the_schedule_pricing_each_kernel_gives(target, monkeypatch):
    graph = check_entry(read_program(layers(4)))
    apart, priced_apart = compiled(graph, target, False, monkeypatch)
    once, priced_once = compiled(graph, target, True, monkeypatch)
    assert once.schedule.kernels == apart.schedule.kernels
    assert once.cost.kernels == apart.cost.kernels
    assert priced_once < priced_apart / 3


def test_eight_layers_price_as_many_kernels_as_four(monkeypatch):
    _, four = compiled(check_entry(read_program(layers(4))), CPU, True, monkeypatch)
    _, eight = compiled(check_entry(read_program(layers(8))), CPU, True, monkeypatch)
    assert eight == four


@settings(max_examples=25, deadline=None)
@given(graphs())
def test_a_renamed_plan_is_the_plan_of_the_kernel_it_is_renamed_to(graph):
    """Every kernel the search formed for a program run twice side by side, priced apart, costs
    what the first kernel of its shape costs renamed to it."""
    twice = doubled(graph)
    for target in (CPU, ACCEL):
        c = compile_graph(twice, builtin_rule_files(), target)
        first: dict = {}
        for kernel in c.schedule.kernels:
            shaped = kernel_shape(kernel, c.data.types)
            if shaped is None:
                continue
            own = kernel_cost(kernel, c.data.types, target)
            if shaped[0] in first:
                seen, names = first[shaped[0]]
                assert renamed_cost(kernel_cost(seen, c.data.types, target), dict(zip(names, shaped[1]))) == own
            else:
                first[shaped[0]] = (kernel, shaped[1])


@settings(max_examples=100 if stitch_testing.LONG else 10, deadline=None)  # (each example compiles 4 times)
@given(graphs())
def test_a_program_twice_side_by_side_gets_the_schedule_forming_and_pricing_each_kernel_gives(graph):
    """Walks, joins and prices of the second copy come renamed from the first's (space.py): the
    schedule is the one the search finds with every kernel formed, joined and priced apart."""
    twice = doubled(graph)
    for target in (CPU, ACCEL):
        with pytest.MonkeyPatch.context() as mp:
            apart, _ = compiled(twice, target, False, mp)
            once, _ = compiled(twice, target, True, mp)
        assert once.schedule.kernels == apart.schedule.kernels
        assert once.cost.kernels == apart.cost.kernels


def test_kernels_reading_through_a_gather_have_no_shape():
    text = """func f(t: f32[16, 8], i: i64[4]) -> f32[4, 8] {
  return exp(gather(t, i, axis=0))
}
"""
    c = compile_graph(check_entry(read_program(text)), builtin_rule_files(), CPU)
    assert [kernel_shape(k, c.data.types) for k in c.schedule.kernels] == [None]


def test_a_literal_numbered_in_a_shape_comes_back_as_it_was():
    """canonical.py literal_key: -0.0 and 0.0, 1 and 1.0 and True are other literals; each comes back
    with its type and sign (a renamed kernel's literals are its own layer's)."""
    import math

    from stitch.engine.schedule.canonical import literal_key, literal_value

    values = [0.0, -0.0, 1, 1.0, True, 2.5, float("nan"), -math.inf, 10**20]
    assert len({literal_key(v) for v in values}) == len(values)
    for v in values:
        back = literal_value(literal_key(v))
        assert type(back) is type(v) and repr(back) == repr(v)
