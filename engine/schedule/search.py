"""Finding the cheapest schedule in a saturated e-graph.

The cost of a schedule is not additive over a tree (kernel launches, tile
footprints and a value read by several kernels depend on the grouping), so
schedules are priced whole, kernel by kernel (`cost.py`), with each kernel's
price cached by its contents.

The space is narrowed without losing the optimum of the cost model: e-nodes
of a class that compute the same op on the same values with the same kernel
boundaries (which operands are `global`) differ only in how a fused operand
is held, and for that the model has a dominant answer: an injective producer
is best `inline` (the model recomputes a value once per index it is read at,
and needs no buffer for it), anything else best `local`, then `shared` (every
fused edge joins its producer's and consumer's kernels alike). Where the
producer's class holds both kinds of e-node (algebra made `add(0, sum(x))`
equal to `sum(x)`), the answer depends on its choice, so every placement is
kept for that edge. An input read through a `shared` edge joins the kernels
that read it so; where only one class reads the input that joins nothing, and
the edge counts as `global`.
The remaining options (op structure x boundaries) are searched

- exhaustively, when their product is at most EXHAUSTIVE_LIMIT points, or
- greedily otherwise (`_greedy`): start from the cheaper of the cheapest op
  structure with every edge global and the same with every edge fused, then
  take moves while they pay (`_State.best_move`, where fusion is decided). A
  move fuses one producer into all the consumers that read it from global
  memory, with one placement; only the kernels the move touches are formed,
  merged and priced again. Small programs (SECOND_PATH_LIMIT) descend a second time with transfer
  and compute overlapped in the prices, and the search keeps the cheaper end by its own model.

The numbers this policy decides by (EXHAUSTIVE_LIMIT, STEEPEST_LIMIT,
GREEDY_ROUNDS, SECOND_PATH_LIMIT) are named and explained at the top; the narrowing and its
placement ranks are space.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..ir.ops import is_injective
from ..rewrite.egraph_data import Choice, EGraphData, ENode
from ..rewrite.placement import Placement
from .cost import ScheduleCost
from .facts import FREE_OPS
from .form import find_roots
from .kernel import CyclicChoice, Kernel, Schedule
from .merge import merge_kernels, order_kernels
from .space import Space
from .target import Target

# -- the search's policy: every number it decides by is here -------------------------------

# Narrowed spaces of up to this many points are searched exhaustively (about 0.3 s); the
# greedy search takes over above it.
EXHAUSTIVE_LIMIT = 2048
# Up to this many producers, each greedy step prices every producer's best move and takes the
# one that saves most (steepest descent: fusions are taken in the order of what they save).
# Above it (a pass over every producer per move taken is quadratic in them), one pass takes
# each paying move as it meets it (first improvement) ...
STEEPEST_LIMIT = 48
# ... and passes repeat until one takes no move, or this many have run.
GREEDY_ROUNDS = 4
# The greedy search's most-fused start (every edge fused: a long chain of elementwise ops is one
# kernel in one step) is built and priced only where the program has at most this many reductions,
# products and other non-injective values: above it, it is one kernel no tile holds, costly to form
# and price only to lose to the unfused start.
FUSED_START_LIMIT = 48
# Above this many kernels in the unfused start (a convolutional network: each conv's windows are a
# dozen views, each a move of its own), the views fused in one step are the other start
# (`_views_fused`). Below it (every transformer fixture) the descent decides each view: from the
# views' start it can end dearer (docs/explanation/cost-model.md, extraction step 2).
VIEWS_START_KERNELS = 256
# The greedy descent's end depends on the order its moves pay in: from the outputs back, a
# transformer block's softmax division fuses into the product that reads it first, and then no move
# stitches the softmax into the score kernel, a schedule this model prices cheaper and that runs
# faster (docs/perf/2026-11-29-group-norm.md). Up to this many value classes the descent
# runs a second time under the same model with transfer and compute overlapped (max for sum), whose
# prices make other moves pay first; its end, priced by the model itself, is taken where cheaper, so
# the result never costs more. Above it (ResNet-18: 645 classes, MobileNetV2: 1,033; a 12-layer
# transformer) the second descent would add seconds to an already long search.
SECOND_PATH_LIMIT = 400


@dataclass
class SearchResult:
    choice: Choice
    schedule: Schedule
    cost: ScheduleCost
    evaluated: int
    exhaustive: bool


@dataclass(frozen=True)
class Move:
    """One step of the greedy search: a producer fused into the consumers that read it from global
    memory, with one placement; what the search state becomes if it is taken."""

    delta: float  # cycles of the kernels the move re-forms, after minus before (below 0: it pays)
    choice: Choice
    roots: list[str]  # the values that end a kernel
    per_root: dict[str, Kernel]  # each root's kernel, before merging
    kernels: list[Kernel] | None  # the merged kernels, in run order (None until best_move takes it)
    same_values: bool = False  # it only fused edges: every value reads what it read before
    removed: frozenset = frozenset()  # the merged kernels it replaces ...
    added: tuple = ()  # ... by these
    reformed: frozenset = frozenset()  # the roots whose per-root kernel it forms again (or drops)
    first_moved: int = 0  # the first position in the run order it changes (set when taken)


def order_key(cost: ScheduleCost | None) -> tuple:
    if cost is None:
        return (2, math.inf, 0)
    return (0 if cost.feasible else 1, cost.cycles, len(cost.problems))


def search(data: EGraphData, target: Target, start: Choice, exhaustive_limit: int = EXHAUSTIVE_LIMIT,
           bound: frozenset[str] = frozenset()) -> SearchResult:
    """The cheapest schedule: exhaustive when the narrowed space is small, greedy fusion otherwise
    (twice where the program is small: SECOND_PATH_LIMIT). `bound` names the parameters whose values
    are given at build time (weights)."""
    space = Space(data, target, bound)
    if space.space_size(exhaustive_limit) <= exhaustive_limit:
        return _exhaustive(space)
    found = _greedy(space, start)
    if target.overlap_dma or len(space.value_classes) > SECOND_PATH_LIMIT:
        return found
    # the descent again under the model with transfer and compute overlapped, its end priced by this one
    other = _greedy(space.priced_by(replace(target, overlap_dma=True)), start)
    cost, schedule = space.price(other.choice)
    if order_key(cost) < order_key(found.cost):
        return SearchResult(other.choice, schedule, cost, space.evaluated + other.evaluated, False)
    return replace(found, evaluated=found.evaluated + other.evaluated)


def _exhaustive(space: Space) -> SearchResult:
    """Every point of the narrowed space the roots reach: a depth-first walk choosing one option per
    class, with explicit frames (a chain of thousands of ops is as deep)."""
    best: list = [None, None, None]
    values: Choice = {}

    def settle(pending):
        """Drop classes already chosen from the front of the pending list (a linked list of pairs)."""
        while pending is not None and pending[0] in values:
            pending = pending[1]
        return pending

    def push(node: ENode, rest):
        for child in node.children:
            rest = (space.edge(child)[1], rest)
        return settle(rest)

    pending = None
    for root in space.data.roots:
        pending = (space.value_of(root), pending)
    pending = settle(pending)
    frames: list[list] = []  # [class, option index, the pending list after the class]
    while True:
        if pending is not None:
            cid = pending[0]
            frames.append([cid, 0, pending[1]])
            values[cid] = space.options[cid][0]
            pending = push(values[cid], pending[1])
            continue
        choice = space.full_choice(values)
        cost, schedule = space.price(choice)
        if best[0] is None or order_key(cost) < order_key(best[0]):
            best[:] = [cost, schedule, choice]
        while frames and frames[-1][1] + 1 >= len(space.options[frames[-1][0]]):
            del values[frames.pop()[0]]
        if not frames:
            break
        frame = frames[-1]
        frame[1] += 1
        values[frame[0]] = space.options[frame[0]][frame[1]]
        pending = push(values[frame[0]], frame[2])
    cost, schedule, choice = best
    return SearchResult(choice, schedule, cost, space.evaluated, True)


def _most_fused(space: Space, values: Choice) -> Choice:
    """`values`' op structure with every edge fused, each with its best placement: the greedy
    search's other start (a long chain of injective ops is one kernel in one step, instead of one
    move per producer, each re-forming the growing kernel)."""
    # options are sorted most fused first, best placements first
    return {cid: next(n for n in space.options[cid] if space.structure(n) == space.structure(node))
            for cid, node in values.items()}


def _views_fused(space: Space, values: Choice, by_sig) -> Choice:
    """`values` with every edge reading a view (a reshape, transpose, slice or broadcast: FREE_OPS)
    fused, where the reader has that option: a large program's other start (a convolution's windows
    are dozens of views, each a move of the descent otherwise)."""
    out = dict(values)
    for cid, node in values.items():
        op, attrs, edges = space.signature(node)
        fused = tuple((g and not (v in values and values[v].op in FREE_OPS), v) for g, v in edges)
        if fused != edges:
            out[cid] = next(iter(by_sig[cid].get((op, attrs, fused), ())), node)
    return out


def _greedy(space: Space, start: Choice) -> SearchResult:
    """Fuse producers into their consumers, one producer (and one placement) at a time, while it pays.

    The start is the cheapest of `start`'s op structure with every edge global, the same with every
    view fused (`_views_fused`; tried above VIEWS_START_KERNELS kernels) and the same with every
    edge fused (`_most_fused`; tried up to FUSED_START_LIMIT non-injective values); the moves
    are `_State.best_move`'s. The descent runs twice from it, coarse and fine (`_State.fine`; coarse
    only above STEEPEST_LIMIT producers); from the cheaper end, passes over the values fused on
    edges that keep their placements (`_State.held`) hold them another way while it pays (one pass
    above STEEPEST_LIMIT)."""
    by_sig: dict[str, dict[tuple, list[ENode]]] = {}
    for cid, opts in space.options.items():
        table: dict[tuple, list[ENode]] = {}
        for n in opts:
            table.setdefault(space.signature(n), []).append(n)
        by_sig[cid] = table
    values = {cid: space.start_option(cid, start[cid], by_sig[cid]) for cid in space.value_classes if cid in start}
    unfused = space.full_choice(values)
    # priced first (kernels cached by their contents), so only the start taken is built as a state
    begin, begin_cost = unfused, space.price(unfused)[0]
    if begin_cost is not None and len(begin_cost.kernels) > VIEWS_START_KERNELS:
        views = space.full_choice(_views_fused(space, values, by_sig))
        views_cost = space.price(views)[0]
        if order_key(views_cost) <= order_key(begin_cost):
            begin, begin_cost = views, views_cost
    if sum(not is_injective(n.op) and n.op not in ("param", "const") for n in values.values()) <= FUSED_START_LIMIT:
        fused = space.full_choice(_most_fused(space, values))
        begin = fused if order_key(space.price(fused)[0]) < order_key(begin_cost) else begin
    state = _State(space, begin, fine=False)
    if state.kernels is not None:
        shared_inputs = [cid for cid in space.params if len(space.consumers.get(cid, ())) >= 2]
        small = len(state.roots) + len(shared_inputs) <= STEEPEST_LIMIT
        ends = []
        # a large program: one descent (each move re-merges kernels of many ops)
        for fine in (False, True) if small else (False,):
            end = state if not fine else _State(space, begin, fine=True)
            if small:
                _steepest_descent(end, shared_inputs, by_sig)
            else:
                _first_improvement(end, lambda: list(reversed(end.roots)) + shared_inputs, by_sig, GREEDY_ROUNDS)
            ends.append(end)
        # the first of equals (one end: nothing to compare, no whole program to build)
        state = ends[0] if len(ends) == 1 else min(ends, key=lambda end: order_key(space.price(end.choice)[0]))
        state.fine = True  # then hold fused values another way where it pays; where that opens a
        # fusing move (a softmax's exp, once held for the tile, joins its sum and division), the
        # diamonds near the values held are tried again (`near`; every root again cost BERT's
        # extraction a third more)
        for _ in range(GREEDY_ROUNDS):
            moved = _first_improvement(state, state.held, by_sig, GREEDY_ROUNDS if small else 1)
            if not moved or not _first_improvement(state, lambda held=moved: state.near(held), by_sig, 1):
                break
    cost, schedule = space.price(state.choice)
    return SearchResult(state.choice, schedule, cost, space.evaluated, False)


def _steepest_descent(state: _State, shared_inputs: list[str], by_sig) -> None:
    """Take the move that saves most of all producers' best moves, until none pays."""
    while True:
        moves = [m for p in list(reversed(state.roots)) + shared_inputs for m in [state.best_move(p, by_sig)]
                 if m is not None]
        if not moves:
            return
        state.take(min(moves, key=lambda m: m.delta))


