"""The compiler, stage by stage: what `stitch compile`, `stitch run` and `stitch.compile` run.

    read_program      .ir text or file -> Program                        parse.py
    check_entry       Program -> Graph (typed, shapes checked)           check.py
    load_rule_files   built-in and user .rules -> [RuleFile]             rules.py
    saturate_program  Graph + rules -> saturated e-graph                 saturate.py (the run schedule)
    extract           e-graph -> the cheapest Schedule for the target    search.py, cost.py
    lower_program     Schedule -> LoopProgram                            lowering/lower.py (its passes)
    build             LoopProgram -> a CompiledProgram, called with      targets/cpu.py, targets/simulator.py
                      numpy arrays on the target

`compile_graph` is saturate + extract (what `stitch compile` prints), and
`compile_source` every stage in order (what `stitch.compile` returns; `compile_entry` the
same from a checked graph).
The CLI (`cli.py`) parses arguments and calls these stages; the Python API
(`api.py`) checks its arguments and calls `compile_source`.
"""

from __future__ import annotations

import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path

from ..lowering.loops import LoopProgram
from ..lowering.lower import lower
from .compiled_program import Compiled, CompiledProgram
from .ir.errors import StitchError, StitchWarning
from .ir.extent import bucket_tops, planning_values
from .ir.fold import fold_bound, fold_values
from .ir.graph import Graph
from .ir.interp import bind_weights
from .ir.memory import check_memory, checkpoint, memory_budget
from .ir.recursion import allows_deep_recursion
from .programs import check_entry, read_file, read_program  # noqa: F401 (callers read them from here too)
from .rewrite.egraph_data import EGraphData
from .rewrite.rules import RuleFile, builtin_rule_files, load_rules
from .rewrite.saturate import EGraphRun, Limits, RunReport
from .rewrite.symbols import unsupported
from .schedule.extract import extract_schedule
from .schedule.search import SearchResult
from .schedule.target import Target, load_target

# -- parse and check --------------------------------------------------------------------------


# -- rules --------------------------------------------------------------------------------------


def load_rule_files(paths: list[str], builtin: bool = True, without: tuple[str, ...] = (),
                    unsafe_fp: bool = False, trust_rules: bool = False,
                    cache_dir: str | Path | None = None) -> list[RuleFile]:
    """The built-in rule files (unless disabled) followed by the user's, in order.

    A user's file is checked for soundness as it loads (rewrite/check/on_load.py: an unsound rule
    is an error with its counterexample; verdicts cached under `cache_dir`, the compile cache by
    default) unless `trust_rules`.

    `without` names built-in rule files (`forwarding`) or patterns of built-in rule names
    (`stitch-*`) to leave out: the seed comparisons compile a program with and without them.
    Rules tagged [unsafe-fp] are left out unless `unsafe_fp` (docs/explanation/floating-point.md)."""
    if without and not builtin:
        raise StitchError("--without-rules leaves out built-in rules, which --no-builtin-rules already leaves out")
    files = without_rules(builtin_rule_files(), without) if builtin else []
    for p in paths:
        files.append(load_rules(p))
        if not trust_rules:
            from .rewrite.check.on_load import refuse_unsound  # (hypothesis: imported when a user's rules load)

            refuse_unsound(files[-1], _rules_cache(cache_dir))
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


def _rules_cache(cache_dir: str | Path | None) -> Path | None:
    """Where rule verdicts are kept: the compile cache's folder (None: not kept, when it cannot be made)."""
    from ..targets.cc import default_cache_dir

    try:
        return Path(cache_dir) if cache_dir is not None else default_cache_dir()
    except (OSError, StitchError):
        return None


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


# -- saturate -----------------------------------------------------------------------------------

# Which option raises each limit (and its Limits field), for the warning when saturation stops at one.
LIMIT_OPTIONS = {"iteration limit": ("--iter-limit", "iterations", "iteration(s)"),
                 "node limit": ("--node-limit", "nodes", "e-nodes"), "time limit": ("--time-limit", "seconds", "s"),
                 "memory limit": ("--memory-limit", "memory", "bytes, of which saturation may hold half")}


