"""The `stitch` command line.

Exit codes: 0 success, 1 an error in what the files say (a message naming
file:line:col or the input), 2 bad usage (an unknown option, an option's value
out of its range, options that do nothing together: the command's usage line
and the error), 3 an internal error (a bug in stitch; the traceback is shown
only with --debug).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
import warnings
from typing import TYPE_CHECKING

from .files import load_inputs, load_weights, save_npz, write_text
from .ir.errors import StitchError, StitchWarning
from .ir.memory import GIB
from .ir.recursion import deep_recursion

if TYPE_CHECKING:  # numpy is imported where a command uses it: `stitch check` starts without it
    import numpy as np


class UsageError(StitchError):
    """Bad usage found after parsing (a value out of range, options that do nothing together): exit 2
    with the command's usage line, as argparse's own errors."""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(_join_flag_values(sys.argv[1:] if argv is None else list(argv)))
    command = getattr(args, "parser", parser)
    if extra:  # the command's usage, not the top level's
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        with warnings.catch_warnings(), deep_recursion():
            warnings.simplefilter("always", StitchWarning)  # every time, not once per process
            warnings.showwarning = _show_warning
            return args.run(args) or 0
    except UsageError as err:
        command.print_usage(sys.stderr)
        print(f"{command.prog}: error: {err.message}", file=sys.stderr)
        return 2
    except StitchError as err:
        print(err.render(), file=sys.stderr)
        return 1
    except MemoryError:  # e.g. `eval` of a program whose tensors do not fit
        print(OUT_OF_MEMORY, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # a bug in stitch, not in the user's input
        if isinstance(err, ValueError) and "array is too big" in str(err):  # numpy: more bytes than it can count
            print(OUT_OF_MEMORY, file=sys.stderr)
            return 1
        if args.debug:
            traceback.print_exc()
        print(f"internal error: {type(err).__name__}: {err} (rerun with --debug for the traceback)", file=sys.stderr)
        return 3


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """StitchWarnings as `warning: ...` on stderr; others as Python shows them."""
    if issubclass(category, StitchWarning):
        print(f"warning: {message}", file=sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


# Options whose value may itself start with '-' (argparse would take `--cflags -O2` for two options).
FLAG_VALUED = ("--cflags",)


def _join_flag_values(argv: list[str]) -> list[str]:
    """`--cflags -O2` as `--cflags=-O2`, so the value is the option's whatever it starts with."""
    out = []
    it = iter(argv)
    for arg in it:
        if arg in FLAG_VALUED:
            value = next(it, None)
            out.append(arg if value is None else f"{arg}={value}")
        else:
            out.append(arg)
    return out


