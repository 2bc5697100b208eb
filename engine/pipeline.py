"""The pipeline, stage by stage, as the CLI and the Python API run it.

    parse -> check -> build e-graph -> saturate(.rules) -> extract -> lower -> run

Each function here is one stage boundary; `compile_command` is `stitch compile`.
"""

from __future__ import annotations

import json
import sys
import warnings
from dataclasses import dataclass, replace
from fnmatch import fnmatch
from typing import TYPE_CHECKING

from .errors import StitchError, StitchWarning
from .graph import Graph
from .memory import GIB, check_memory, checkpoint, memory_budget
from .pictures import egraph_dot, schedule_dot, write_picture
from .recursion import allows_deep_recursion
from .rules import RuleFile, builtin_rule_files, load_rules
from .saturate import EGraphRun, Limits, RunReport

if TYPE_CHECKING:
    from ..targets.target import Target
    from .egraph_data import EGraphData
    from .search import SearchResult


def load_rule_files(paths: list[str], builtin: bool = True, without: tuple[str, ...] = (),
                    unsafe_fp: bool = False) -> list[RuleFile]:
    """The built-in rule files (unless disabled) followed by the user's, in order.

    `without` names built-in rule files (`forwarding`) or patterns of built-in rule names
    (`stitch-*`) to leave out: the seed comparisons compile a program with and without them.
    Rules tagged [unsafe-fp] are left out unless `unsafe_fp` (README, "Floating-point semantics")."""
    if without and not builtin:
        raise StitchError("--without-rules leaves out built-in rules, which --no-builtin-rules already leaves out")
    files = without_rules(builtin_rule_files(), without) if builtin else []
    for p in paths:
        files.append(load_rules(p))
    if not unsafe_fp:
        files = [replace(rf, rules=tuple(r for r in rf.rules if not r.unsafe_fp)) for rf in files]
    names = {}
    for rf in files:
        if rf.name in names:
            raise StitchError(
                f"two rule files make the ruleset '{rf.name}': {names[rf.name]} and {rf.filename}",
                hint="rename one of them (a rule file's ruleset is named after its file)",
            )
        names[rf.name] = rf.filename
    return files


def without_rules(files: list[RuleFile], names: tuple[str, ...]) -> list[RuleFile]:
    """`files` less the files named and the rules matching a pattern; a name matching nothing is an error."""
    for name in names:
        if not any(rf.name == name or any(fnmatch(r.name, name) for r in rf.rules) for rf in files):
            raise StitchError(
                f"--without-rules {name}: no built-in rule file or rule of that name",
                hint="name a rule file (" + ", ".join(rf.name for rf in files) + ") or a pattern of rule names "
                     "(stitch-*)")
    kept = []
    for rf in files:
        if rf.name in names:
            continue
        rules = tuple(r for r in rf.rules if not any(fnmatch(r.name, name) for name in names))
        if rules:
            kept.append(replace(rf, rules=rules))
    return kept


# Which option raises each limit (and its Limits field), for the warning when saturation stops at one.
LIMIT_OPTIONS = {"iteration limit": ("--iter-limit", "iterations", "iteration(s)"),
                 "node limit": ("--node-limit", "nodes", "e-nodes"), "time limit": ("--time-limit", "seconds", "s"),
                 "memory limit": ("--memory-limit", "memory", "bytes, of which saturation may hold half")}


def saturate_program(graph: Graph, rule_files: list[RuleFile], limits: Limits = Limits()) -> tuple[EGraphRun, RunReport]:
    """Saturate; a run stopped by a limit warns (StitchWarning): its schedule may be worse than saturation's."""
    run = EGraphRun(graph, rule_files)
    report = run.run(limits)
    if report.stop_reason in LIMIT_OPTIONS:
        option, field, unit = LIMIT_OPTIONS[report.stop_reason]
        warnings.warn(StitchWarning(
            f"saturation of '{graph.name}' stopped at its {report.stop_reason} ({getattr(limits, field):g} {unit}) "
            f"after {report.iterations} iteration(s) and {report.enodes} e-nodes, before the rules saturated: "
            f"the schedule may be worse than a saturated run's (raise {option}; in stitch.compile, "
            f"limits=Limits({field}=...))"), stacklevel=2)
    return run, report


