"""The narrowed space of a schedule search: each value class's options and kernel pricing with caches.

Of the e-nodes of a class that compute the same op on the same values with the same kernel
boundaries (which operands are `global`), narrowing keeps the one whose placements rank lowest,
the cost model's dominant answer (search.py's module docstring says why); where the answer depends
on more than the edge (`Space.keeps_placement`), every placement is kept for the search to price.
"""

from __future__ import annotations

import copy
import math

from ..ir.memory import checkpoint
from ..ir.ops import is_elementwise, is_injective
from ..rewrite.egraph_data import Choice, EGraphData, ENode
from ..rewrite.placement import PLACEMENT_OF_NAME, Placement
from .canonical import group_shape, kernel_shape, literal_key, renamed_cost, renamed_kernel
from .cost import KernelCost, ScheduleCost, kernel_bound, kernel_cost, schedule_cost
from .facts import FREE_OPS
from .form import Edge, build_schedule, form_kernel
from .kernel import CyclicChoice, Kernel, Schedule
from .merge import merge_pair
from .target import Target

# -- the narrowing's policy ----------------------------------------------------------------

# Narrowing keeps, of the e-nodes that differ only in how a fused operand is held, the one
# whose placements rank lowest, edge by edge (the cost model's dominant answer, module
# docstring). An injective producer is best recomputed where it is read (`inline`: no buffer,
# one op per element read), then forwarded tile by tile (`local`), then held for the tile
# (`shared`). Any other producer (a reduction, a matmul, an input) is best `local` or in
# global memory (which only ties with a shared read of an input one class reads: that joins
# no kernel), then `shared`; recomputing it at each use (`inline`, which only a user's rule
# can ask for) would redo a whole reduction per element, so it ranks after everything.
RANK_LAST = 9  # above every other rank of either table
RANK_INJECTIVE = {Placement.GLOBAL: 0, Placement.INLINE: 0, Placement.LOCAL: 1, Placement.SHARED: 2}
RANK_OTHER = {Placement.GLOBAL: 0, Placement.LOCAL: 0, Placement.SHARED: 1, Placement.INLINE: RANK_LAST}
assert set(RANK_INJECTIVE) == set(RANK_OTHER) == set(Placement)
# A value computed from indices and literals alone (an iota's cone) is read inline everywhere, as an
# index map is: it reads no memory, so holding or storing it saves only its index arithmetic, and
# inline its readers see it as an expression of their loop variables. A 4-bit weight's nibble shift,
# `(k % 2) * 4`, is one value every product of the same K shares; held once (the model's marginally
# cheaper answer) each product falls back to plain loops, 20-30x slower than the one-row product
# that unpacks the nibbles in registers (targets/c/nibble_dot.py), which needs the shift as an
# expression of k.
INDEX_ONLY_INLINE = True
# Kernels of one shape (the same computation on other classes: a repeated layer's) are priced once,
# the others renamed (canonical.py); off, each is priced (the tests compare the two).
SHAPE_CACHE = True


