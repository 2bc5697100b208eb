"""Saturation: load a program and rule files into egglog and run them within limits.

The run schedule, in one place: each iteration runs the `analysis` ruleset to
saturation, then one step of every rule file's ruleset under egglog's back-off
scheduler (a rule whose matches in that step exceed `match_limit` is banned for
the step, so AC-style rules cannot grow the e-graph by millions of nodes at
once), then analysis again. Between iterations the node, iteration and time
limits are checked, since egglog itself has no wall-clock limit.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field

from egglog import bindings as eb

from ..ir.errors import StitchError
from ..ir.extent import planning_values
from ..ir.graph import Graph
from ..ir.memory import over_budget
from ..ir.program import INT_DTYPES
from .egraph import PRELUDE, graph_to_egglog
from .egraph_data import EGraphData
from .limits import Limits  # noqa: F401 (callers read it from here too)
from .rulecompile import base_rule_name, compile_rule_file
from .rules import RuleFile
from .symbols import Encoding

T_CONSTRUCTORS = (
    "Input", "Const", "Un", "Bin", "Where", "Red", "MatMul", "Transpose", "Reshape", "Bcast", "Cast", "Slice", "Concat",
    "Gather", "Iota",
    "Global", "Shared", "Local", "Inline",
)


@dataclass
class RunReport:
    iterations: int = 0
    enodes: int = 0
    eclasses: int = 0
    matches: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    stop_reason: str = "saturated"  # saturated | iteration limit | node limit | time limit | memory limit
    rulesets: list[str] = field(default_factory=list)
    banned: bool = False

    def render(self) -> str:
        lines = [
            f"stopped: {self.stop_reason} after {self.iterations} iteration(s) in {self.seconds * 1e3:.1f} ms",
            f"e-graph: {self.enodes} e-nodes, {self.eclasses} e-classes",
            f"rulesets: {', '.join(self.rulesets) or '(none)'}",
            "matches per rule:",
        ]
        width = max((len(k) for k in self.matches), default=0)
        for name, n in sorted(self.matches.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {name:<{width}}  {n}")
        if not self.matches:
            lines.append("  (no rule matched)")
        return "\n".join(lines)


def exact_int_constants(graph: Graph) -> dict[tuple[float, str], int]:
    """The integer literals an f64 cannot hold (beyond 2**53), keyed as the e-graph stores them.

    The e-graph keeps a literal's value as an f64, so that rules match literals of every dtype;
    rules only introduce small literals, so an inexact f64 can only be one of the program's own
    and this table gives its value back at extraction. Two such literals with the same f64 in one
    program would be confused: that is an error."""
    table: dict[tuple[float, str], int] = {}
    for node in graph.nodes:
        if node.op != "const" or node.type.dtype not in INT_DTYPES:
            continue
        value = int(node.attr("value"))
        key = (float(value), node.type.dtype)
        if float(value) == value:
            continue
        if table.setdefault(key, value) != value:
            raise StitchError(f"integer literals {table[key]} and {value} are too close to tell apart "
                              "(stitch keeps literals beyond 2**53 apart only when their float64 values differ)",
                              node.pos, hint="compute one from the other, or pass it as a parameter")
    return table


COMMAND_BATCH = 32


def top_level_commands(text: str) -> list[str]:
    """egglog text cut into its top-level s-expressions (strings and `;` comments respected)."""
    commands, depth, start, i, n = [], 0, None, 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == ";":
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif c == "(":
            if depth == 0:
                start = i
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                commands.append(text[start:i + 1])
        i += 1
    if depth != 0:  # unbalanced: let egglog report it
        return [text]
    return commands


# E-graphs with the prelude and a rule set loaded, kept between runs of one thread (egglog's
# e-graphs belong to the thread that made them): loading them takes about 0.1 s, a small
# program's whole saturation about as long. A run starts from one with egglog's `(push)`, and
# `release` pops back to it. Popping keeps the primitives the run interned (strings, numbers:
# what it names, not the e-classes, which come back as a fresh e-graph numbers them), so a loaded
# e-graph is dropped after LOADED_RUNS runs.
LOADED_KEEP = 4  # rule sets per thread
LOADED_RUNS = 256


class _Loaded(threading.local):
    def __init__(self):
        self.idle: dict[str, tuple[eb.EGraph, int]] = {}  # rules' egglog text -> e-graph, runs it served


_LOADED = _Loaded()


class EGraphRun:
    """A program's e-graph with the rule files loaded; saturate it with `run`, and `release` it when
    done (then the next run of the same rules on this thread starts without loading them)."""

    def __init__(self, graph: Graph, rule_files: list[RuleFile]):
        self.graph = graph
        self.rule_files = rule_files
        texts = [compile_rule_file(rf) for rf in rule_files]
        self.egglog_rule_names: list[str] = [name for text in texts
                                             for name in re.findall(r':name "((?:[^"\\]|\\.)*)"', text)]
        self._steps: dict[int, list] = {}
        self._rules_key = "\n".join(texts)
        self.egraph, self._served = _LOADED.idle.pop(self._rules_key, (None, 0))
        if self.egraph is None:
            self.egraph = eb.EGraph()
            self._exec(PRELUDE, "the e-graph prelude")
            for rf, text in zip(rule_files, texts):
                self._exec(text, f"rule file {rf.filename}")
        self._exec("(push)", "a restore point")
        self.encoding = Encoding.of(graph)  # how its symbolic dimensions are held (symbols.py)
        text, self.roots = graph_to_egglog(graph, self.encoding)
        self._exec(text, "the program")
        self.exact_ints = exact_int_constants(graph)
        self.planning = planning_values(graph.symbols)  # what scheduling sizes them at
        self._json: str | None = None

    def release(self) -> None:
        """Done with the e-graph (what `data` read stays): pop back to the loaded rules and keep them for
        this thread's next run of the same rules. Call it from the thread that made the run."""
        egraph, self.egraph = self.egraph, None
        if egraph is None or self._served + 1 >= LOADED_RUNS:
            return
        egraph.run_program(*egraph.parse_program("(pop)"))
        idle = _LOADED.idle
        idle[self._rules_key] = (egraph, self._served + 1)
        while len(idle) > LOADED_KEEP:
            del idle[next(iter(idle))]

    def _exec(self, text: str, what: str):
        """Run egglog text, COMMAND_BATCH top-level commands per call: egglog's parse and run take time
        and memory quadratic in the commands of one call (2,000 one-line `let`s: 9.4 s and 1.5 GB at
        once, 1.3 s and 17 MB in batches of 20), so a 10,000-op program or 1,000 rules in one call
        exhausted the machine."""
        try:
            commands = top_level_commands(text)
            for start in range(0, len(commands), COMMAND_BATCH):
                batch = "\n".join(commands[start:start + COMMAND_BATCH])
                self.egraph.run_program(*self.egraph.parse_program(batch))
        except eb.EggSmolError as err:
            raise StitchError(f"egglog rejected {what}: {err}") from None

    def _run(self, commands):
        """Run parsed commands; an egglog failure during saturation becomes a user error."""
        try:
            return self.egraph.run_program(*commands)
        except BaseException as err:  # egglog panics raise pyo3's PanicException, a BaseException
            if isinstance(err, (KeyboardInterrupt, SystemExit)):
                raise
            detail = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            raise StitchError(
                f"saturation failed inside egglog: {detail}",
                hint="a rule probably builds an ill-typed term or equates tensors of different shapes; "
                "run `stitch rules check` on your rule files",
            ) from None

    def _step(self, names: list[str], match_limit: int):
        if match_limit not in self._steps:
            runs = " ".join(f"(run-with bo {n})" for n in names)
            self._steps[match_limit] = self.egraph.parse_program(
                f"(run-schedule (let-scheduler bo (back-off :match-limit {match_limit} :ban-length 1))"
                f" (seq {runs}))"
            )
        return self._steps[match_limit]

    def enode_count(self) -> int:
        (out,) = self.egraph.run_program(eb.PrintSize(eb.PanicSpan(), None))
        sizes = dict(out.sizes)
        return sum(sizes.get(c, 0) for c in T_CONSTRUCTORS)

    def eclass_count(self) -> int:
        frozen = self.egraph.freeze()
        return len({row.output for c in T_CONSTRUCTORS if c in frozen.functions for row in frozen.functions[c].rows})

    def run(self, limits: Limits = Limits()) -> RunReport:
        """Saturate under `limits` (their defaults worked out for this program: Limits.for_program)."""
        limits = limits.for_program(len(self.graph.nodes))
        report = RunReport(rulesets=[rf.name for rf in self.rule_files])
        start = time.perf_counter()
        analysis = self.egraph.parse_program("(run-schedule (saturate (run analysis)))")
        self._run(analysis)
        names = [rf.name for rf in self.rule_files if rf.rules]
        match_limit = limits.match_limit
        report.stop_reason = "saturated"
        while names:
            if report.iterations >= limits.iterations:
                report.stop_reason = "iteration limit"
                break
            before = self.enode_count()
            (out,) = self._run(self._step(names, match_limit))
            self._run(analysis)
            report.iterations += 1
            seen = out.report.num_matches_per_rule
            for name, n in seen.items():
                base = base_rule_name(name)
                report.matches[base] = report.matches.get(base, 0) + n
            banned = any(
                r.num_matches > match_limit
                for it in out.report.iterations
                for reports in it.rule_set_report.rule_reports.values()
                for r in reports
            )
            nodes = self.enode_count()
            if not banned and not out.report.updated:
                report.stop_reason = "saturated"
                break
            if banned and nodes == before:
                # Every rule that still matches was over the limit: back off by
                # letting twice as many matches through next time.
                match_limit *= 2
            if nodes > limits.nodes:
                report.stop_reason = "node limit"
                break
            if time.perf_counter() - start > limits.seconds:
                report.stop_reason = "time limit"
                break
            if over_budget(limits.memory / 2):
                report.stop_reason = "memory limit"
                break
        report.seconds = time.perf_counter() - start
        report.enodes = self.enode_count()
        report.eclasses = self.eclass_count()
        for rf in self.rule_files:
            for r in rf.rules:
                report.matches.setdefault(r.name, 0)
        return report

    def serialize(self):
        """The e-graph in egraph-serialize form (JSON text and DOT available on the result)."""
        roots = [eb.Var(eb.PanicSpan(), r) for r in self.roots]
        return self.egraph.serialize(roots)

    def data(self, top: int | None = None) -> EGraphData:
        """The e-graph read back into Python (`egraph_data.py`): what extraction and the pictures read;
        a symbolic program's dimensions as Extents at the symbols' planning values (the tops of their
        ranges), or, for a program of one symbol, at a size bucket's `top`."""
        if self._json is None:  # (read back once per planning value of a size bucket: serialized once)
            self._json = self.serialize().to_json()
        planning = self.planning if top is None else {name: top for name in self.planning}
        return EGraphData.from_json(self._json, exact_ints=self.exact_ints,
                                    decode=self.encoding.decoder(planning))
