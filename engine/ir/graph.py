"""The typed dataflow graph of one func: what every stage after the checker reads.

Nodes are in topological order; each has its inferred TensorType and its
attributes normalized (axes sorted and non-negative, defaults filled in,
reshape's -1 resolved, literal dtypes decided).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .program import NOPOS, Pos, TensorType


@dataclass(frozen=True)
class Node:
    id: int
    op: str  # "param", "const", or an op of ops.OPS
    inputs: tuple[int, ...]
    attrs: tuple[tuple[str, object], ...]
    type: TensorType
    name: str = ""  # the program's name for this value, if it had one
    pos: Pos = field(default=NOPOS, compare=False)

    def attr(self, key: str, default=None):
        return lookup(self.attrs, key, default)


def lookup(pairs: tuple[tuple[str, object], ...], key: str, default=None):
    """The value for `key` in a tuple of (key, value) pairs (attributes are kept as such tuples)."""
    for k, v in pairs:
        if k == key:
            return v
    return default


@dataclass
class Graph:
    name: str
    nodes: list[Node]
    params: list[int]
    outputs: list[int]
    param_names: list[str] = field(default_factory=list)
    # each symbolic dimension's inclusive range (empty: every shape is static)
    symbols: dict[str, tuple[int, int]] = field(default_factory=dict)

    def node(self, i: int) -> Node:
        return self.nodes[i]

    @property
    def param_types(self) -> list[TensorType]:
        return [self.nodes[i].type for i in self.params]

    @property
    def output_types(self) -> list[TensorType]:
        return [self.nodes[i].type for i in self.outputs]

    def users(self) -> dict[int, list[int]]:
        """For each node, the nodes that read it (in order, with repeats)."""
        users: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                users[i].append(n.id)
        return users

    def last_use(self) -> dict[int, int]:
        """For each node, the index of the last node reading it (outputs live to the end)."""
        last = {n.id: n.id for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                last[i] = n.id
        end = len(self.nodes)
        for o in self.outputs:
            last[o] = end
        return last

    def signature(self) -> str:
        params = ", ".join(f"{name}: {self.nodes[i].type}" for name, i in zip(self.param_names, self.params))
        outs = [str(t) for t in self.output_types]
        results = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
        symbols = "[" + ", ".join(f"{s}: {lo}..{hi}" for s, (lo, hi) in self.symbols.items()) + "]" if self.symbols else ""
        return f"func {self.name}{symbols}({params}) -> {results}"
