"""Finding the cheapest schedule in a saturated e-graph.

The cost of a schedule is not additive over a tree (kernel launches, tile
footprints and a value read by several kernels depend on the grouping), so
schedules are priced whole, kernel by kernel (`cost.py`), with each kernel's
price cached by its contents.

The space is narrowed without losing the optimum of the cost model: e-nodes
of a class that compute the same op on the same values with the same kernel
boundaries (which operands are `global`) differ only in how a fused operand
is held, and for that the model has a dominant answer: an elementwise
producer is best `inline` (the model recomputes a value once per indexing it
is read with, and needs no buffer for it), anything else best `local`, then
`shared`. Where the producer's class holds both kinds of e-node (algebra made
`add(0, sum(x))` equal to `sum(x)`), the answer depends on its choice, so
every placement is kept for that edge. The remaining options (op structure x boundary mask) are searched

- exhaustively, when their product is small (every program of ~10 ops), or
- greedily otherwise: start with every edge global and fuse one edge at a time
  when the affected kernels get cheaper, pricing only those kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .cost import KernelCost, ScheduleCost, kernel_cost, schedule_cost
from .egraph_data import EGraphData, ENode
from .memory import checkpoint
from .ops import is_elementwise
from .schedule import CyclicChoice, Kernel, Schedule, build_schedule, form_kernel, fuse_into

Choice = dict[str, ENode]

# Narrowed spaces up to this many points are searched exhaustively (about 0.3 s);
# the greedy search takes over above it.
EXHAUSTIVE_LIMIT = 2048

_RANK_ELEMENTWISE = {"global": 0, "inline": 0, "local": 1, "shared": 2}
_RANK_OTHER = {"global": 0, "local": 0, "shared": 1, "inline": 9}


@dataclass
class SearchResult:
    choice: Choice
    schedule: Schedule
    cost: ScheduleCost
    evaluated: int
    exhaustive: bool


class Space:
    """The narrowed options of every value e-class, and kernel pricing with a cache."""

    def __init__(self, data: EGraphData, target):
        self.data = data
        self.target = target
        self.placement_choice: Choice = {}
        self.value_classes: list[str] = []
        for cid, nodes in data.classes.items():
            if nodes[0].is_placement:
                self.placement_choice[cid] = nodes[0]
            else:
                self.value_classes.append(cid)
        # per class: which kinds of e-node it holds (True = elementwise); read for every edge while narrowing
        self.kinds = {cid: frozenset(is_elementwise(n.op) for n in nodes) for cid, nodes in data.classes.items()}
        self.options: dict[str, list[ENode]] = {cid: self._narrow(data.classes[cid]) for cid in self.value_classes}
        self.kernel_cache: dict[tuple, tuple] = {}
        self.evaluated = 0

    def edge(self, child: str) -> tuple[str, str]:
        pnode = self.data.classes[child][0]
        return pnode.op, pnode.children[0]

    def signature(self, node: ENode) -> tuple:
        edges = tuple((kind == "global", value) for kind, value in map(self.edge, node.children))
        return node.op, node.attrs, edges

    def rank(self, node: ENode) -> tuple:
        out = []
        for kind, value in map(self.edge, node.children):
            elementwise = self.kinds[value] == {True}
            out.append((_RANK_ELEMENTWISE if elementwise else _RANK_OTHER)[kind])
        return tuple(out)

    def mixed(self, value: str) -> bool:
        """A class holding both elementwise and other e-nodes: which placement is best depends on the choice."""
        return len(self.kinds[value]) > 1

    def _narrow(self, nodes: list[ENode]) -> list[ENode]:
        best: dict[tuple, ENode] = {}
        for n in nodes:
            op, attrs, edges = self.signature(n)
            kinds = tuple(kind if self.mixed(value) else None for kind, value in map(self.edge, n.children))
            sig = (op, attrs, edges, kinds)
            if sig not in best or self.rank(n) < self.rank(best[sig]):
                best[sig] = n
        # fewer global edges first: the exhaustive search meets fused schedules early
        return sorted(best.values(), key=lambda n: (-sum(not g for g, _ in self.signature(n)[2]), self.rank(n)))

    def space_size(self, cap: int) -> int:
        size = 1
        for opts in self.options.values():
            size *= len(opts)
            if size > cap:
                return size
        return size

    def full_choice(self, values: Choice) -> Choice:
        choice = dict(self.placement_choice)
        choice.update(values)
        return choice

    # -- pricing -----------------------------------------------------------------

    def kernel_key(self, choice: Choice, root: str) -> tuple:
        seen: list[tuple[str, int]] = []
        visited: set[str] = set()
        stack = [root]
        while stack:
            cid = stack.pop()
            if cid in visited:
                continue
            visited.add(cid)
            node = choice[cid]
            seen.append((cid, id(node)))
            for child in node.children:
                kind, value = self.edge(child)
                if kind != "global":
                    stack.append(value)
        return (root, tuple(seen))

    def price_kernel(self, choice: Choice, root: str) -> tuple:
        key = self.kernel_key(choice, root)
        hit = self.kernel_cache.get(key)
        if hit is None:
            checkpoint("extraction (the schedule search)")
            kernel = form_kernel(self.data, choice, root)
            hit = (kernel, kernel_cost(kernel, self.data.types, self.target))
            self.kernel_cache[key] = hit
        return hit

    def price(self, choice: Choice) -> tuple[ScheduleCost | None, Schedule | None]:
        self.evaluated += 1
        try:
            schedule = build_schedule(self.data, choice, form=lambda r: self.price_kernel(choice, r)[0])
        except CyclicChoice:
            return None, None
        costs = [self.price_kernel(choice, k.root)[1] for k in schedule.kernels]
        return schedule_cost(schedule, self.target, costs), schedule


def order_key(cost: ScheduleCost | None) -> tuple:
    if cost is None:
        return (2, math.inf, 0)
    return (0 if cost.feasible else 1, cost.cycles, len(cost.problems))


def search(data: EGraphData, target, start: Choice, exhaustive_limit: int = EXHAUSTIVE_LIMIT) -> SearchResult:
    """The cheapest schedule: exhaustive when the narrowed space is small, greedy fusion otherwise."""
    space = Space(data, target)
    if space.space_size(exhaustive_limit) <= exhaustive_limit:
        return _exhaustive(space)
    return _greedy(space, start)


def _exhaustive(space: Space) -> SearchResult:
    best: list = [None, None, None]
    values: Choice = {}
    roots = list(space.data.roots)

    def value_of(cid: str) -> str:
        node = space.data.classes[cid][0]
        return node.children[0] if node.is_placement else cid

    def dfs(pending: list[str]) -> None:
        while pending and pending[-1] in values:
            pending = pending[:-1]
        if not pending:
            choice = space.full_choice(values)
            cost, schedule = space.price(choice)
            if best[0] is None or order_key(cost) < order_key(best[0]):
                best[:] = [cost, schedule, choice]
            return
        cid = pending[-1]
        for node in space.options[cid]:
            values[cid] = node
            dfs(pending[:-1] + [space.edge(c)[1] for c in node.children])
            del values[cid]

    dfs([value_of(r) for r in roots])
    cost, schedule, choice = best
    return SearchResult(choice, schedule, cost, space.evaluated, True)


def _greedy(space: Space, start: Choice) -> SearchResult:
    """Fuse producers into their consumers, one producer at a time, while it pays.

    A move takes a producer kernel and makes every edge that reads it from
    global memory fused; only the kernels that contain its consumers (and the
    producer's own, which may vanish) are priced again.
    """
    by_sig: dict[str, dict[tuple, ENode]] = {
        cid: {space.signature(n): n for n in opts} for cid, opts in space.options.items()
    }
    values = {cid: by_sig[cid][space.signature(start[cid])] for cid in space.value_classes if cid in start}
    state = _Kernels(space, space.full_choice(values))
    if state.schedule is None:
        cost, schedule = space.price(state.choice)
        return SearchResult(state.choice, schedule, cost, space.evaluated, False)
    for _ in range(4):
        improved = False
        for producer in list(reversed(state.order)):
            if producer in state.kernels and producer not in state.outputs and state.try_fuse(producer, by_sig):
                improved = True
        if not improved:
            break
    kernels = {root: kernel for root, (kernel, _) in state.kernels.items()}
    schedule = build_schedule(space.data, state.choice, form=lambda r: kernels.get(r) or form_kernel(
        space.data, state.choice, r))
    costs = [state.kernels[k.root][1] if k.root in state.kernels else kernel_cost(k, space.data.types, space.target)
             for k in schedule.kernels]
    return SearchResult(state.choice, schedule, schedule_cost(schedule, space.target, costs), space.evaluated, False)


class _Kernels:
    """The kernels of a placement-only neighbourhood of one choice, kept up to date move by move."""

    def __init__(self, space: Space, choice: Choice):
        self.space = space
        self.choice = choice
        cost, self.schedule = space.price(choice)
        if self.schedule is None:
            return
        self.outputs = set(self.schedule.outputs)
        self.order = [k.root for k in self.schedule.kernels]
        self.readers: dict[str, list[str]] = {}  # value -> consumers reading it (any placement)
        self.kernels: dict[str, tuple[Kernel, KernelCost]] = {}
        self.member: dict[str, set[str]] = {}
        for cid in self._reachable():
            for child in choice[cid].children:
                self.readers.setdefault(space.edge(child)[1], []).append(cid)
        for kernel in self.schedule.kernels:
            self._add(kernel)

    def _reachable(self) -> list[str]:
        seen: dict[str, None] = {}
        stack = list(self.schedule.outputs)
        while stack:
            cid = stack.pop()
            if cid in seen:
                continue
            seen[cid] = None
            stack.extend(self.space.edge(c)[1] for c in self.choice[cid].children)
        return list(seen)

    def _price(self, kernel: Kernel) -> KernelCost:
        return kernel_cost(kernel, self.space.data.types, self.space.target)

    def _add(self, kernel: Kernel, cost: KernelCost | None = None) -> None:
        self.kernels[kernel.root] = (kernel, cost or self._price(kernel))
        for cid in {inst.cid for inst in kernel.instances}:
            self.member.setdefault(cid, set()).add(kernel.root)

    def _drop(self, root: str) -> None:
        kernel, _ = self.kernels.pop(root)
        for cid in {inst.cid for inst in kernel.instances}:
            self.member[cid].discard(root)

    def _is_root(self, choice: Choice, value: str) -> bool:
        if value in self.outputs:
            return True
        return any(
            self.space.edge(c)[0] == "global" and self.space.edge(c)[1] == value
            for consumer in self.readers.get(value, ())
            for c in choice[consumer].children
        )

    def try_fuse(self, producer: str, by_sig) -> bool:
        space = self.space
        trial = dict(self.choice)
        changed = set()
        for consumer in dict.fromkeys(self.readers.get(producer, ())):
            node = trial[consumer]
            op, attrs, edges = space.signature(node)
            fused = tuple((False, v) if v == producer else (g, v) for g, v in edges)
            if fused == edges:
                continue
            alt = by_sig[consumer].get((op, attrs, fused))
            if alt is not None and self._same_elsewhere(node, alt, producer):
                trial[consumer] = alt
                changed.add(consumer)
        if not changed:
            return False
        affected = set()
        for consumer in changed:
            affected |= self.member.get(consumer, set())
        stays = self._is_root(trial, producer)
        old = sum(self.kernels[r][1].cycles for r in affected | ({producer} if not stays else set()))
        grown = {}
        for r in affected:
            if r == producer:
                continue
            kernel = fuse_into(space.data, trial, self.kernels[r][0], producer, changed)
            grown[r] = (kernel, self._price(kernel))
        new = sum(cost.cycles for _, cost in grown.values())
        if stays and producer in affected:
            new += self.kernels[producer][1].cycles
        space.evaluated += 1
        if not new < old:
            return False
        self.choice = trial
        for r in grown:
            self._drop(r)
        if not stays and producer in self.kernels:
            self._drop(producer)
        for kernel, cost in grown.values():
            self._add(kernel, cost)
        return True

    def _same_elsewhere(self, node: ENode, alt: ENode, producer: str) -> bool:
        """The alternative changes only the edges that read `producer`."""
        for a, b in zip(node.children, alt.children):
            ea, eb = self.space.edge(a), self.space.edge(b)
            if ea != eb and ea[1] != producer:
                return False
        return True