def saturate_program(graph: Graph, rule_files: list[RuleFile], limits: Limits = Limits()) -> tuple[EGraphRun, RunReport]:
    """Saturate (saturate.py: the run schedule); a run stopped by a limit warns (StitchWarning): its
    schedule may be worse than saturation's."""
    why = unsupported(graph)
    if why:
        raise StitchError(f"'{graph.name}' has symbolic dimensions the e-graph cannot carry yet: {why}",
                          hint="give the others numbers (stitch import --dim NAME=N) to saturate it")
    run = EGraphRun(graph, rule_files)
    limits = limits.for_program(len(graph.nodes))  # (the limits the warning names)
    report = run.run(limits)
    if report.stop_reason in LIMIT_OPTIONS:
        option, field, unit = LIMIT_OPTIONS[report.stop_reason]
        warnings.warn(StitchWarning(
            f"saturation of '{graph.name}' stopped at its {report.stop_reason} ({getattr(limits, field):g} {unit})"
            f"{_progress(report, field)}, before the rules saturated: "
            f"the schedule may be worse than a saturated run's (raise {option}; in stitch.compile, "
            f"limits=Limits({field}=...))"), stacklevel=2)
    return run, report


def _progress(report: RunReport, limit: str) -> str:
    """How far saturation got, without repeating the limit it stopped at."""
    if limit == "iterations":
        return f" with {report.enodes} e-nodes"
    if limit == "nodes":
        return f" after {report.iterations} iteration(s)"
    return f" after {report.iterations} iteration(s) and {report.enodes} e-nodes"


# -- extract ------------------------------------------------------------------------------------


def extract(graph: Graph, data: EGraphData, target: Target, bound: tuple[str, ...] = ()) -> SearchResult:
    """The cheapest schedule for `target` (`bound` naming the parameters given at build time); no
    feasible schedule (every one exceeds the target's capacity) is an error."""
    extracted = extract_schedule(data, target, bound=bound)
    if not extracted.cost.feasible:
        raise StitchError(
            f"no schedule of '{graph.name}' fits target '{target.name}': " + "; ".join(extracted.cost.problems),
            hint="raise onchip_bytes in the target description, or split the program",
        )
    return extracted


@allows_deep_recursion
def compile_graph(graph: Graph, rule_files: list[RuleFile], target: Target, limits: Limits = Limits(),
                  buckets: bool = False, bound: tuple[str, ...] = ()) -> Compiled:
    """Saturate, then extract the cheapest schedule for `target`; with `buckets`, a symbolic program's
    schedules for the smaller size buckets too (`Compiled.variants`). `bound` names the parameters whose
    values are given at build time (weights), which lowering may lay out then (the price follows it)."""
    start = time.perf_counter()
    with memory_budget(limits.memory):
        run, report = saturate_program(graph, rule_files, limits)
        checkpoint("saturation")
        data = run.data()
        smaller = [(top, run.data(top)) for top in (bucket_tops(graph.symbols) if buckets else [])]
        run.release()  # (not on an error: an e-graph a failed run leaves is not loaded again)
        checkpoint("reading the saturated e-graph")
        extracted = extract(graph, data, target, bound)
        variants = []
        for top, at_top in smaller:  # one schedule per size bucket (extent.py BUCKETS), the same e-graph
            bucket = replace(graph, symbols={name: (lo, top) for name, (lo, _) in graph.symbols.items()})
            variants.append(Compiled(bucket, target, report, at_top, extract(bucket, at_top, target, bound), 0.0))
    return Compiled(graph, target, report, data, extracted, time.perf_counter() - start, variants)


# -- lower and build ----------------------------------------------------------------------------


def lower_program(compiled: Compiled, limits: Limits, bound: tuple[str, ...] = (),
                  caches: dict[str, int] | None = None, tops: dict[str, int] | None = None) -> LoopProgram:
    """`lower` (lowering/lower.py: loop nests, then its passes, then the verifier), then the memory check.
    `bound` names the parameters whose values are given at build time (weights); `caches` the
    parameters that grow in place into an output (lowering/caches.py), laid out for the symbols' `tops`."""
    if caches and compiled.target.executor != "c":
        raise StitchError(f"caches= runs on a cpu target (compiled C); '{compiled.target.name}' runs on the "
                          f"{compiled.target.executor}", hint="compile for the cpu target, or without caches=")
    with memory_budget(limits.memory):
        loops = lower(compiled, bound, caches, tops)
        check_memory(limits.memory, "lowering")
    return loops