class Space:
    """The narrowed options of every value e-class, and kernel pricing with caches."""

    def __init__(self, data: EGraphData, target: Target, bound: frozenset[str] = frozenset()):
        self.data = data
        self.target = target
        self.placement_choice: Choice = {}
        self.value_classes: list[str] = []
        for cid, nodes in data.classes.items():
            if nodes[0].is_placement:
                self.placement_choice[cid] = nodes[0]
            else:
                self.value_classes.append(cid)
        # per class: which kinds of e-node it holds (True = injective); read for every edge while narrowing
        self.kinds = {cid: frozenset(is_injective(n.op) for n in nodes) for cid, nodes in data.classes.items()}
        # per class: whether an injective e-node of it does arithmetic (recomputing it costs ops)
        self.computes = {cid: any(is_injective(n.op) and n.op not in FREE_OPS for n in nodes)
                         for cid, nodes in data.classes.items()}
        self.consumers = self._consumer_classes()
        self.params = {cid for cid, nodes in data.classes.items() if nodes[0].op == "param"}
        # the parameters' classes whose values are given at build time (weights), which lowering may
        # lay out at binding (facts.py `paired`): a kernel's price depends on which it reads
        self.bound = frozenset(cid for cid in self.params if data.classes[cid][0].attr("name") in bound)
        self.outputs = {self.value_of(root) for root in data.roots}
        self.twice = self._computed_twice()  # classes that may be computed in two instances
        self.index_only = self._index_only()
        self.options: dict[str, list[ENode]] = {cid: self._narrow(cid) for cid in self.value_classes}
        self.form_cache: dict[tuple, Kernel] = {}
        self.price_cache: dict[Kernel, KernelCost] = {}
        # the same by shape (canonical.py): a kernel, a kernel's price, merged kernels
        self.form_shapes: dict[tuple, tuple[Kernel, tuple[str, ...]]] = {}
        self.shape_cache: dict[tuple, tuple[KernelCost, tuple[str, ...]]] = {}
        self.merge_shapes: dict[tuple, tuple[Kernel | None, tuple[str, ...]]] = {}
        # by kernel object (the object kept, so an id is not reused): its shape, its price
        self.shapes: dict[int, tuple[Kernel, tuple | None]] = {}
        self.priced: dict[int, tuple[Kernel, KernelCost]] = {}
        # a kernel not priced: its lower bound (`bound_kernel`) and the variants it made, for pricing it
        self.bounds: dict[int, tuple[Kernel, float, list]] = {}
        self.joined: dict[tuple[int, int], tuple[Kernel, Kernel, Kernel | None]] = {}  # (a, b, their join)
        self.evaluated = 0
        self.last_priced: tuple | None = None

    def priced_by(self, target: Target) -> Space:
        """The same space priced by `target`: the narrowed options and the kernels formed and merged
        (none depends on the target) shared with this one, the prices its own."""
        other = copy.copy(self)
        other.target = target
        other.price_cache, other.shape_cache, other.priced, other.bounds = {}, {}, {}, {}
        other.evaluated, other.last_priced = 0, None
        return other

    def value_of(self, cid: str) -> str:
        """The value class a class stands for (a placement class's operand)."""
        node = self.data.classes[cid][0]
        return node.children[0] if node.is_placement else cid

    def edge(self, child: str) -> Edge:
        """The edge a placement class stands for (every operand of an e-node is one)."""
        pnode = self.data.classes[child][0]
        return Edge(PLACEMENT_OF_NAME[pnode.op], pnode.children[0])

    def _consumer_classes(self) -> dict[str, set[str]]:
        """For each value class, the classes with an e-node reading it."""
        out: dict[str, set[str]] = {}
        for cid in self.value_classes:
            for n in self.data.classes[cid]:
                for child in n.children:
                    out.setdefault(self.edge(child).value, set()).add(cid)
        return out

    def is_global(self, placement: Placement, value: str) -> bool:
        """A kernel boundary: a global edge, or a shared read of an input only one class reads."""
        if placement is Placement.GLOBAL:
            return True
        return value in self.params and len(self.consumers.get(value, ())) < 2

    def signature(self, node: ENode) -> tuple:
        edges = tuple((self.is_global(*edge), edge.value) for edge in map(self.edge, node.children))
        return node.op, node.attrs, edges

    def rank(self, node: ENode) -> tuple:
        out = []
        for edge in map(self.edge, node.children):
            injective = self.kinds[edge.value] == {True}
            out.append((RANK_INJECTIVE if injective else RANK_OTHER)[edge.placement])
        return tuple(out)

    def keeps_placement(self, cid: str, node: ENode, value: str) -> bool:
        """The edge from `value` into `node` (of class `cid`) keeps every placement apart, as the rank
        decides nothing there: the producer's class mixes kinds of e-node (the best placement depends
        on its choice), or it is injective arithmetic whose value is needed more than once per
        element (an output, read by several classes, re-read by this one: a matmul's operand, a
        broadcast one, or read by a class that may itself be computed twice), where holding it once
        may beat recomputing it per read."""
        if self.mixes_kinds(value):
            return True
        if not self.computes[value]:
            return False
        return (value in self.outputs or len(self.consumers.get(value, ())) > 1 or self._rereads(cid, node, value)
                or cid in self.twice)  # (each instance of the consumer reads the edge)

    def _computed_twice(self) -> set[str]:
        """The classes that may be computed in two instances: an output another class reads (once as
        its own root, once inline where it is read), a class read by several classes or re-read per
        element of a larger consumer (a broadcast condition), and what any of them reads fused."""
        twice = set()
        for c in self.value_classes:
            readers = len(self.consumers.get(c, ()))
            if readers > 1 or (c in self.outputs and readers > 0):
                twice.add(c)
            for n in self.data.classes[c]:  # read again per element of a larger consumer
                twice.update(edge.value for edge in map(self.edge, n.children) if self._rereads(c, n, edge.value))
        stack = list(twice)
        while stack:
            for n in self.data.classes[stack.pop()]:
                for child in n.children:
                    edge = self.edge(child)
                    if edge.placement is not Placement.GLOBAL and edge.value not in twice:
                        twice.add(edge.value)
                        stack.append(edge.value)
        return twice

    def mixes_kinds(self, value: str) -> bool:
        """The class holds injective and other e-nodes: the best placement of its edges depends on
        which is chosen."""
        return len(self.kinds[value]) > 1

    def _rereads(self, cid: str, node: ENode, value: str) -> bool:
        if node.op == "matmul":
            return True
        if node.op != "broadcast_to" and not is_elementwise(node.op):
            return False
        types = self.data.types
        return cid in types and value in types and math.prod(types[value].shape) < math.prod(types[cid].shape)

    def _index_only(self) -> set[str]:
        """The value classes computed from indices and literals alone (an iota's cone: a 4-bit weight's
        shift `(k % 2) * 4`, a causal mask's `i >= j`): every e-node reads no tensor."""
        out: set[str] = set()
        grew = True
        while grew:
            grew = False
            for cid in self.value_classes:
                if cid in out:
                    continue
                nodes = self.data.classes[cid]
                if all(n.op in ("iota", "const") or (n.op != "param" and is_injective(n.op) and n.children
                                                     and all(self.edge(c).value in out or self.is_literal(c)
                                                             for c in n.children))
                       for n in nodes):
                    out.add(cid)
                    grew = True
        # (a literal is read as its placement says: only the values computed from one are narrowed)
        return {cid for cid in out if any(n.op != "const" for n in self.data.classes[cid])}

    def is_literal(self, child: str) -> bool:
        return all(n.op == "const" for n in self.data.classes[self.edge(child).value])

    def _inline_only(self, node: ENode) -> bool:
        """Whether `node` reads every index-only value inline (the policy's INDEX_ONLY_INLINE)."""
        return all(edge.placement is Placement.INLINE or edge.value not in self.index_only
                   for edge in map(self.edge, node.children))

    def start_option(self, cid: str, node: ENode, by_sig: dict[tuple, list[ENode]]) -> ENode:
        """The option standing for `node` (a start the tree extraction chose) among class `cid`'s
        (`by_sig`: its options by signature): the one of its signature, with an index-only value fused
        where the narrowing keeps only that (INDEX_ONLY_INLINE); where the e-graph has no such e-node
        (no placement of another edge reads the same way), the first option of the same op on the
        same values (options are sorted most fused first)."""
        op, attrs, edges = self.signature(node)
        if INDEX_ONLY_INLINE:
            edges = tuple((is_global and value not in self.index_only, value) for is_global, value in edges)
        found = by_sig.get((op, attrs, edges))
        if found:
            return found[0]
        return next(n for n in self.options[cid] if self.structure(n) == self.structure(node))

    def structure(self, node: ENode) -> tuple:
        """What `node` computes, its placements aside: its op, attributes and the values it reads."""
        return node.op, node.attrs, tuple(self.edge(child).value for child in node.children)

    def _narrow(self, cid: str) -> list[ENode]:
        best: dict[tuple, ENode] = {}
        nodes = self.data.classes[cid]
        if INDEX_ONLY_INLINE:
            nodes = [n for n in nodes if self._inline_only(n)] or nodes
        for n in nodes:
            op, attrs, edges = self.signature(n)
            kinds = tuple(kind if self.keeps_placement(cid, n, value) else None
                          for kind, value in map(self.edge, n.children))
            sig = (op, attrs, edges, kinds)
            if sig not in best or self.rank(n) < self.rank(best[sig]):
                best[sig] = n
        # fewer global edges first: the exhaustive search meets fused schedules early
        return sorted(best.values(), key=lambda n: (-sum(not g for g, _ in self.signature(n)[2]), self.rank(n)))

    def space_size(self, cap: int) -> int:
        """Points of the narrowed space, counting the classes some option reachable from the
        roots reads (a value no output needs chooses nothing); stops counting above `cap`."""
        size = 1
        for cid in self.reachable():
            size *= len(self.options[cid])
            if size > cap:
                return size
        return size

    def reachable(self) -> list[str]:
        seen = dict.fromkeys(self.value_of(root) for root in self.data.roots)
        stack = list(seen)
        while stack:
            for n in self.options[stack.pop()]:
                for child in n.children:
                    value = self.edge(child)[1]
                    if value not in seen:
                        seen[value] = None
                        stack.append(value)
        return list(seen)

    def full_choice(self, values: Choice) -> Choice:
        choice = dict(self.placement_choice)
        choice.update(values)
        return choice

    # -- pricing -----------------------------------------------------------------

    def _walk(self, choice: Choice, root: str):
        """The values a root's kernel walk reaches (through edges not `global`), in the order met,
        each with its chosen e-node."""
        visited: set[str] = set()
        stack = [root]
        while stack:
            cid = stack.pop()
            if cid in visited:
                continue
            visited.add(cid)
            node = choice[cid]
            yield cid, node
            for child in node.children:
                edge = self.edge(child)
                if edge.placement is not Placement.GLOBAL:
                    stack.append(edge.value)

    def walk_key(self, choice: Choice, root: str) -> tuple:
        """What a root's kernel depends on: the e-nodes chosen for the values its walk reaches."""
        return (root, tuple((cid, id(node)) for cid, node in self._walk(choice, root)))

    def walk_shape(self, choice: Choice, root: str) -> tuple[tuple, tuple] | None:
        """`walk_key` up to which classes the walk meets (canonical.py): each e-node reached with
        its classes and literals numbered in the order met, how each operand is read (its placement;
        whether a literal, a parameter), the types of the classes numbered. None where it meets a
        gather (canonical.py: such kernels have no shape)."""
        number: dict = {}

        def num(c) -> int:
            return number.setdefault(c, len(number))

        nodes = []
        for cid, node in self._walk(choice, root):
            if node.op == "gather":
                return None
            operands = []
            for child in node.children:
                edge = self.edge(child)
                vnode = choice[edge.value]
                if vnode.op == "const":  # (numbered: canonical.py literal_key)
                    kind = ("const", num(literal_key(vnode.attr("value"))), vnode.attr("dtype"))
                else:
                    kind = vnode.op == "param"
                operands.append((edge.placement, num(child), num(edge.value), kind))
            if node.op == "const":
                attrs = (num(literal_key(node.attr("value"))), node.attr("dtype"))
            else:
                attrs = node.attrs if node.op != "param" else ()
            nodes.append((num(cid), node.ctor, node.op, attrs, tuple(operands)))
        names = tuple(number)
        return (tuple(nodes), tuple(self.data.types.get(c) for c in names)), names

    def form(self, choice: Choice, root: str) -> Kernel:
        """The kernel of `root`'s walk under `choice`; a walk of a shape formed before (another
        layer's) gives that kernel, renamed."""
        key = self.walk_key(choice, root)
        kernel = self.form_cache.get(key)
        if kernel is None:
            checkpoint("extraction (the schedule search)")
            kernel = self.form_cache[key] = self._by_shape(
                self.form_shapes, self.walk_shape(choice, root) if SHAPE_CACHE else None,
                lambda: form_kernel(self.data, choice, root), lambda k, names: self._renamed(k, names, choice))
        return kernel

    def _by_shape(self, table: dict, shaped: tuple | None, work, rename):
        """`work()` for the first of a shape (canonical.py), kept in `table` with the classes it named;
        for another of that shape, the first's answer renamed (`rename(answer, names)`; None and an
        answer over the same classes as they are). `shaped` None: no shape, `work()` alone."""
        if shaped is None:
            return work()
        hit = table.get(shaped[0])
        if hit is None:
            answer = work()
            table[shaped[0]] = (answer, shaped[1])
            return answer
        answer, names = hit
        if answer is None or names == shaped[1]:
            return answer
        return rename(answer, dict(zip(names, shaped[1])))

    def join(self, a: Kernel, b: Kernel) -> Kernel | None:
        """merge.py `merge_pair(a, b)`; two kernels of a shape joined before (another layer's) give
        that join, renamed."""
        seen = self.joined.get((id(a), id(b)))
        if seen is not None and seen[0] is a and seen[1] is b:
            return seen[2]
        joined = self._by_shape(
            self.merge_shapes, group_shape([a, b], {}, set()) if SHAPE_CACHE else None, lambda: merge_pair(a, b),
            lambda first, names: self._renamed(first, names, {i.cid: i.node for x in (a, b) for i in x.instances}))
        self.joined[(id(a), id(b))] = (a, b, joined)
        return joined

    def _renamed(self, template: Kernel, names: dict[str, str], nodes: dict[str, ENode]) -> Kernel:
        """canonical.py `renamed_kernel`, its shape noted: the template's, its classes renamed."""
        kernel = renamed_kernel(template, names, nodes)
        shaped = self._shape(template)
        if shaped is not None:
            self.shapes[id(kernel)] = (kernel, (shaped[0], tuple(names[c] for c in shaped[1])))
        return kernel

    def _priced_shape(self, kernel: Kernel) -> tuple | None:
        """`_shape`, with which of its classes are bound parameters where any is: kernels of one shape
        price alike only where they read bound weights alike."""
        shaped = self._shape(kernel)
        if shaped is None or not self.bound:
            return shaped
        return (shaped[0], tuple(c in self.bound for c in shaped[1])), shaped[1]

    def _shape(self, kernel: Kernel) -> tuple | None:
        """canonical.py `kernel_shape`, once per kernel object (a renamed one's is noted as made)."""
        noted = self.shapes.get(id(kernel))
        if noted is not None and noted[0] is kernel:
            return noted[1]
        shaped = kernel_shape(kernel, self.data.types)
        self.shapes[id(kernel)] = (kernel, shaped)
        return shaped

    def price_kernel(self, kernel: Kernel) -> KernelCost:
        """The kernel's cheapest plan and price; a kernel of a shape priced before (another layer's
        copy of it, canonical.py) is that one's, renamed."""
        known = self.priced.get(id(kernel))
        if known is not None and known[0] is kernel:
            return known[1]
        shaped = self._priced_shape(kernel) if SHAPE_CACHE else None
        bounded = self.bounds.pop(id(kernel), None)  # (its variants, made for its bound)
        variants = bounded[2] if bounded is not None and bounded[0] is kernel else None
        if shaped is None:  # (a gather's kernel: equal kernels made apart priced once)
            cost = self.price_cache.get(kernel)
            if cost is None:
                cost = self.price_cache[kernel] = kernel_cost(kernel, self.data.types, self.target, variants,
                                                              self.bound)
        else:
            cost = self._by_shape(self.shape_cache, shaped,
                                  lambda: kernel_cost(kernel, self.data.types, self.target, variants, self.bound),
                                  renamed_cost)
        self.priced[id(kernel)] = (kernel, cost)
        return cost

    def bound_kernel(self, kernel: Kernel) -> float:
        """The kernel's cycles where it is priced (or a kernel of its shape is), else a lower bound on
        them (cost.py `kernel_bound`): what a move's new kernels cost at least, known before pricing
        them (search.py `_State._evaluate`)."""
        known = self.priced.get(id(kernel))
        if known is not None and known[0] is kernel:
            return known[1].price.cycles
        if SHAPE_CACHE:
            shaped = self._priced_shape(kernel)
            if shaped is not None and shaped[0] in self.shape_cache:
                return self.price_kernel(kernel).price.cycles  # (renamed: no pricing)
        noted = self.bounds.get(id(kernel))
        if noted is None or noted[0] is not kernel:
            noted = self.bounds[id(kernel)] = (kernel, *kernel_bound(kernel, self.data.types, self.target, self.bound))
        return noted[1]

    def price(self, choice: Choice) -> tuple[ScheduleCost | None, Schedule | None]:
        """The schedule of a whole choice and its cost; the last choice priced is remembered (the
        greedy search prices its end state twice, a whole-program build each time)."""
        if self.last_priced is not None and self.last_priced[0] is choice:
            return self.last_priced[1]
        self.evaluated += 1
        try:
            schedule = build_schedule(self.data, choice, form=lambda r: self.form(choice, r), join=self.join)
        except CyclicChoice:
            result = None, None
        else:
            costs = [self.price_kernel(k) for k in schedule.kernels]
            result = schedule_cost(schedule, self.target, costs), schedule
        self.last_priced = (choice, result)
        return result
