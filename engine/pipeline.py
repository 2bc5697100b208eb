"""The pipeline, stage by stage, as the CLI and the Python API run it.

    parse -> check -> build e-graph -> saturate(.rules) -> extract -> lower -> run

Each function here is one stage boundary; `compile_command` is `stitch compile`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import StitchError
from .graph import Graph
from .rules import RuleFile, builtin_rule_files, load_rules
from .saturate import EGraphRun, Limits, RunReport


def load_rule_files(paths: list[str], builtin: bool = True) -> list[RuleFile]:
    """The built-in rule files (unless disabled) followed by the user's, in order."""
    files = builtin_rule_files() if builtin else []
    for p in paths:
        files.append(load_rules(p))
    names = {}
    for rf in files:
        if rf.name in names:
            raise StitchError(
                f"two rule files make the ruleset '{rf.name}': {names[rf.name]} and {rf.filename}",
                hint="rename one of them (a rule file's ruleset is named after its file)",
            )
        names[rf.name] = rf.filename
    return files


def saturate_program(graph: Graph, rule_files: list[RuleFile], limits: Limits = Limits()) -> tuple[EGraphRun, RunReport]:
    run = EGraphRun(graph, rule_files)
    report = run.run(limits)
    return run, report


@dataclass
class EmitOptions:
    emit: str
    dot: str | None = None


def add_compile_arguments(p) -> None:
    p.add_argument("file")
    p.add_argument("--entry", help="the func to compile (default: the first)")
    p.add_argument("--rules", action="append", default=[], metavar="R.rules", help="extra rule file (repeatable)")
    p.add_argument("--no-builtin-rules", action="store_true", help="do not load rules/*.rules")
    p.add_argument("--emit", choices=["ir", "egraph"], default="egraph", help="what to print (default: egraph)")
    p.add_argument("--dot", metavar="OUT.dot", help="with --emit egraph: also write the e-graph as Graphviz DOT")
    p.add_argument("--iter-limit", type=int, default=Limits.iterations, help="saturation iterations")
    p.add_argument("--node-limit", type=int, default=Limits.nodes, help="e-node limit")
    p.add_argument("--time-limit", type=float, default=Limits.seconds, help="saturation seconds")
    p.add_argument("--match-limit", type=int, default=Limits.match_limit,
                   help="matches per rule per iteration before back-off")


def compile_command(args) -> int:
    from .cli import load_graph
    from .printer import print_func

    graph = load_graph(args.file, args.entry)
    if args.emit == "ir":
        from .cli import load_program

        program = load_program(args.file)
        func = program.func(args.entry) if args.entry else program.funcs[0]
        sys.stdout.write(print_func(func))
        return 0
    for flag, value in (("--iter-limit", args.iter_limit), ("--node-limit", args.node_limit),
                        ("--match-limit", args.match_limit)):
        if value <= 0:
            raise StitchError(f"{flag} must be positive, got {value}")
    if args.time_limit <= 0:
        raise StitchError(f"--time-limit must be positive, got {args.time_limit}")
    limits = Limits(args.iter_limit, args.node_limit, args.time_limit, args.match_limit)
    rule_files = load_rule_files(args.rules, builtin=not args.no_builtin_rules)
    run, report = saturate_program(graph, rule_files, limits)
    print(report.render())
    if args.dot:
        try:
            Path(args.dot).write_text(run.serialize().to_dot())
        except OSError as err:
            raise StitchError(f"{args.dot}: cannot write ({err.strerror})") from None
    return 0