@dataclass
class Compiled:
    """A program through saturation and extraction: the Schedule lowering takes."""

    graph: Graph
    target: "Target"
    run: EGraphRun
    report: RunReport
    data: "EGraphData"
    extracted: "SearchResult"
    fusion_blocked: list[str]
    seconds: float

    @property
    def schedule(self):
        return self.extracted.schedule

    @property
    def cost(self):
        return self.extracted.cost

    def to_json(self) -> dict:
        from .schedule_print import schedule_json

        out = schedule_json(self.schedule, self.cost)
        out.update(
            {
                "func": self.graph.name,
                "target": self.target.name,
                "egraph_nodes": self.report.enodes,
                "egraph_classes": self.report.eclasses,
                "iterations": self.report.iterations,
                "stop_reason": self.report.stop_reason,
                "estimated_seconds": None if not self.cost.feasible else self.target.seconds(self.cost.cycles),
                "fusion_blocked": self.fusion_blocked,
                "compile_seconds": self.seconds,
            }
        )
        return out


@allows_deep_recursion
def compile_graph(graph: Graph, rule_files: list[RuleFile], target, limits: Limits = Limits()) -> Compiled:
    """Saturate, then extract the cheapest schedule for `target`."""
    import time

    from .cost import schedule_cost
    from .egraph_data import EGraphData
    from .extract import MOST_FUSED, extract_schedule, extract_tree
    from .schedule import build_schedule

    start = time.perf_counter()
    with memory_budget(limits.memory):
        run, report = saturate_program(graph, rule_files, limits)
        checkpoint("saturation")
        data = EGraphData.from_json(run.serialize().to_json(), exact_ints=run.exact_ints)
        checkpoint("reading the saturated e-graph")
        extracted = extract_schedule(data, target)
    # Say why the most-fused alternative was not taken, when it was refused.
    fused = build_schedule(data, extract_tree(data, MOST_FUSED))
    blocked = []
    if len(fused.kernels) < len(extracted.cost.kernels):  # priced only then: it costs a search step
        blocked = schedule_cost(fused, target).problems
    if not extracted.cost.feasible:
        raise StitchError(
            f"no schedule of '{graph.name}' fits target '{target.name}': " + "; ".join(extracted.cost.problems),
            hint="raise onchip_bytes in the target description, or split the program",
        )
    return Compiled(graph, target, run, report, data, extracted, blocked, time.perf_counter() - start)


def add_compile_arguments(p) -> None:
    p.add_argument("file")
    p.add_argument("--entry", help="the func to compile (default: the first)")
    add_rule_arguments(p)
    p.add_argument("--emit", choices=["ir", "egraph", "schedule", "loops", "c"], default="schedule",
                   help="what to print (default: schedule)")
    p.add_argument("--target", default="cpu", metavar="cpu|accel|FILE.toml", help="target description (default cpu)")
    p.add_argument("--json", action="store_true", help="print one JSON object with the compile figures")
    p.add_argument("--dot", metavar="OUT.svg|OUT.png|OUT.dot",
                   help="also draw a picture: the e-graph's values and placements with --emit egraph, the "
                        "schedule's kernels and global tensors with any other --emit; .svg, .png and .pdf are "
                        "rendered by graphviz's dot when it is installed, otherwise DOT text is written")
    p.add_argument("--iter-limit", type=int, default=Limits.iterations, help="saturation iterations")
    p.add_argument("--node-limit", type=int, default=Limits.nodes, help="e-node limit")
    p.add_argument("--time-limit", type=float, default=Limits.seconds, help="saturation seconds")
    p.add_argument("--match-limit", type=int, default=Limits.match_limit,
                   help="matches per rule per iteration before back-off")
    p.add_argument("--memory-limit", type=float, default=Limits.memory / GIB, metavar="GIB",
                   help=f"memory the compile may hold, in GiB (default {Limits.memory / GIB:.3g}: half this "
                        "machine's, at most 8); saturation stops at half of it")