OUT_OF_MEMORY = "error: out of memory: the program's tensors do not fit in this machine's memory"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stitch", description="Tensor kernel fusion with rewrite rules on e-graphs.")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks for internal errors")
    p.add_argument("--version", action=_Version, nargs=0, help="print stitch's version and exit")
    sub = p.add_subparsers(metavar="COMMAND")

    c = sub.add_parser("check", help="parse and type-check a program; print each func's signature")
    c.add_argument("file")
    c.set_defaults(run=cmd_check, parser=c)

    f = sub.add_parser("fmt", help="print a program in canonical form")
    f.add_argument("file")
    f.set_defaults(run=cmd_fmt, parser=f)

    e = sub.add_parser("eval", help="run the numpy reference interpreter")
    add_run_arguments(e)
    e.set_defaults(run=cmd_eval, parser=e)

    r = sub.add_parser("run", help="compile for a target and run; --check compares with the reference")
    add_run_arguments(r)
    r.add_argument("--target", default="cpu", metavar="cpu|accel|FILE.toml")
    r.add_argument("--check", action="store_true", help="also run the reference interpreter and compare")
    r.add_argument("--json", action="store_true", help="print the compile figures and run_seconds as JSON")
    add_rule_arguments(r)
    r.add_argument("--cache-dir", help="where compiled libraries are kept (default ~/.cache/stitch)")
    r.add_argument("--cflags", metavar="FLAGS",
                   help="compiler flags (one string) replacing the optimisation flags '-O3 -march=native'; "
                        "the flags the generated C needs are always added")
    r.add_argument("--threads", type=_positive_int, metavar="N",
                   help="threads running a kernel's tiles, the caller included (default: OMP_NUM_THREADS, "
                        "else the cores)")
    r.add_argument("--profile", action="store_true",
                   help="also time each kernel (a timed build of the program) beside the cost model's estimate")
    r.add_argument("--runs", type=_positive_int, metavar="N",
                   help="with --profile: timed calls, after one warm-up (default 10)")
    r.add_argument("--cpu-time", action="store_true",
                   help="with --profile: time the calling thread's CPU time instead of the wall clock (1 thread "
                        "only: steadier on a loaded machine, it leaves out the time the thread waits descheduled)")
    r.add_argument("--cache", action="append", default=[], metavar="PARAM=OUTPUT",
                   help="parameter PARAM grows in place into output number OUTPUT (a key/value cache: "
                        "concat(PARAM, new) along a symbolic axis): the program writes only the new "
                        "positions, into an array of the largest length holding PARAM's (repeatable; cpu)")
    r.set_defaults(run=cmd_run, parser=r)

    k = sub.add_parser("compile", help="saturate a program with the rules and print a stage (--emit)")
    add_compile_arguments(k)
    k.add_argument("--explain", action="store_true",
                   help="after the schedule, say for each fused edge which rules (file:line) offered its placement, "
                        "and for each boundary between kernels what else the e-graph offered and its cost "
                        "(with --json: as JSON)")
    k.set_defaults(run=cmd_compile, parser=k)

    i = sub.add_parser("import", help="translate an ONNX model into a .ir program")
    i.add_argument("file", metavar="MODEL.onnx")
    i.add_argument("-o", "--output", metavar="FILE.ir", help="write the program here (default: stdout)")
    i.add_argument("--entry", help="the func's name (default: the ONNX graph's name)")
    fold = i.add_mutually_exclusive_group()
    fold.add_argument("--fold-constants", action="store_const", const=True, default=None,
                      help="float initializers of at most 64 elements become literals and import-time values "
                           "instead of parameters (by default only those of one element do)")
    fold.add_argument("--keep-constants", dest="fold_constants", action="store_const", const=False,
                      help="every float initializer stays a parameter, scalars too")
    i.add_argument("--weights", metavar="W.npz", help="write the values of the initializer parameters here")
    i.add_argument("--constant", action="append", default=[], metavar="NAME=VALUES.npy",
                   help="fix a graph input read as a shape or axes list to these values")
    i.add_argument("--outputs", metavar="NAME,...", help="import only what these ONNX values need (a subgraph)")
    i.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                   help="give a dynamic dimension of the graph inputs (its dim_param) this size: a static import "
                        "(repeatable; the others become symbols of the func)")
    i.add_argument("--dim-range", action="append", default=[], metavar="NAME=LOW..HIGH",
                   help="the range of the symbol a dynamic dimension becomes (repeatable; default 1..2147483647, "
                        "narrowed to what the model can run)")
    i.add_argument("--no-winograd", dest="winograd", action="store_false",
                   help="import every conv as its direct product (by default a 3x3 conv of a value the model makes "
                        "channels first, 16 channels or more, is Winograd's F(2x2, 3x3))")
    i.set_defaults(run=cmd_import, parser=i)

    r = sub.add_parser("rules", help="work with rule files").add_subparsers(metavar="COMMAND")
    rc = r.add_parser("check", help="test every rule of a .rules file for soundness on random instances")
    rc.add_argument("files", nargs="+", metavar="FILE.rules")
    rc.add_argument("--examples", type=_positive_int, default=100, metavar="N",
                    help="instances to try per rule (default 100)")
    rc.set_defaults(run=cmd_rules_check, parser=rc)
    return p


class _Version(argparse.Action):
    """--version, looking the versions up only when asked (argparse's own takes the text up front)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def version_text() -> str:
    """stitch's version and those of what it stands on (what a bug report needs)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from . import __version__

    parts = []
    for package in ("egglog", "numpy", "lark"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package} missing")
    return f"stitch {__version__} ({', '.join(parts)}, Python {platform.python_version()})"


