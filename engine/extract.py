"""Extraction basics: choose one e-node per e-class, and turn a choice back into a program.

`extract_tree` is the simple additive extractor (each e-node's own cost plus
its children's), used as a first guess and for testing that saturation
preserves meaning. Schedule extraction with the target's cost model builds on
the same `Choice` type.
"""

from __future__ import annotations

import math
from typing import Callable

from .check import check_func
from .egraph_data import EGraphData, ENode
from .graph import Graph
from .ir import Assign, Attr, Call, Const, DTypeName, Func, Param, Var

Choice = dict[str, ENode]  # e-class id -> the chosen e-node


def node_count_cost(node: ENode) -> float:
    return 0.0 if node.is_placement else 1.0


def extract_tree(data: EGraphData, cost: Callable[[ENode], float] = node_count_cost) -> Choice:
    """The cheapest tree-cost e-node of every e-class (Bellman-Ford over the e-graph)."""
    best: dict[str, float] = {cid: math.inf for cid in data.classes}
    choice: Choice = {}
    changed = True
    while changed:
        changed = False
        for cid, nodes in data.classes.items():
            for n in nodes:
                c = cost(n) + sum(best[k] for k in n.children)
                if c < best[cid]:
                    best[cid] = c
                    choice[cid] = n
                    changed = True
    return choice


def choice_to_func(data: EGraphData, choice: Choice, graph: Graph, name: str | None = None) -> Func:
    """The program a choice denotes, placements stripped: same params and results as `graph`."""
    names: dict[str, object] = {}
    body: list[Assign] = []

    def expr(cid: str):
        if cid in names:
            return names[cid]
        n = choice[cid]
        if n.is_placement:
            e = expr(n.children[0])
            names[cid] = e
            return e
        if n.op == "param":
            e = Var(n.attr("name"))
        elif n.op == "const":
            e = Const(typed_literal(n.attr("value"), n.attr("dtype")))
        else:
            args = tuple(expr(k) for k in n.children)
            attrs = tuple(Attr(k, DTypeName(v) if k == "dtype" else v) for k, v in n.attrs)
            var = f"t{len(body)}"
            body.append(Assign(var, Call(n.op, args, attrs)))
            e = Var(var)
        names[cid] = e
        return e

    returns = tuple(expr(r) for r in data.roots)
    params = tuple(Param(pn, graph.nodes[pid].type) for pn, pid in zip(graph.param_names, graph.params))
    return Func(name or graph.name, params, tuple(graph.output_types), tuple(body), returns)


def typed_literal(value: float, dtype: str):
    """A constant as the e-graph stores it (an f64) back as a literal of its dtype."""
    if dtype == "bool":
        return bool(value)
    if dtype in ("i32", "i64"):
        return int(value)
    return float(value)


def choice_to_graph(data: EGraphData, choice: Choice, graph: Graph) -> Graph:
    return check_func(choice_to_func(data, choice, graph))