def add_rule_arguments(p) -> None:
    """--rules, --no-builtin-rules, --without-rules: what `compile` and `run` saturate with."""
    p.add_argument("--rules", action="append", default=[], metavar="R.rules", help="extra rule file (repeatable)")
    p.add_argument("--no-builtin-rules", action="store_true", help="do not load rules/*.rules")
    p.add_argument("--without-rules", action="append", default=[], metavar="NAME",
                   help="leave out a built-in rule file (algebra, fusion, forwarding) or the built-in rules "
                        "matching a name pattern, e.g. 'stitch-*' (repeatable)")
    p.add_argument("--unsafe-fp", action="store_true",
                   help="also use rules tagged [unsafe-fp], which may change results at NaN, inf, -0.0 or "
                        "near overflow (as -ffast-math does)")


def draw(path: str, dot: str) -> None:
    """Write a picture (`--dot`); say so on stderr when it could only be written as DOT text."""
    note = write_picture(path, dot)
    if note:
        print(note, file=sys.stderr)


def compile_command(args) -> int:
    from .cli import load_graph
    from .printer import print_func

    graph = load_graph(args.file, args.entry)
    if args.emit == "ir":
        from .cli import load_program

        program = load_program(args.file)
        func = program.func(args.entry) if args.entry else program.funcs[0]
        sys.stdout.write(print_func(func))
        if not args.dot:
            return 0
    for flag, value in (("--iter-limit", args.iter_limit), ("--node-limit", args.node_limit),
                        ("--match-limit", args.match_limit)):
        if value <= 0:
            raise StitchError(f"{flag} must be positive, got {value}")
    for flag, value in (("--time-limit", args.time_limit), ("--memory-limit", args.memory_limit)):
        if not value > 0 or value == float("inf"):
            raise StitchError(f"{flag} must be a positive number, got {value}")
    limits = Limits(args.iter_limit, args.node_limit, args.time_limit, args.match_limit, args.memory_limit * GIB)
    rule_files = load_rule_files(args.rules, builtin=not args.no_builtin_rules, without=tuple(args.without_rules),
                                 unsafe_fp=args.unsafe_fp)
    if args.emit == "egraph" and not args.json:
        run, report = saturate_program(graph, rule_files, limits)
        print(report.render())
        if args.dot:
            from .egraph_data import EGraphData

            data = EGraphData.from_json(run.serialize().to_json(), exact_ints=run.exact_ints)
            draw(args.dot, egraph_dot(data, f"e-graph of {graph.name}"))
        return 0
    from ..targets.target import load_target
    from .schedule_print import print_schedule

    target = load_target(args.target)
    compiled = compile_graph(graph, rule_files, target, limits)
    if args.dot:
        draw(args.dot, egraph_dot(compiled.data, f"e-graph of {graph.name}") if args.emit == "egraph"
             else schedule_dot(compiled))
    if args.emit == "ir":
        return 0
    if args.json or args.emit in ("loops", "c"):
        from ..lowering.alloc import shared_bytes
        from ..lowering.loops import print_loops
        from ..lowering.lower import lower

        program = lower(compiled)
        check_memory(limits.memory, "lowering")
    if args.json:
        out = compiled.to_json()
        for k, lk in zip(out["kernels"], program.kernels):
            k["shared_bytes_merged"], k["shared_bytes_unmerged"] = shared_bytes(lk)
        out["shared_bytes_merged"] = sum(k["shared_bytes_merged"] for k in out["kernels"])
        out["shared_bytes_unmerged"] = sum(k["shared_bytes_unmerged"] for k in out["kernels"])
        print(json.dumps(out, indent=2))
    elif args.emit == "loops":
        print(print_loops(program), end="")
    elif args.emit == "c":
        from ..targets.cpu import c_for_target

        sys.stdout.write(c_for_target(program, target))
    elif args.emit == "egraph":
        print(compiled.report.render())
    else:
        print(print_schedule(graph.name, target.name, compiled.schedule, compiled.cost, target.clock_ghz), end="")
        for reason in compiled.fusion_blocked:
            print(f"note: more kernels than the most-fused schedule because {reason}")
    return 0
