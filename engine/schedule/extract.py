"""Extraction basics: choose one e-node per e-class, and turn a choice back into a program.

`extract_tree` is the simple additive extractor (each e-node's own cost plus
its children's), used as a first guess and for testing that saturation
preserves meaning. `extract_schedule` is schedule extraction with the target's
cost model: an additive start (`work_cost`, improved as a DAG by `improve_dag`)
handed to the search over whole schedules (`search.py`).
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import TYPE_CHECKING, Callable

from ..ir.check import check_func
from ..ir.graph import Graph
from ..ir.program import INT_DTYPES, Assign, Attr, Call, Const, DTypeName, Func, Param, Var
from ..rewrite.egraph_data import Choice, EGraphData, ENode
from ..rewrite.placement import Placement
from .target import Target

if TYPE_CHECKING:
    from .search import SearchResult


def node_count_cost(node: ENode) -> float:
    return 0.0 if node.is_placement else 1.0


def extract_tree(data: EGraphData, cost: Callable[[ENode], float] = node_count_cost) -> Choice:
    """The cheapest tree-cost e-node of every e-class (Knuth's generalization of Dijkstra).

    A node's cost is its own plus its children's, so a class's cost is final
    once it is the smallest on the heap; each node is priced once, when the
    last of its children is final. Classes on a cycle only (no finite cost)
    get no entry.
    """
    parents: dict[str, list[tuple[str, int]]] = {}
    waiting: dict[tuple[str, int], int] = {}
    heap: list[tuple[float, int, str, int]] = []
    tie = itertools.count()
    for cid, nodes in data.classes.items():
        for i, n in enumerate(nodes):
            kids = set(n.children)
            waiting[(cid, i)] = len(kids)
            for k in kids:
                parents.setdefault(k, []).append((cid, i))
            if not kids:
                heapq.heappush(heap, (cost(n), next(tie), cid, i))
    best: dict[str, float] = {}
    choice: Choice = {}
    while heap:
        c, _, cid, i = heapq.heappop(heap)
        if cid in best:
            continue
        best[cid] = c
        choice[cid] = data.classes[cid][i]
        for pcid, j in parents.get(cid, ()):
            waiting[(pcid, j)] -= 1
            if waiting[(pcid, j)] == 0 and pcid not in best:
                n = data.classes[pcid][j]
                heapq.heappush(heap, (cost(n) + sum(best[k] for k in n.children), next(tie), pcid, j))
    return choice


def improve_dag(data: EGraphData, choice: Choice, cost: Callable[[ENode], float], passes: int = 4) -> Choice:
    """`choice` with e-nodes swapped while the DAG cost falls: the sum of the chosen e-nodes' own
    costs over the classes the roots reach, each counted once.

    Tree costs count a value once per use, so deep in a program (where a value feeds several ops,
    each of them feeding several more) they favour an e-node with fewer operands over a cheaper one
    that reads a shared value more often: `pow(x, 3.0)` over `mul(mul(x, x), x)`. Swapping one class
    at a time with reference counts prices each alternative by what it adds and what it frees.
    """
    choice = dict(choice)
    refs: dict[str, int] = {}

    def hold(cids, step: int) -> list[str]:
        """Add `step` (+1 or -1) to each class's count; the classes that became (un)reachable."""
        changed: list[str] = []
        stack = list(cids)
        while stack:
            cid = stack.pop()
            refs[cid] = refs.get(cid, 0) + step
            if refs[cid] == (1 if step > 0 else 0):
                changed.append(cid)
                stack.extend(choice[cid].children)
        return changed

    def reaches(start: tuple[str, ...], target: str) -> bool:
        seen: set[str] = set()
        stack = list(start)
        while stack:
            cid = stack.pop()
            if cid == target:
                return True
            if cid not in seen:
                seen.add(cid)
                stack.extend(choice[cid].children)
        return False

    hold(data.roots, 1)
    for _ in range(passes):
        improved = False
        for cid, nodes in data.classes.items():
            if refs.get(cid, 0) == 0 or len(nodes) < 2 or nodes[0].is_placement:
                continue
            for alt in nodes:
                old = choice[cid]
                if alt is old or any(c not in choice for c in alt.children):
                    continue
                choice[cid] = alt
                added = hold(alt.children, 1)
                freed = hold(old.children, -1)
                delta = cost(alt) - cost(old) + sum(cost(choice[c]) for c in added) - sum(
                    cost(choice[c]) for c in freed)
                if delta < -1e-9 and not reaches(alt.children, cid):
                    improved = True
                    continue
                hold(old.children, 1)
                hold(alt.children, -1)
                choice[cid] = old
        if not improved:
            break
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
    if dtype in INT_DTYPES:
        return int(value)
    return float(value)


def choice_to_graph(data: EGraphData, choice: Choice, graph: Graph) -> Graph:
    return check_func(choice_to_func(data, choice, graph))


# -- schedule extraction: the additive start the search (search.py) improves on -------------


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


def prefer(weights: dict[Placement, float]) -> Callable[[ENode], float]:
    """Each placement e-node weighs its placement's weight (an enum keyed by its name: a StrEnum
    member hashes as its value), each value e-node 1."""
    def cost(node: ENode) -> float:
        return weights.get(node.op, 0.0) if node.is_placement else 1.0
    return cost


ALL_GLOBAL = prefer({Placement.GLOBAL: 0.0, Placement.SHARED: 1e6, Placement.LOCAL: 1e6, Placement.INLINE: 1e6})
MOST_FUSED = prefer({Placement.GLOBAL: 100.0, Placement.SHARED: 1.0, Placement.LOCAL: 2.0, Placement.INLINE: 0.0})


def work_cost(data: EGraphData, target: Target) -> Callable[[ENode], float]:
    """Additive cost of the unfused program: each op's elements times its cycles per element."""
    class_of = {id(n): cid for cid, nodes in data.classes.items() for n in nodes}

    def cost(node: ENode) -> float:
        if node.is_placement:
            return 0.0 if node.op == Placement.GLOBAL else math.inf
        if node.op in ("param", "const"):
            return 0.0
        return (1.0 + data.types[class_of[id(node)]].size) * target.cycles_per_element(node.op)

    return cost


def extract_schedule(data: EGraphData, target: Target, exhaustive_limit: int | None = None,
                     bound: tuple[str, ...] = ()) -> SearchResult:
    """The cheapest schedule of the saturated e-graph for `target` (see search.py), `bound` naming the
    parameters whose values are given at build time (weights)."""
    from .search import EXHAUSTIVE_LIMIT, search

    limit = EXHAUSTIVE_LIMIT if exhaustive_limit is None else exhaustive_limit
    cost = work_cost(data, target)
    return search(data, target, improve_dag(data, extract_tree(data, cost), cost), limit, frozenset(bound))
