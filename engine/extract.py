"""Extraction basics: choose one e-node per e-class, and turn a choice back into a program.

`extract_tree` is the simple additive extractor (each e-node's own cost plus
its children's), used as a first guess and for testing that saturation
preserves meaning. Schedule extraction with the target's cost model builds on
the same `Choice` type.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from .check import check_func
from .egraph_data import EGraphData, ENode
from .graph import Graph
from .ir import Assign, Attr, Call, Const, DTypeName, Func, Param, Var

if TYPE_CHECKING:
    from .cost import ScheduleCost
    from .schedule import Schedule

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


# ---------------------------------------------------------------------------
# Schedule extraction: the cheapest choice under the target's cost model.
#
# A schedule's cost is not a sum over a tree (launches, footprints and shared
# reads depend on the whole grouping), so it is priced whole (`cost.py`). Small
# e-graphs are searched exhaustively; larger ones start from additive guesses
# (all-global, and most-fused) and improve by coordinate descent, one e-class
# at a time.


def reachable_classes(data: EGraphData, choice: Choice | None = None) -> list[str]:
    """E-classes reachable from the roots: through every e-node, or through `choice` only."""
    seen: dict[str, None] = {}
    stack = list(reversed(data.roots))
    while stack:
        cid = stack.pop()
        if cid in seen:
            continue
        seen[cid] = None
        nodes = [choice[cid]] if choice is not None else data.classes[cid]
        for n in nodes:
            stack.extend(reversed(n.children))
    return list(seen)


def prefer(weights: dict[str, float]) -> Callable[[ENode], float]:
    def cost(node: ENode) -> float:
        return weights.get(node.op, 0.0) if node.is_placement else 1.0
    return cost


ALL_GLOBAL = prefer({"global": 0.0, "shared": 1e6, "local": 1e6, "inline": 1e6})
MOST_FUSED = prefer({"global": 100.0, "shared": 1.0, "local": 2.0, "inline": 0.0})
FORWARDED = prefer({"global": 100.0, "shared": 1.0, "local": 0.0, "inline": 0.5})


@dataclass
class Extracted:
    choice: Choice
    schedule: "Schedule"
    cost: "ScheduleCost"
    evaluated: int  # schedules priced during the search
    exhaustive: bool


def extract_schedule(data: EGraphData, target, exhaustive_limit: int = 4096, max_passes: int = 4) -> Extracted:
    from .cost import schedule_cost
    from .schedule import build_schedule

    counter = [0]

    def price(choice: Choice):
        counter[0] += 1
        schedule = build_schedule(data, choice)
        return schedule_cost(schedule, target), schedule

    def key(c) -> tuple:
        return (0 if c.feasible else 1, c.cycles, len(c.problems))

    seeds = [extract_tree(data, w) for w in (ALL_GLOBAL, MOST_FUSED, FORWARDED, node_count_cost)]
    classes = reachable_classes(data)
    options = [(cid, data.classes[cid]) for cid in classes if len(data.classes[cid]) > 1]
    space = 1
    for _, nodes in options:
        space *= len(nodes)
        if space > exhaustive_limit:
            break
    best_choice = None
    best = None
    if space <= exhaustive_limit:
        base = dict(seeds[0])
        for combo in itertools.product(*(nodes for _, nodes in options)):
            trial = dict(base)
            trial.update(zip((cid for cid, _ in options), combo))
            cost, schedule = price(trial)
            if best is None or key(cost) < key(best[0]):
                best, best_choice = (cost, schedule), trial
        return Extracted(best_choice, best[1], best[0], counter[0], True)
    for seed in seeds:
        cost, schedule = price(seed)
        if best is None or key(cost) < key(best[0]):
            best, best_choice = (cost, schedule), dict(seed)
    for _ in range(max_passes):
        improved = False
        live = set(reachable_classes(data, best_choice))
        for cid, nodes in options:
            if cid not in live:
                continue
            current = best_choice[cid]
            for alt in nodes:
                if alt is current:
                    continue
                trial = dict(best_choice)
                trial[cid] = alt
                cost, schedule = price(trial)
                if key(cost) < key(best[0]):
                    best, best_choice, current = (cost, schedule), trial, alt
                    improved = True
                    live = set(reachable_classes(data, best_choice))
        if not improved:
            break
    return Extracted(best_choice, best[1], best[0], counter[0], False)
