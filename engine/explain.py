"""Why is this kernel fused (`stitch compile --explain`): for each fused edge of the extracted
schedule, the rules that offered its placement; for each boundary between kernels, the other
placements the e-graph holds for it and what the schedule costs with each, or that no rule
offered one.

Which rules offered a placement is asked of the saturated e-graph itself: a rule offered
`local` at operand i of value v when its query (left side and conditions, as compiled for egglog)
matches at v's e-class with that operand's producer, and its right side is in the class. That is
exact for the values of the program (each has its name in the e-graph); a value only the rules
made is reported without rules. An alternative at a boundary is priced by the cost model as the
schedule the search took with that one edge changed (form.py `build_schedule`, cost.py), which
also says when it breaks a target limit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from egglog import bindings as eb

from .ir.errors import StitchError
from .ir.graph import Graph
from .pipeline import extract, saturate_program
from .rewrite.egraph import FAMILIES, NAMED_FAMILIES, PLACEMENT_CTORS
from .rewrite.egraph_data import EGraphData
from .rewrite.limits import Limits
from .rewrite.rulecompile import base_rule_name, rule_variants
from .rewrite.rules import RuleFile
from .schedule.cost import schedule_cost
from .schedule.form import build_schedule
from .schedule.kernel import CyclicChoice, RefKind
from .schedule.schedule_print import global_names
from .schedule.target import Target

CTOR_OF = {name: ctor for name, ctor in PLACEMENT_CTORS.items()}


@dataclass
class Offer:
    """A rule that offered a placement: its name and where it is written."""

    rule: str
    where: str  # file:line (a built-in rule file's path within the package: rules/fusion.rules)

    def __str__(self) -> str:
        return f"{self.rule} ({self.where})"


@dataclass
class Edge:
    """One operand of one value in the schedule: `consumer` reads `producer` as `placement`."""

    kernel: int
    consumer: str  # the value's text (`%3 = sub(...)`'s op and its operand number)
    operand: int
    producer: str
    placement: str
    offers: list[Offer] = field(default_factory=list)
    traced: bool = True  # False: a value the rules made, not the program's (its rules are not asked)


@dataclass
class Alternative:
    placement: str
    cycles: float | None  # the schedule's, with this edge so placed; None where it breaks a limit
    problems: list[str]
    offers: list[Offer]


@dataclass
class Boundary:
    """A value read from global memory by another kernel, and what else the e-graph offered there."""

    edge: Edge
    alternatives: list[Alternative]


@dataclass
class Explanation:
    func: str
    target: str
    cycles: float
    kernels: int
    fused: list[Edge]
    boundaries: list[Boundary]
    extracted: object = None  # the SearchResult explained (its schedule and cost)

    def text(self) -> str:
        out = [f"explain {self.func} on {self.target}: {self.kernels} kernel(s), {self.cycles:.4g} cycles"]
        for k in range(self.kernels):
            out.append(f"kernel k{k}")
            for e in (e for e in self.fused if e.kernel == k):
                rules = ", ".join(map(str, e.offers)) if e.offers else (
                    "a value the rules made: not traced" if not e.traced else "no rule found")
                out.append(f"  {e.consumer} reads {e.placement} {e.producer} (operand {e.operand}): {rules}")
            for b in (b for b in self.boundaries if b.edge.kernel == k):
                e = b.edge
                out.append(f"  boundary: {e.consumer} reads global {e.producer} (operand {e.operand})")
                if not b.alternatives:
                    out.append("    no rule offered another placement")
                for a in b.alternatives:
                    by = ", ".join(map(str, a.offers)) or "(rules not traced)"
                    if a.cycles is None:
                        out.append(f"    {a.placement} (by {by}): breaks the target's limits: {'; '.join(a.problems)}")
                    else:
                        verdict = "dearer" if a.cycles >= self.cycles else "cheaper: the search did not find it"
                        out.append(f"    {a.placement} (by {by}): {a.cycles:.4g} cycles against {self.cycles:.4g} "
                                   f"chosen ({verdict})")
        return "\n".join(out) + "\n"

    def to_json(self) -> dict:
        def edge(e: Edge) -> dict:
            return {"kernel": e.kernel, "consumer": e.consumer, "operand": e.operand, "producer": e.producer,
                    "placement": e.placement, "rules": [{"rule": o.rule, "at": o.where} for o in e.offers],
                    "traced": e.traced}

        return {"func": self.func, "target": self.target, "cycles": self.cycles, "kernels": self.kernels,
                "fused": [edge(e) for e in self.fused],
                "boundaries": [{**edge(b.edge), "alternatives": [
                    {"placement": a.placement, "cycles": a.cycles, "problems": a.problems,
                     "rules": [{"rule": o.rule, "at": o.where} for o in a.offers]} for a in b.alternatives]}
                    for b in self.boundaries]}


def explain(graph: Graph, rule_files: list[RuleFile], target: Target, limits: Limits = Limits()) -> Explanation:
    """Saturate and extract as `compile` does, then explain the schedule taken."""
    if graph.symbols:
        raise StitchError(f"--explain takes a static program; '{graph.name}' has symbols "
                          f"({', '.join(graph.symbols)})", hint="give them sizes (stitch import --dim NAME=N)")
    run, _ = saturate_program(graph, rule_files, limits)
    try:
        data = run.data()
        extracted = extract(graph, data, target)
        names = _program_names(run, graph)
        asker = _Asker(run, rule_files, names)
        fused, boundaries = [], []
        choice, chosen = extracted.choice, extracted.cost.cycles
        globals_ = global_names(extracted.schedule)
        for k, kernel in enumerate(extracted.schedule.kernels):
            for inst in kernel.instances:
                for i, ref in enumerate(inst.operands):
                    if ref.kind is RefKind.CONST:
                        continue
                    child = inst.node.children[i]
                    producer = choice[child].children[0] if choice[child].is_placement else child
                    source = f"%{ref.key}" if ref.held else globals_.get(producer, producer)
                    edge = Edge(k, f"%{inst.key} = {inst.node.op}", i, source,
                                choice[child].op if choice[child].is_placement else "global")
                    if ref.held:
                        edge.traced = inst.cid in names
                        edge.offers = asker.offers(inst.cid, inst.node, i, edge.placement, producer)
                        fused.append(edge)
                    elif extracted.schedule.kernel_of(producer) is not None:  # (another kernel writes it)
                        alts = _alternatives(data, choice, inst, i, producer, target, asker)
                        boundaries.append(Boundary(edge, alts))
        return Explanation(graph.name, target.name, chosen, len(extracted.schedule.kernels), fused, boundaries,
                           extracted)
    finally:
        run.release()


def _alternatives(data: EGraphData, choice, inst, i: int, producer: str, target: Target, asker) -> list[Alternative]:
    """Each other placement of operand i the consumer's e-class holds (its other operands as chosen),
    priced as the whole schedule with that one edge changed."""
    out, seen = [], set()
    for node in data.classes[inst.cid]:
        if (node.ctor, node.op, node.attrs) != (inst.node.ctor, inst.node.op, inst.node.attrs) or len(
                node.children) != len(inst.node.children):
            continue
        if any(a != b for j, (a, b) in enumerate(zip(node.children, inst.node.children)) if j != i):
            continue
        for placed in data.classes.get(node.children[i], []):
            if not placed.is_placement or placed.op == "global" or placed.children[0] != producer or placed.op in seen:
                continue
            seen.add(placed.op)
            trial = dict(choice)
            trial[inst.cid], trial[node.children[i]] = node, placed
            try:
                cost = schedule_cost(build_schedule(data, trial), target)
            except CyclicChoice:
                continue
            out.append(Alternative(placed.op, cost.cycles if cost.feasible else None, list(cost.problems),
                                   asker.offers(inst.cid, node, i, placed.op, producer)))
    return out


def _program_names(run, graph: Graph) -> dict[str, str]:
    """E-class id -> the egglog name of a program value in it (`$n<id>`)."""
    names = [f"$n{n.id}" for n in graph.nodes]
    serialized = run.egraph.serialize([eb.Var(eb.PanicSpan(), name) for name in names])
    classes = json.loads(serialized.to_json()).get("root_eclasses", [])
    out: dict[str, str] = {}
    for cid, name in zip(classes, names):
        out.setdefault(cid, name)
    return out


class _Asker:
    """Asks the saturated e-graph which rules offered a placement (module docstring)."""

    def __init__(self, run, rule_files: list[RuleFile], names: dict[str, str]):
        self.run, self.names = run, names
        self.variants = [(rule, rf, name, query, _parse(rhs)) for rf in rule_files for rule in rf.rules
                         for name, query, rhs in rule_variants(rule, rf.source)]
        self.memo: dict[tuple, list[Offer]] = {}

    def offers(self, cid: str, node, i: int, placement: str, producer: str) -> list[Offer]:
        consumer = self.names.get(cid)
        key = (cid, node.ctor, node.op, i, placement, producer)
        if consumer is None or key in self.memo:
            return self.memo.get(key, [])
        ctor = CTOR_OF[placement]
        found: list[Offer] = []
        for rule, rf, name, query, rhs in self.variants:
            if any(o.rule == rule.name for o in found) or not isinstance(rhs, list) or rhs[0] != node.ctor:
                continue
            tensors = _tensor_args(rhs)
            if i >= len(tensors) or not (isinstance(tensors[i], list) and tensors[i][0] == ctor):
                continue
            if node.ctor in NAMED_FAMILIES and not (rhs[1].startswith("?") or rhs[1] == f'"{node.op}"'):
                continue
            pin = f" (= {_text(tensors[i])} ({ctor} {self.names[producer]}))" if producer in self.names else ""
            facts = f"(= ?__root {consumer}) {query} (= ?__root {_text(rhs)}){pin}"
            if self._holds(facts):
                found.append(Offer(base_rule_name(name), f"{_shown(rf.filename)}:{rule.pos.line}"))
        self.memo[key] = found
        return found

    def _holds(self, facts: str) -> bool:
        egraph = self.run.egraph
        try:
            egraph.run_program(*egraph.parse_program(f"(check {facts})"))
            return True
        except eb.EggSmolError:
            return False


def _shown(filename: str) -> str:
    """A rule file's name as shown: a built-in one's path within the package, a user's as given."""
    path = Path(filename)
    package = Path(__file__).resolve().parent.parent
    return str(path.relative_to(package)) if path.is_absolute() and path.is_relative_to(package) else filename


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[()]|[^\s()]+')


def _parse(text: str):
    """An egglog term as nested lists of atoms."""
    stack: list[list] = [[]]
    for tok in _TOKEN.findall(text):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok)
    return stack[0][0]


def _text(term) -> str:
    return f"({' '.join(map(_text, term))})" if isinstance(term, list) else term


def _tensor_args(term: list) -> list:
    """The tensor operands of a family's term (its op name and attributes dropped)."""
    ctor, args = term[0], term[1:]
    if ctor not in FAMILIES:
        return args
    if ctor in NAMED_FAMILIES:
        args = args[1:]
    _, attr_names = FAMILIES[ctor]
    return args[:len(args) - len(attr_names)]
