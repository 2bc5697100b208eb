"""The Python API: compile a program once, call it many times with numpy arrays.

    import stitch
    layernorm = stitch.compile("examples/layernorm.ir", target="cpu")
    (y,) = layernorm(x=x, gamma=g, beta=b)          # or layernorm(..., out=[y])
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import StitchError
from .graph import Graph
from .interp import bind_inputs, np_dtype
from .memory import check_memory
from .recursion import allows_deep_recursion


@dataclass
class CompiledProgram:
    graph: Graph
    compiled: object  # pipeline.Compiled
    loops: object  # lowering.loops.LoopProgram
    native: object | None  # targets.cpu.Native, when the target runs compiled C
    executor: str  # "c" | "numpy" | "simulator"
    report: object | None = None  # the last run's targets.simulator.SimReport, on an accel target

    @allows_deep_recursion
    def __call__(self, out: list[np.ndarray] | None = None, **inputs) -> list[np.ndarray]:
        args = bind_inputs(self.graph, inputs)
        if out is not None:
            check_outputs(self.graph, out, args)
        if self.executor == "c":
            return self.native.run(args, out)
        if self.executor == "simulator":
            from ..targets.simulator import simulate

            outputs, self.report = simulate(self.loops, self.compiled.target, args)
        else:
            from ..lowering.execute import execute

            outputs, _ = execute(self.loops, args)
        if out is not None:
            for dst, src in zip(out, outputs):
                dst[...] = src
            return out
        return outputs

    @allows_deep_recursion
    def profile(self, runs: int = 10, **inputs) -> list:
        """Each kernel's median time over `runs` calls beside the cost model's estimate
        (targets/profile.py's KernelTime rows; compiled C only)."""
        from ..targets.profile import profile

        return profile(self, bind_inputs(self.graph, inputs), runs)


def check_outputs(graph: Graph, out, inputs: dict[str, np.ndarray]) -> None:
    """Refuse `out=` arrays the program cannot write into: one error listing every problem.

    Checked on every target alike: the C target writes through raw pointers (a read-only
    mapping is a segfault, a wrong dtype or stride silently wrong bytes), and an output
    overlapping an input (or another output) is overwritten while it is still being read."""
    types = graph.output_types
    if not isinstance(out, (list, tuple)) or len(out) != len(types):
        raise StitchError(f"out= must be a list of {len(types)} array(s), one per output of '{graph.name}'")
    problems = []
    for k, (arr, want) in enumerate(zip(out, types)):
        if not isinstance(arr, np.ndarray):
            problems.append(f"out[{k}] is a {type(arr).__name__}, not a numpy array")
            continue
        if arr.dtype != np_dtype(want.dtype) or arr.shape != want.shape:
            problems.append(f"out[{k}] is {arr.dtype}{list(arr.shape)}, the output is {want}")
        if not arr.flags.writeable:
            problems.append(f"out[{k}] is read-only")
        if not arr.flags.c_contiguous:
            problems.append(f"out[{k}] is not C-contiguous (np.ascontiguousarray makes a copy that is)")
        for name, x in inputs.items():
            if _overlap(arr, x):
                problems.append(f"out[{k}] shares memory with input '{name}'")
        for j in range(k):
            if isinstance(out[j], np.ndarray) and _overlap(arr, out[j]):
                problems.append(f"out[{k}] shares memory with out[{j}]")
    if problems:
        raise StitchError(f"out= arrays of '{graph.name}' cannot be written: " + "; ".join(problems),
                          hint="pass writeable, C-contiguous arrays of the output types that share no memory "
                               "with the inputs or each other (or omit out= to get fresh ones)")


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays share a byte; an overlap too costly to decide exactly counts as one."""
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=10_000))
    except np.exceptions.TooHardError:
        return True


@allows_deep_recursion
def compile(source: str | Path, target: str = "cpu", rules: list[str] = (), builtin_rules: bool = True,
            entry: str | None = None, cache_dir: str | Path | None = None, cflags: str | list[str] | None = None,
            limits=None, without_rules: tuple[str, ...] = (), unsafe_fp: bool = False) -> CompiledProgram:
    """Compile `.ir` text or a path to a `.ir` file for `target` (cpu, accel or a .toml path).

    `cflags` (a string or a list of flags) replaces the optimisation flags (`-O3 -march=native`); the
    flags the generated C needs are always added (`targets/cpu.py`, REQUIRED_FLAGS).
    `without_rules` drops built-in rule files (`forwarding`) or built-in rules by name pattern (`stitch-*`);
    `unsafe_fp` also uses rules tagged [unsafe-fp] (they may change results at NaN, inf, -0.0, overflow).
    On an accel target calls run on the simulator and leave its report in `.report`."""
    from ..lowering.lower import lower
    from ..targets.target import load_target
    from .check import check_program
    from .parse import parse_file, parse_program
    from .pipeline import compile_graph, load_rule_files
    from .saturate import Limits

    _check_arguments(source, target, rules, builtin_rules, entry, cache_dir, cflags, limits, without_rules)
    if not isinstance(unsafe_fp, bool):
        _wrong("unsafe_fp", "True or False", unsafe_fp)
    text_given = isinstance(source, str) and "func" in source and "{" in source
    program = parse_program(source, "<string>") if text_given else parse_file(source)
    graphs = check_program(program)
    if not graphs:
        raise StitchError("the program defines no func")
    if entry is not None and entry not in graphs:
        raise StitchError(f"no func named '{entry}' (the program defines {', '.join(graphs)})")
    graph = graphs[entry] if entry else next(iter(graphs.values()))
    tgt = load_target(target)
    rule_files = load_rule_files(list(rules), builtin_rules, tuple(without_rules), unsafe_fp)
    limits = limits or Limits()
    compiled = compile_graph(graph, rule_files, tgt, limits)
    loops = lower(compiled)
    check_memory(limits.memory, "lowering")
    native = None
    if tgt.kind == "cpu":
        from ..targets.cpu import build, compiler_flags

        start = time.perf_counter()
        native = build(loops, cache_dir, compiler_flags(cflags))
        compiled.seconds += time.perf_counter() - start
    if tgt.kind == "accel":
        executor = "simulator"
    else:  # the numpy executor only where no C compiler could build the library
        executor = "c" if native is not None and native.library is not None else "numpy"
    return CompiledProgram(graph, compiled, loops, native, executor)


def _check_arguments(source, target, rules, builtin_rules, entry, cache_dir, cflags, limits, without_rules) -> None:
    """TypeError naming the argument for a value of the wrong kind (a bare int would otherwise be read
    as a file descriptor, a bare string as a list of one-letter names)."""
    from .saturate import Limits

    path = (str, os.PathLike)
    if not isinstance(source, path):
        _wrong("source", ".ir text or the path of a .ir file", source)
    if not isinstance(target, path):
        _wrong("target", "'cpu', 'accel' or the path of a .toml file", target)
    for name, value, what in (("rules", rules, "rule file paths"), ("without_rules", without_rules, "names"),
                              ("cflags", cflags, "compiler flags (or one string of them)")):
        if name == "cflags" and (value is None or isinstance(value, str)):
            continue
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not all(
                isinstance(v, path if name == "rules" else str) for v in value):
            _wrong(name, f"a list of {what}", value)
    if not isinstance(builtin_rules, bool):
        _wrong("builtin_rules", "True or False", builtin_rules)
    if entry is not None and not isinstance(entry, str):
        _wrong("entry", "a func name", entry)
    if cache_dir is not None and not isinstance(cache_dir, path):
        _wrong("cache_dir", "a directory path", cache_dir)
    if limits is not None:
        if not isinstance(limits, Limits):
            _wrong("limits", "a stitch.engine.saturate.Limits", limits)
        for field in dataclasses.fields(limits):
            value = getattr(limits, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise StitchError(f"limits.{field.name} must be a positive number, got {value!r}")


def _wrong(name: str, want: str, got) -> None:
    raise TypeError(f"stitch.compile: {name} must be {want}, not {type(got).__name__} {got!r:.60}")