def add_compile_arguments(p) -> None:
    from .rewrite.limits import NODES, NODES_PER_OP, SECONDS, SECONDS_PER_OP, Limits

    p.add_argument("file")
    p.add_argument("--entry", help="the func to compile (default: the first)")
    add_weights_argument(p, "the other parameters stay parameters of the compiled program")
    add_rule_arguments(p)
    p.add_argument("--emit", choices=["ir", "egraph", "schedule", "loops", "c"],
                   help="what to print (default: schedule)")
    p.add_argument("--target", default="cpu", metavar="cpu|accel|FILE.toml", help="target description (default cpu)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object with the compile figures (instead of --emit's stage)")
    p.add_argument("--dot", metavar="OUT.svg|OUT.png|OUT.dot",
                   help="also draw a picture: the e-graph's values and placements with --emit egraph, the "
                        "schedule's kernels and global tensors with any other --emit; .svg, .png and .pdf are "
                        "rendered by graphviz's dot when it is installed, otherwise DOT text is written")
    p.add_argument("--focus", metavar="NAME",
                   help="with --dot: draw only NAME and its neighbours (an e-graph picture: an e-class id or an op "
                        "name; a schedule picture: a kernel, k3, or a global tensor, t5)")
    p.add_argument("--iter-limit", type=int, default=Limits.iterations, help="saturation iterations")
    p.add_argument("--node-limit", type=int, default=None,
                   help=f"e-node limit (default {NODES:,}, or {NODES_PER_OP} per op of the program where that is more)")
    p.add_argument("--time-limit", type=float, default=None,
                   help=f"saturation seconds (default {SECONDS:g}, or {SECONDS_PER_OP * 1000:g} per 1,000 ops where more)")
    p.add_argument("--match-limit", type=int, default=Limits.match_limit,
                   help="matches per rule per iteration before back-off")
    p.add_argument("--memory-limit", type=float, default=Limits.memory / GIB, metavar="GIB",
                   help=f"memory the compile may hold beyond what the process held when it began, in GiB "
                        f"(default {Limits.memory / GIB:.3g}: half this machine's, at most 8); saturation stops "
                        "at half of it")


def add_rule_arguments(p) -> None:
    """--rules, --no-builtin-rules, --without-rules: what `compile` and `run` saturate with."""
    p.add_argument("--rules", action="append", default=[], metavar="R.rules", help="extra rule file (repeatable)")
    p.add_argument("--no-builtin-rules", action="store_true", help="do not load rules/*.rules")
    p.add_argument("--without-rules", action="append", default=[], metavar="NAME",
                   help="leave out a built-in rule file (algebra, fusion, forwarding) or the built-in rules "
                        "matching a name pattern, e.g. 'stitch-*' (repeatable)")
    p.add_argument("--trust-rules", action="store_true",
                   help="use the --rules files without checking them for soundness as they load (by default an "
                        "unsound rule is an error with its counterexample)")
    p.add_argument("--unsafe-fp", action="store_true",
                   help="also use rules tagged [unsafe-fp], which may change results at NaN, inf, -0.0 or "
                        "near overflow (as -ffast-math does)")


def add_run_arguments(p) -> None:
    """The program, its entry, its inputs and where outputs go: what `eval` and `run` share."""
    p.add_argument("file")
    p.add_argument("--entry", help="the func to run (default: the first)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--inputs", metavar="IN.npz", help="inputs, keyed by parameter name")
    src.add_argument("--seed", type=_non_negative_int, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--dim", action="append", default=[], metavar="SYMBOL=N",
                   help="the value of a symbolic dimension for random inputs (repeatable; with --inputs the "
                        "arrays' shapes give them)")
    add_weights_argument(p)
    p.add_argument("-o", "--output", metavar="OUT.npz", help="write outputs as out0, out1, ...")


def add_weights_argument(p, rest: str = "the other parameters come from --inputs or --seed") -> None:
    p.add_argument("--weights", metavar="W.npz",
                   help=f"parameters bound at compile time, keyed by name (what `stitch import --weights` "
                        f"writes): {rest}")


