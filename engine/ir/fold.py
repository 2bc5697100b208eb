"""Values of bound weights alone: computed once, when the weights are bound, not on every call.

A model's graph often computes from its weights only: DeBERTa's attention
projects `layer_norm(rel_embeddings)` through its query and key weights (1.2
GFLOP, the same on every call); wav2vec2's positional conv normalises its weight
(`g * v / norm(v)`). Every such value is the same on every call, so this pass
makes it a bound parameter of its own before saturation: the e-graph, the search
and the kernels see a weight, and the values are computed by the reference
interpreter once, at binding time (`fold_values`).

What is folded is a *fold point*: a value computed from bound parameters (and
literals) only, read by a value that is not, that does arithmetic somewhere in
its cone (a weight only moved, transposed or sliced is left to the kernels,
which read it in place or lay it out at binding, lowering/bind.py), and that is
no more bytes than the weights it reads: a product reading a folded value reads
that many bytes on every call, so folding must not grow them (a bias broadcast
to a whole activation is not materialised: the sum under the broadcast is
folded instead; the nibbles of a 4-bit weight are not unpacked into bytes, nor
dequantized into floats: the product reads the packed bytes). A program's output is never folded (its inputs may be).

The pass depends only on which parameters are bound, not on their values, so
`stitch compile --weights` shows the schedule `stitch run --weights` runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .dims import Expr, is_static
from .graph import Graph, Node
from .interp import evaluate

# a folded value may hold at most this many times the bytes of the weights it is computed from
MAX_GROWTH = 1

# ops that only move or select values: a cone of these and parameters is no arithmetic to save
MOVEMENT = frozenset({"param", "const", "transpose", "reshape", "broadcast_to", "slice", "concat", "gather"})


@dataclass(frozen=True)
class Folded:
    graph: Graph  # the program with each fold point a bound parameter of its own
    values: Graph | None  # the fold points as the outputs of a graph of the bound parameters; None: nothing folded
    names: tuple[str, ...] = ()  # the new parameters, in the order `values` returns them


def fold_bound(graph: Graph, bound: tuple[str, ...] | list[str]) -> Folded:
    """`graph` with its fold points (see the module's doc) made parameters, bound like the weights."""
    bound = set(bound)
    nodes = graph.nodes
    known: dict[int, bool] = {}  # computed from bound parameters and literals only
    weights: dict[int, frozenset[int]] = {}  # the bound parameters in a known value's cone
    computes: dict[int, bool] = {}  # a known value's cone does arithmetic
    for n in nodes:
        if n.op == "param":
            known[n.id] = n.attr("name") in bound
            weights[n.id] = frozenset({n.id}) if known[n.id] else frozenset()
            computes[n.id] = False
            continue
        # (an attribute holding a symbol, `slice(..., starts=[seq - 1])`, is the call's: not known here)
        known[n.id] = all(known[i] for i in n.inputs) and not any(
            isinstance(d, Expr) for _, v in n.attrs if isinstance(v, tuple) for d in v)
        if known[n.id]:
            weights[n.id] = frozenset().union(*(weights[i] for i in n.inputs))
            computes[n.id] = n.op not in MOVEMENT or any(computes[i] for i in n.inputs)
    outputs = set(graph.outputs)
    points: list[int] = []
    seen: set[int] = set()

    def choose(i: int) -> None:
        n = nodes[i]
        if not known[i] or not computes[i] or not weights[i] or i in seen:
            return
        seen.add(i)
        static = is_static(n.type.shape)  # a value whose size is symbolic is made per call: its inputs may fold
        if i not in outputs and static and n.type.nbytes <= MAX_GROWTH * sum(nodes[p].type.nbytes for p in weights[i]):
            points.append(i)
            return
        for j in n.inputs:
            choose(j)

    for n in nodes:
        if not known[n.id]:
            for i in n.inputs:
                choose(i)
    for o in graph.outputs:
        choose(o)
    if not points:
        return Folded(graph, None)
    points.sort()
    folded = _with_params(graph, points)
    return Folded(folded, _values(graph, points), tuple(folded.param_names[len(graph.params):]))


def fold_values(folded: Folded, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The folded parameters' values, computed from the bound weights by the reference interpreter."""
    if folded.values is None:
        return {}
    given = {name: weights[name] for name in folded.values.param_names}
    return dict(zip(folded.names, evaluate(folded.values, given)))


def _with_params(graph: Graph, points: list[int]) -> Graph:
    """`graph` with each point a new parameter after the old ones, and what only they read dropped."""
    taken = set(graph.param_names) | {n.name for n in graph.nodes if n.name}
    names = {}
    for i in points:
        base = f"{graph.nodes[i].name or f'v{i}'}_of_weights"
        name, k = base, 1
        while name in taken:
            name, k = f"{base}{k}", k + 1
        taken.add(name)
        names[i] = name
    live = _reached(graph, graph.outputs, set(points))
    order = graph.params + points + [n.id for n in graph.nodes if n.op != "param" and n.id in live
                                      and n.id not in names]
    new_id = {old: new for new, old in enumerate(order)}
    nodes = []
    for old in order:
        n = graph.nodes[old]
        if old in names:
            nodes.append(Node(new_id[old], "param", (), (("name", names[old]),), n.type, names[old], n.pos))
        else:
            nodes.append(replace(n, id=new_id[old], inputs=tuple(new_id[i] for i in n.inputs)))
    params = [new_id[i] for i in graph.params + points]
    return Graph(graph.name, nodes, params, [new_id[o] for o in graph.outputs],
                 graph.param_names + [names[i] for i in points], graph.symbols)


def _reached(graph: Graph, roots: list[int], cut: set[int] = frozenset()) -> set[int]:
    """The nodes `roots` read, themselves included, not looking past the nodes in `cut`."""
    live, todo = set(), list(roots)
    while todo:
        i = todo.pop()
        if i in live:
            continue
        live.add(i)
        if i not in cut:
            todo.extend(graph.nodes[i].inputs)
    return live


def _values(graph: Graph, points: list[int]) -> Graph:
    """The graph of the bound parameters that computes the points (its outputs, in order)."""
    order = sorted(_reached(graph, points))
    new_id = {old: new for new, old in enumerate(order)}
    nodes = [replace(graph.nodes[old], id=new_id[old], inputs=tuple(new_id[i] for i in graph.nodes[old].inputs))
             for old in order]
    params = [new_id[i] for i in order if graph.nodes[i].op == "param"]
    return Graph(f"{graph.name}_weights", nodes, params, [new_id[i] for i in points],
                 [graph.nodes[i].attr("name") for i in order if graph.nodes[i].op == "param"])