def build(compiled: Compiled, loops: LoopProgram, cache_dir: str | Path | None = None,
          cflags: str | list[str] | None = None, weights: dict | None = None,
          graph: Graph | None = None, copies: dict | None = None) -> CompiledProgram:
    """What runs `loops` on the compiled target: C built and loaded on a cpu target (the numpy executor
    where no C compiler exists), the simulator on an accel target, with the weights bound (the
    program's prologue run on them once). Build time counts as compile time. `graph` is the
    program as its caller wrote it (default: the compiled one), whose parameters a call is checked against;
    `copies` the weights' copies another build of the same weights made (lowering/bind.py `bind`)."""
    from ..lowering.bind import bind

    target = compiled.target
    native = None
    start = time.perf_counter()
    if target.executor == "c":
        from ..targets.cc import compiler_flags
        from ..targets.cpu import build as build_c

        # the weights are bound (numpy copies) while the C compiler runs
        with ThreadPoolExecutor(1, thread_name_prefix="stitch-cc") as pool:
            building = pool.submit(build_c, loops, cache_dir, compiler_flags(cflags))
            bound = bind(loops, weights or {}, copies)
            native = building.result()
        native.bound = bound
    else:
        bound = bind(loops, weights or {}, copies)
    if target.executor == "simulator":
        executor = "simulator"
    else:  # the numpy executor only where no C compiler could build the library
        executor = "c" if native is not None and native.library is not None else "numpy"
    compiled.seconds += time.perf_counter() - start
    return CompiledProgram(graph or compiled.graph, compiled, loops, native, executor, weights=tuple(weights or {}),
                           bound=bound)


@allows_deep_recursion
def compile_source(source: str | Path, target: str = "cpu", rules: list[str] = (), builtin_rules: bool = True,
                   entry: str | None = None, cache_dir: str | Path | None = None,
                   cflags: str | list[str] | None = None, limits: Limits | None = None,
                   without_rules: tuple[str, ...] = (), unsafe_fp: bool = False,
                   weights: dict | None = None, trust_rules: bool = False,
                   caches: dict[str, int] | None = None) -> CompiledProgram:
    """Every stage in order, for `.ir` text or a file: `stitch.compile` after checking its arguments."""
    return compile_entry(check_entry(read_program(source), entry), target, rules, builtin_rules, cache_dir, cflags,
                         limits, without_rules, unsafe_fp, weights, trust_rules, caches)


@allows_deep_recursion
def compile_entry(graph: Graph, target: str = "cpu", rules: list[str] = (), builtin_rules: bool = True,
                  cache_dir: str | Path | None = None, cflags: str | list[str] | None = None,
                  limits: Limits | None = None, without_rules: tuple[str, ...] = (), unsafe_fp: bool = False,
                  weights: dict | None = None, trust_rules: bool = False,
                  caches: dict[str, int] | None = None) -> CompiledProgram:
    """Every stage after parsing, for a checked graph (`check_entry`'s): what `stitch run` compiles
    once it has read the file (for its inputs and weights)."""
    weights = bind_weights(graph, weights) if weights is not None else {}
    tgt = load_target(target)
    rule_files = load_rule_files(list(rules), builtin_rules, tuple(without_rules), unsafe_fp, trust_rules, cache_dir)
    limits = limits or Limits()
    folded = fold_bound(graph, tuple(weights))
    compiled = compile_graph(folded.graph, rule_files, tgt, limits, buckets=True, bound=tuple(weights) + folded.names)
    start = time.perf_counter()
    weights = weights | fold_values(folded, weights)  # (binding: what the weights alone compute, once)
    compiled.seconds += time.perf_counter() - start
    tops = planning_values(graph.symbols)  # (a size bucket's caches are laid out as the top's)
    loops = lower_program(compiled, limits, tuple(weights), caches, tops)
    program = build(compiled, loops, cache_dir, cflags, weights, graph)
    for variant in compiled.variants:  # a symbolic program's size buckets, each built as the top is
        start = time.perf_counter()
        # (a copy of a weight both read is the top's: one copy of each weight whatever the buckets)
        smaller = build(variant, lower_program(variant, limits, tuple(weights), caches, tops), cache_dir, cflags,
                        weights, graph, program.bound)
        program.variants.append((planning_values(variant.graph.symbols), smaller))
        compiled.seconds += time.perf_counter() - start + variant.seconds
    return program