def read_inputs(args, graph) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(the call's inputs, the weights) of `eval` and `run`: --weights bound, the rest from --inputs or --seed."""
    from .ir.interp import random_inputs

    weights = load_weights(args.weights, graph) if args.weights else {}
    sizes = dim_values(args.dim)
    if args.inputs:
        if sizes:
            raise UsageError("--dim gives symbols values for random inputs; with --inputs the arrays' shapes give "
                             "them: leave out --dim, or --inputs")
        return load_inputs(args.inputs, graph, tuple(weights)), weights
    drawn = random_inputs(graph, args.seed, sizes)
    return {k: v for k, v in drawn.items() if k not in weights}, weights


def dim_values(items: list[str]) -> dict[str, int]:
    """--dim SYMBOL=N options as {symbol: N}."""
    return _named_numbers(items, "--dim", "SYMBOL=N (a positive integer)", "symbol")


def cache_options(items: list[str]) -> dict[str, int]:
    """--cache PARAM=OUTPUT options as {parameter: output position}."""
    return _named_numbers(items, "--cache", "PARAM=OUTPUT (an output's position, from 0)", "parameter")


def _named_numbers(items: list[str], flag: str, form: str, what: str) -> dict[str, int]:
    """Repeated NAME=N options as {name: N}: a usage error for another form or a name given twice."""
    out: dict[str, int] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.isidentifier() or not value.strip().isdigit():
            raise UsageError(f"{flag} expects {form}, got '{item}'")
        if name in out:
            raise UsageError(f"{flag} gives {what} '{name}' twice")
        out[name] = int(value)
    return out


def in_caches(program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The call's inputs with each cache parameter's array copied into the front of an array of the
    cache's capacity (`CompiledProgram.new_cache`), passed as the view of that front."""
    out = dict(inputs)
    for cache in program.loops.caches:
        arr = inputs[cache.param]
        whole = program.new_cache(cache.param)
        front = whole[tuple(slice(0, n) for n in arr.shape)]
        front[...] = arr
        out[cache.param] = front
    return out


def dim_ranges(items: list[str]) -> dict[str, tuple[int, int]]:
    """--dim-range NAME=LOW..HIGH options as {name: (low, high)}."""
    ranges: dict[str, tuple[int, int]] = {}
    for item in items:
        name, eq, value = item.partition("=")
        low, dots, high = value.partition("..")
        if not eq or not dots or not name or not low.strip().isdigit() or not high.strip().isdigit():
            raise UsageError(f"--dim-range expects NAME=LOW..HIGH (positive integers), got '{item}'")
        if name in ranges:
            raise UsageError(f"--dim-range gives '{name}' twice")
        ranges[name] = (int(low), int(high))
    return ranges


def _non_negative_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got '{text}'")
    return int(text)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return int(text)


def cmd_check(args) -> int:
    from .ir.check import check_program
    from .programs import read_file

    for graph in check_program(read_file(args.file)).values():
        print(graph.signature())
    return 0


def cmd_fmt(args) -> int:
    from .ir.check import check_program
    from .ir.printer import print_program
    from .programs import read_file

    program = read_file(args.file)
    check_program(program)
    sys.stdout.write(print_program(program))
    return 0


def cmd_eval(args) -> int:
    from .ir.interp import evaluate
    from .programs import check_entry, read_file

    check_output(args.output)
    graph = check_entry(read_file(args.file), args.entry, args.file)
    inputs, weights = read_inputs(args, graph)
    try:
        outputs = evaluate(graph, inputs | weights)
    except StitchError as err:  # e.g. gather's index out of range: show the call's line
        if err.pos.line and err.pos.file == args.file and not err.source:
            from .ir.parse import read_source

            raise StitchError(err.message, err.pos, read_source(args.file), err.hint) from None
        raise
    if args.output:
        save_outputs(args.output, outputs)
    else:
        print(summarize(outputs))
    return 0


def cmd_compile(args) -> int:
    """`stitch compile`: the pipeline's stages as far as --emit asks, that stage printed."""
    from .ir.fold import fold_bound
    from .ir.printer import print_func
    from .pictures import egraph_dot, schedule_dot
    from .pipeline import check_entry, compile_graph, load_rule_files, lower_program, read_file, saturate_program
    from .schedule.schedule_print import print_schedule
    from .schedule.target import load_target

    if args.json and args.emit:
        raise UsageError(f"--json prints the compile figures and --emit {args.emit} a stage: give one of them")
    if args.focus and not args.dot:
        raise UsageError("--focus chooses what --dot draws: give --dot OUT too")
    if args.explain and args.emit not in (None, "schedule"):
        raise UsageError(f"--explain explains the schedule; --emit {args.emit} prints another stage: give one of them")
    args.emit = args.emit or "schedule"
    program = read_file(args.file)
    graph = check_entry(program, args.entry, args.file)
    if args.emit == "ir":
        sys.stdout.write(print_func(program.func(args.entry) if args.entry else program.funcs[0]))
        if not args.dot:
            return 0
    limits = compile_limits(args)
    rule_files = load_rule_files(args.rules, builtin=not args.no_builtin_rules, without=tuple(args.without_rules),
                                 unsafe_fp=args.unsafe_fp, trust_rules=args.trust_rules)
    bound = tuple(load_weights(args.weights, graph)) if args.weights else ()
    if bound:  # what the weights alone compute is a weight of its own (engine/ir/fold.py), as `run` compiles it
        folded = fold_bound(graph, bound)
        graph, bound = folded.graph, bound + folded.names
    if args.emit == "egraph" and not args.json:
        run, report = saturate_program(graph, rule_files, limits)
        print(report.render())
        if args.dot:
            draw(args.dot, egraph_dot(run.data(), f"e-graph of {graph.name}", args.focus))
        return 0
    target = load_target(args.target)
    if args.explain:
        return explain_compile(args, graph, rule_files, target, limits)
    compiled = compile_graph(graph, rule_files, target, limits, bound=bound)
    if args.dot:
        draw(args.dot, egraph_dot(compiled.data, f"e-graph of {graph.name}", args.focus) if args.emit == "egraph"
             else schedule_dot(compiled, args.focus))
    if args.emit == "ir":
        return 0
    if args.json or args.emit in ("loops", "c"):
        loops = lower_program(compiled, limits, bound)
    if args.json:
        print(json.dumps(as_json(compile_json(compiled, loops)), indent=2))
    elif args.emit == "loops":
        from ..lowering.loops import print_loops

        print(print_loops(loops), end="")
    elif args.emit == "c":
        from ..targets.cpu import c_for_target

        sys.stdout.write(c_for_target(loops, target))
    elif args.emit == "egraph":
        print(compiled.report.render())
    else:
        print(print_schedule(graph.name, target.name, compiled.schedule, compiled.cost, target.clock_ghz), end="")
        for reason in compiled.fusion_blocked:
            print(f"note: more kernels than the most-fused schedule, which breaks a limit of '{target.name}': {reason} "
                  f"(stitch compile --explain: what each boundary could have been)")
    return 0


def explain_compile(args, graph, rule_files, target, limits) -> int:
    """`stitch compile --explain`: the schedule, then why each edge is fused or not (engine/explain.py)."""
    from .explain import explain
    from .schedule.schedule_print import print_schedule

    explanation = explain(graph, rule_files, target, limits)
    if args.json:
        print(json.dumps(as_json(explanation.to_json()), indent=2))
        return 0
    extracted = explanation.extracted
    print(print_schedule(graph.name, target.name, extracted.schedule, extracted.cost, target.clock_ghz))
    print(explanation.text(), end="")
    return 0


def compile_limits(args):
    """The saturation and memory limits the compile options ask for; a limit that is not positive is an error."""
    from .rewrite.limits import Limits

    for flag, value in (("--iter-limit", args.iter_limit), ("--node-limit", args.node_limit),
                        ("--match-limit", args.match_limit)):
        if value is not None and value <= 0:
            raise UsageError(f"{flag} must be positive, got {value}")
    for flag, value in (("--time-limit", args.time_limit), ("--memory-limit", args.memory_limit)):
        if value is not None and (not value > 0 or value == float("inf")):
            raise UsageError(f"{flag} must be a positive number, got {value}")
    return Limits(args.iter_limit, args.node_limit, args.time_limit, args.match_limit, args.memory_limit * GIB)


def compile_json(compiled, loops) -> dict:
    """`compile --json`: the compile figures, with each kernel's shared bytes before and after merging."""
    from ..lowering.alloc import shared_bytes

    out = compiled.to_json()
    for k, lk in zip(out["kernels"], loops.kernels):
        k["shared_bytes_merged"], k["shared_bytes_unmerged"] = shared_bytes(lk)
    out["shared_bytes_merged"] = sum(k["shared_bytes_merged"] for k in out["kernels"])
    out["shared_bytes_unmerged"] = sum(k["shared_bytes_unmerged"] for k in out["kernels"])
    return out


def draw(path: str, dot: str) -> None:
    """Write a picture (`--dot`); say so on stderr when it could only be written as DOT text."""
    from .pictures import write_picture

    note = write_picture(path, dot)
    if note:
        print(note, file=sys.stderr)


def cmd_import(args) -> int:
    try:
        import onnx  # noqa: F401  (an optional extra)
    except ImportError:
        raise StitchError("stitch import needs the onnx package: pip install 'stitch[onnx]'") from None
    import numpy as np

    from ..frontends.onnx_import import import_onnx

    constants = {}
    for item in args.constant:
        name, sep, path = item.partition("=")
        if not sep:
            raise StitchError(f"--constant expects NAME=VALUES.npy, got '{item}'")
        try:
            constants[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise StitchError(f"{path}: not a readable .npy file ({err})") from None
    outputs = args.outputs.split(",") if args.outputs else None
    imported = import_onnx(args.file, entry=args.entry, fold_constants=args.fold_constants,
                           constant_inputs=constants, outputs=outputs, dims=dim_values(args.dim),
                           dim_ranges=dim_ranges(args.dim_range), winograd=args.winograd)
    if args.output:
        write_text(args.output, imported.text)
        renamed = [f"{param} (ONNX '{name}')" if param != name else param for name, param in imported.inputs.items()]
        print(f"wrote {args.output}: func {imported.checked.funcs[0].name}, inputs keyed {', '.join(renamed)}",
              file=sys.stderr)
    else:
        sys.stdout.write(imported.text)
    if args.weights:
        save_npz(args.weights, imported.weights)
        print(f"wrote {args.weights} ({len(imported.weights)} weight(s))", file=sys.stderr)
    elif imported.weights:
        print(f"note: {len(imported.weights)} parameter(s) hold initializer values; write them with --weights W.npz",
              file=sys.stderr)
    return 0


def cmd_rules_check(args) -> int:
    """Exit 1 if any rule is unsound (each is printed with its shrunk counterexample)."""
    from .rewrite.check import check_rule_file, report
    from .rewrite.rules import load_rules

    unsound = False
    for path in args.files:
        rf = load_rules(path)
        verdicts = check_rule_file(rf, args.examples)
        print(report(rf, verdicts, args.examples), flush=True)
        unsound |= any(v.failed for v in verdicts)
    return 1 if unsound else 0


def cmd_run(args) -> int:
    import time

    from .ir.interp import evaluate
    from .ir.tolerance import differences
    from .pipeline import check_entry, compile_entry, read_file

    if args.runs is not None and not args.profile:
        raise UsageError("--runs counts --profile's timed calls: give --profile too, or leave out --runs")
    if args.cpu_time and not args.profile:
        raise UsageError("--cpu-time is --profile's clock: give --profile too, or leave out --cpu-time")
    args.runs = args.runs or 10
    check_output(args.output)
    cflags = args.cflags
    if args.threads:
        from ..targets import runtime

        runtime.set_threads(args.threads)
    caches = cache_options(args.cache)
    graph = check_entry(read_file(args.file), args.entry, args.file)
    inputs, weights = read_inputs(args, graph)
    program = compile_entry(graph, target=args.target, rules=args.rules, builtin_rules=not args.no_builtin_rules,
                            cache_dir=args.cache_dir, cflags=cflags, without_rules=tuple(args.without_rules),
                            unsafe_fp=args.unsafe_fp, weights=weights, trust_rules=args.trust_rules, caches=caches)
    given = inputs
    inputs = in_caches(program, inputs) if caches else inputs
    if program.executor != "c":
        for flag, value in (("--threads", args.threads), ("--cflags", args.cflags)):
            if value is not None:
                warnings.warn(StitchWarning(f"{flag} does nothing here: the program runs on the {program.executor} "
                                            f"(target {program.compiled.target.name}), not as compiled C"))
    start = time.perf_counter()
    outputs = program(**inputs)
    run_seconds = time.perf_counter() - start
    problems = differences(outputs, evaluate(graph, given | weights), graph, given | weights) if args.check else []
    timings = None
    if args.profile:
        timings = program.profile(args.runs, args.cpu_time, **inputs)
    if args.output:
        save_outputs(args.output, outputs)
    if args.json:
        out = program.compiled.to_json()
        out.update({"run_seconds": run_seconds, "executor": program.executor})
        if program.executor == "c":
            from ..targets import runtime

            out["threads"] = runtime.threads()
        if program.report is not None:
            out.update(simulated_json(out, program.report))
        if args.check:
            out["check"] = "ok" if not problems else problems
        if timings is not None:
            out["profile"] = {"runs": args.runs, "kernels": [t.to_json() for t in timings]}
        print(json.dumps(as_json(out), indent=2))
    elif not args.output:
        print(summarize(outputs))
        print(f"ran on {program.executor} in {run_seconds * 1e3:.3f} ms")
        if program.report is not None:
            print(program.report.table())
        if timings is not None:
            from ..targets.profile import profile_table

            print(profile_table(timings, args.runs))
            if graph.symbols:
                from .ir.extent import planning_values

                at = ", ".join(f"{k} = {v}" for k, v in planning_values(program.compiled.graph.symbols).items())
                print(f"(the cost model's bytes and estimates are at the size it scheduled for, {at})")
    if problems:
        raise StitchError("the outputs differ from the reference interpreter:\n  " + "\n  ".join(problems))
    if args.check and not args.json:
        print("check: outputs equal the reference within tolerance")
    return 0


def save_outputs(path: str, outputs: list[np.ndarray]) -> None:
    """`eval -o` and `run -o`: the outputs as out0, out1, ... in exactly `path`, and say so."""
    names = [f"out{k}" for k in range(len(outputs))]
    save_npz(path, dict(zip(names, outputs)))
    print(f"wrote {path} ({', '.join(names)})", file=sys.stderr)


def check_output(path: str | None) -> None:
    """An -o that names a directory is bad usage (it would be written beside it as DIR.npz)."""
    import os

    if path is not None and os.path.isdir(path):
        raise UsageError(f"-o names a directory ({path}): give a file name, e.g. {os.path.join(path, 'out.npz')}")


def simulated_json(compiled: dict, report) -> dict:
    """The simulator's figures in the compile JSON: its keys per kernel and in total, `cycles` the simulated
    count (the cost model's estimate kept as `estimated_cycles`)."""
    sim = report.to_json()
    kernels = []
    for k, s in zip(compiled["kernels"], sim.pop("kernels")):
        kernels.append({**k, "estimated_cycles": k["cycles"], **s})
    return {"estimated_cycles": compiled["cycles"], **sim, "kernels": kernels}


def summarize(outputs: list[np.ndarray]) -> str:
    import numpy as np

    from .ir.interp import DTYPE_OF_NP

    lines = []
    for k, v in enumerate(outputs):
        typ = f"{DTYPE_OF_NP[v.dtype]}[{', '.join(map(str, v.shape))}]"
        if v.size and v.dtype != np.bool_:
            stats = f"min={v.min():.6g} max={v.max():.6g} mean={v.astype(np.float64).mean():.6g}"
        else:
            stats = f"true={int(v.sum())}/{v.size}" if v.dtype == np.bool_ else ""
        lines.append(f"out{k}: {typ} {stats}".rstrip())
    return "\n".join(lines)


def as_json(value):
    """`value` for json.dumps: a symbolic extent (an int subclass, which json would write as its
    planning value) as its expression, `"n * 768"`; the prices stay the planning size's numbers."""
    from .ir.extent import Extent

    if isinstance(value, Extent):
        return str(value)
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