def _first_improvement(state: _State, producers, by_sig, rounds: int) -> list[str]:
    """Passes over `producers()`, each taking every paying move as it meets it (`rounds` at most);
    the producers moved, in the order they were."""
    moved = []
    for _ in range(rounds):
        improved = False
        # outputs too: fused into its consumers, an output is stored by the kernel that computes it
        for producer in producers():
            if state.try_fuse(producer, by_sig):
                improved = True
                moved.append(producer)
        if not improved:
            break
    return list(dict.fromkeys(moved))


class _State:
    """One choice's per-root kernels and merged kernels, kept up to date move by move."""

    def __init__(self, space: Space, choice: Choice, fine: bool = True):
        self.space = space
        self.choice = choice
        # fine: a move fuses with its placement on every edge that keeps its placements apart;
        # coarse: only where the producer's class mixes kinds of e-node, elsewhere the edge takes
        # the narrowing's best rank (a descent over fewer, larger steps; each ends in places the
        # other misses, so both are run)
        self.fine = fine
        try:
            roots, outputs, _ = find_roots(space.data, choice)
        except CyclicChoice:
            self.kernels = None
            return
        self.roots = roots
        self.outputs = set(outputs)
        self.per_root = {r: space.form(choice, r) for r in roots}
        self.readers = self._readers()
        try:
            merged = merge_kernels([self.per_root[r] for r in roots], self.outputs, space.join)
        except CyclicChoice:
            self.kernels = None
            return
        self.kernels: list[Kernel] = merged
        self.member = self._members()
        self._index_kernels()

    def _index_kernels(self) -> None:
        """Which merged kernel writes each root, computes each value, reads each input shared: a move
        looks up the kernels it touches (`_evaluate`, `_close`) instead of scanning them all."""
        self.kernel_of: dict[str, Kernel] = {}
        self.computed_in: dict[str, set[Kernel]] = {}
        self.shared_in: dict[str, set[Kernel]] = {}
        for k in self.kernels:
            self._index(k, True)
        self.position = {k: i for i, k in enumerate(self.kernels)}  # (the run order: sums in it)

    def _index(self, k: Kernel, add: bool) -> None:
        for r in k.roots:
            if add:
                self.kernel_of[r] = k
            elif self.kernel_of.get(r) is k:
                del self.kernel_of[r]
        for table, cids in ((self.computed_in, {inst.cid for inst in k.instances}),
                            (self.shared_in, {rd.cid for rd in k.reads if rd.shared})):
            for cid in cids:
                if add:
                    table.setdefault(cid, set()).add(k)
                else:
                    table[cid].discard(k)

    def _readers(self) -> dict[str, list[str]]:
        """value -> the value classes reading it (any placement), over what the choice reaches."""
        out: dict[str, list[str]] = {}
        seen: set[str] = set()
        stack = list(self.outputs)
        while stack:
            cid = stack.pop()
            if cid in seen:
                continue
            seen.add(cid)
            for child in self.choice[cid].children:
                value = self.space.edge(child)[1]
                out.setdefault(value, []).append(cid)
                stack.append(value)
        return out

    def _members(self) -> dict[str, set[str]]:
        """value -> the roots whose per-root kernel computes it."""
        out: dict[str, set[str]] = {}
        for r, k in self.per_root.items():
            for inst in k.instances:
                out.setdefault(inst.cid, set()).add(r)
        return out

    def best_move(self, producer: str, by_sig) -> Move | None:
        """The move that fuses `producer` most cheaply, if it pays; None if no placement pays.

        This is where fusion is decided. For each placement the producer's edges may take (an
        input's only `shared`: its consumers then read it once, in one kernel), every consumer
        reading `producer` from global memory switches to its e-node that reads it so (`_trial`);
        the kernels that changes are formed, merged and priced again (`_evaluate`). The move pays
        when those kernels' cycles fall: a launch and the producer's round trip through global
        memory saved, against recomputation, a larger on-chip footprint (smaller tiles) or a
        kernel that no longer fits."""
        paying = []
        placements = (Placement.SHARED,) if producer in self.space.params else (
            Placement.INLINE, Placement.LOCAL, Placement.SHARED)
        tried = set()
        for placement in placements:
            for siblings in (False, True):
                trial = self._trial(producer, placement, by_sig, siblings)
                if trial is None:
                    continue
                # where the narrowing kept one placement, every placement's trial is the same choice
                # (and often with siblings too): evaluated once (counted as before)
                same = frozenset((c, id(trial[0][c])) for c in trial[1])
                if same in tried:
                    self.space.evaluated += 1
                    continue
                tried.add(same)
                move = self._evaluate(trial, producer)
                if move is not None and move.delta < 0:
                    paying.append(move)
        # the cheapest that orders (the whole program's kernels are ordered only for it: a move whose
        # kernels depend on each other denotes no program)
        for move in sorted(paying, key=lambda m: m.delta):
            try:
                kernels, first = self._reordered(move)
            except CyclicChoice:
                continue
            return replace(move, kernels=kernels, first_moved=first)
        return None

    def _reordered(self, move: Move) -> tuple[list[Kernel], int]:
        """The run order after `move`: the kernels it replaces span a window of the present order;
        only the window is ordered again, with the new kernels in it. The kernels before the window
        read nothing the move writes (their writers came before them, none of those replaced), and the
        kernels after it come after whatever the window writes; so the window's order is the whole's
        unless a new kernel reads a value written after the window: then the whole is ordered again.
        Raises CyclicChoice where the new kernels and the window's depend on each other. Returns the
        order and the window's first position (the positions before it are as they were)."""
        position = self.position
        if move.removed:
            lo = min(position[k] for k in move.removed)
            hi = max(position[k] for k in move.removed)
            writers = (self.kernel_of.get(cid) for k in move.added for cid in k.read_values)
            if not any(w is not None and w not in move.removed and position[w] > hi for w in writers):
                window = [k for k in self.kernels[lo:hi + 1] if k not in move.removed] + list(move.added)
                return self.kernels[:lo] + order_kernels(window, self.outputs) + self.kernels[hi + 1:], lo
        return order_kernels([k for k in self.kernels if k not in move.removed] + list(move.added), self.outputs), 0

    def take(self, move: Move) -> None:
        old = self.per_root
        self.choice, self.roots, self.per_root, self.kernels = move.choice, move.roots, move.per_root, move.kernels
        if not move.same_values:
            self.readers = self._readers()
            self.member = self._members()
        else:  # the values read are the same: only the re-formed roots' kernels change who computes what
            for r in move.reformed:
                before, after = old.get(r), move.per_root.get(r)
                if before is after:
                    continue
                for inst in before.instances if before is not None else ():
                    self.member.get(inst.cid, set()).discard(r)
                for inst in after.instances if after is not None else ():
                    self.member.setdefault(inst.cid, set()).add(r)
        for k in move.removed:
            self._index(k, False)
            del self.position[k]
        for k in move.added:
            self._index(k, True)
        for i in range(move.first_moved, len(self.kernels)):  # (the run order: sums in it)
            self.position[self.kernels[i]] = i

    def near(self, values: list[str]) -> list[str]:
        """The roots (in the descent's order) whose readers form a diamond (`diamond`), computed in a
        kernel that computes one of `values` or read by one: where holding `values` another way can
        open a fusing move."""
        kernels = {k for v in values for k in self.computed_in.get(v, ())}
        computed_in = self.computed_in
        return [p for p in reversed(self.roots) if self.diamond(p)
                and (not kernels.isdisjoint(computed_in.get(p, ()))
                     or any(not kernels.isdisjoint(computed_in.get(r, ())) for r in self.readers.get(p, ())))]

    def diamond(self, producer: str) -> set[str]:
        """The readers of `producer` that another of its readers reads from global memory (a
        softmax's `sum(e)` beside `e / sum(e)`)."""
        readers = dict.fromkeys(self.readers.get(producer, ()))
        if len(readers) < 2:
            return set()
        signature = self.space.signature
        return {v for c in readers for g, v in signature(self.choice[c])[2] if g and v in readers}

    def try_fuse(self, producer: str, by_sig) -> bool:
        move = self.best_move(producer, by_sig)
        if move is None:
            return False
        self.take(move)
        return True

    def _trial(self, producer: str, placement: Placement, by_sig,
               siblings: bool = False) -> tuple[Choice, set[str]] | None:
        """The choice with `producer` fused into its readers with `placement`. With `siblings`, a
        reader also fuses the other values it reads from global memory that the producer's kernel
        writes (`0.5 * h` and `erf(h / sqrt 2) + 1`, both of h's kernel, multiplied: fused one at a
        time, the product's kernel would read what it writes); None where no reader has any."""
        space = self.space
        trial = None  # (the choice copied at the first change: most sibling trials change nothing)
        changed = set()
        kernel = self.kernel_of.get(producer)
        # with `siblings`, a diamond's readers (`sum(e)` and `e / sum(e)`) join the producer's kernel
        # in one move
        diamond = self.diamond(producer) if siblings else set()
        for consumer in dict.fromkeys(self.readers.get(producer, ())):
            node = self.choice[consumer]
            op, attrs, edges = space.signature(node)
            together = {producer}
            if siblings:
                together |= {v for g, v in edges if g and v != producer and v not in space.params
                             and ((kernel is not None and self.kernel_of.get(v) is kernel) or v in diamond)}
                if len(together) == 1 and consumer not in diamond:
                    continue
            fused = tuple((False, v) if v in together else (g, v) for g, v in edges)
            if fused == edges and not self._keeps(consumer, node, producer):
                continue
            alt = next((n for n in by_sig[consumer].get((op, attrs, fused), ())
                        if self._fuses(consumer, node, n, producer, placement, together)), None)
            if alt is not None and alt is not node:
                trial = trial or dict(self.choice)
                trial[consumer] = alt
                changed.add(consumer)
        return (trial, changed) if changed else None

    def _fuses(self, consumer: str, node: ENode, alt: ENode, producer: str, placement: Placement,
               together: set[str] = frozenset()) -> bool:
        """The alternative changes only the edges reading `producer`: from global memory to
        `placement` (or to the best placement where the narrowing kept one), or, where the edges
        keep their placements apart, from any placement to `placement`; and the edges reading the
        producer's siblings (`together`, `_trial`) from global memory to any placement."""
        keeps = self._keeps(consumer, node, producer)
        for a, b in zip(node.children, alt.children):
            ea, eb = self.space.edge(a), self.space.edge(b)
            if ea.value == producer and (ea.placement is Placement.GLOBAL or keeps):
                if eb.placement is not placement and (keeps or producer in self.space.params):
                    return False
            elif ea.value in together and ea.placement is Placement.GLOBAL:
                if eb.value != ea.value or eb.placement is Placement.GLOBAL:
                    return False
            elif ea != eb:
                return False
        return True

    def held(self) -> list[str]:
        """Values fused into a consumer on an edge that keeps its placements apart: a move may
        hold them another way (recomputed where read, forwarded, or held for the tile)."""
        out = []
        for producer, consumers in self.readers.items():
            if producer in self.roots or producer in self.space.params:
                continue
            for consumer in dict.fromkeys(consumers):
                node = self.choice[consumer]
                edges = map(self.space.edge, node.children)
                if self._keeps(consumer, node, producer) and any(
                        e.value == producer and e.placement is not Placement.GLOBAL for e in edges):
                    out.append(producer)
                    break
        return out

    def _keeps(self, consumer: str, node: ENode, producer: str) -> bool:
        if self.fine:
            return self.space.keeps_placement(consumer, node, producer)
        return self.space.mixes_kinds(producer)

    def _evaluate(self, trial: tuple[Choice, set[str]], producer: str) -> Move | None:
        """The move to `trial` (a choice and the consumers it changed), priced only where it differs;
        None if it makes no runnable program (a cycle of kernels), no price, or cannot pay.

        Re-formed: the per-root kernels holding a changed consumer or the producer. Re-merged and
        re-priced: the merged kernels holding one of those roots, closed over the kernels that
        compute a value they compute or read an input they read shared (those may merge with
        them, `_close`). Every other merged kernel keeps its price, so a move costs what it
        touches, not the program."""
        choice, changed = trial
        space = self.space
        self.space.evaluated += 1
        roots = self._roots_after(choice, changed, producer)
        same_values = roots is not None
        if roots is None:
            try:
                roots, _, _ = find_roots(space.data, choice)
            except CyclicChoice:
                return None
        affected = set()
        for consumer in changed:
            affected |= self.member.get(consumer, set())
        affected.add(producer)
        reformed = frozenset()
        if same_values:  # this state's roots, less the producer at most: a copy, re-formed where affected
            per_root = dict(self.per_root)
            if len(roots) < len(self.roots):
                del per_root[producer]
            for r in affected:
                if r in per_root:
                    per_root[r] = space.form(choice, r)
            reformed = frozenset(r for r in affected if r in self.per_root)
        else:
            per_root = {r: (space.form(choice, r) if r in affected or r not in self.per_root else self.per_root[r])
                        for r in roots}
        # the merged kernels the move can change: those holding an affected root, closed over joins
        touched = {self.kernel_of[r] for r in affected if r in self.kernel_of}
        touched |= {self.kernel_of[r] for r in self.roots if r not in per_root}
        group_roots = {r for k in touched for r in k.roots if r in per_root}
        group_roots |= {r for r in per_root if r not in self.kernel_of}  # (roots not written now)
        group_roots |= affected & set(per_root)
        group_roots = self._close(group_roots, per_root, touched)
        try:
            new = merge_kernels([per_root[r] for r in roots if r in group_roots], self.outputs, space.join)
        except CyclicChoice:
            return None
        old = sum(space.price_kernel(k).price.cycles for k in sorted(touched, key=self.position.__getitem__))
        # a move whose new kernels cost what it replaces before the ones not priced yet are (each at its
        # lower bound: launch, outputs, work) cannot pay, and they are not priced (a kernel of two
        # convolution blocks fused that does more work than the two apart)
        if sum(space.bound_kernel(k) for k in new) >= old:
            return None
        cost = sum(space.price_kernel(k).price.cycles for k in new)
        if math.isnan(cost - old):
            return None
        return Move(cost - old, choice, roots, per_root, None, same_values, frozenset(touched), tuple(new), reformed)

    def _roots_after(self, choice: Choice, changed: set[str], producer: str) -> list[str] | None:
        """The roots of `choice`, a move from this state's choice that only fuses edges reading
        `producer` (each changed consumer reads the same values, none through a new global edge): this
        state's roots, less the producer where nothing reads it from global memory any more. The
        values and their order are unchanged, so no walk of the program is needed (find_roots per
        move made the search quadratic in the program). None where the move is not of that kind."""
        edge = self.space.edge
        for consumer in changed:
            old, new = self.choice[consumer].children, choice[consumer].children
            if len(old) != len(new):
                return None
            for a, b in zip(map(edge, old), map(edge, new)):
                if a.value != b.value or (b.placement is Placement.GLOBAL and a.placement is not Placement.GLOBAL):
                    return None
                if a.value != producer and a.placement is Placement.GLOBAL and b.placement is not Placement.GLOBAL:
                    return None  # (a sibling fused too: which values stay roots is walked again)
        if producer not in self.roots or producer in self.outputs:
            return self.roots
        for consumer in dict.fromkeys(self.readers.get(producer, ())):
            edges = map(edge, choice[consumer].children)
            if any(e.value == producer and e.placement is Placement.GLOBAL for e in edges):
                return self.roots
        return [r for r in self.roots if r != producer]

    def _close(self, group: set[str], per_root: dict[str, Kernel], touched: set[Kernel]) -> set[str]:
        """`group` with every merged kernel that computes a value the group computes, or reads one of
        its shared inputs (those may join it); `touched` grows with them."""
        while True:
            values = set()
            inputs = set()
            for r in group:
                k = per_root[r]
                values |= {inst.cid for inst in k.instances
                           if inst.node.op not in ("param", "const") and inst.key not in k.index_only}
                inputs |= {rd.cid for rd in k.reads if rd.shared}
            found = {k for cid in values for k in self.computed_in.get(cid, ())}
            found |= {k for cid in inputs for k in self.shared_in.get(cid, ())}
            found -= touched
            for k in found:
                touched.add(k)
                group |= {r for r in k.roots if r in per_root}
            if not found:
                return group
