"""The Python API: compile a program once, call it many times with numpy arrays.

    import stitch
    layernorm = stitch.compile("examples/layernorm.ir", target="cpu")
    (y,) = layernorm(x=x, gamma=g, beta=b)          # or layernorm(..., out=[y])
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import StitchError
from .graph import Graph
from .interp import bind_inputs


@dataclass
class CompiledProgram:
    graph: Graph
    compiled: object  # pipeline.Compiled
    loops: object  # lowering.loops.LoopProgram
    native: object | None  # targets.cpu.Native, when the target runs compiled C
    executor: str  # "c" | "numpy" | "simulator"
    report: object | None = None  # the last run's targets.simulator.SimReport, on an accel target

    def __call__(self, out: list[np.ndarray] | None = None, **inputs) -> list[np.ndarray]:
        args = bind_inputs(self.graph, inputs)
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

    def profile(self, runs: int = 10, **inputs) -> list:
        """Each kernel's median time over `runs` calls beside the cost model's estimate
        (targets/profile.py's KernelTime rows; compiled C only)."""
        from ..targets.profile import profile

        return profile(self, bind_inputs(self.graph, inputs), runs)


def compile(source: str | Path, target: str = "cpu", rules: list[str] = (), builtin_rules: bool = True,
            entry: str | None = None, cache_dir: str | Path | None = None, cflags: tuple[str, ...] | None = None,
            limits=None, without_rules: tuple[str, ...] = ()) -> CompiledProgram:
    """Compile `.ir` text or a path to a `.ir` file for `target` (cpu, accel or a .toml path).

    `without_rules` drops built-in rule files (`forwarding`) or built-in rules by name pattern (`stitch-*`).
    On an accel target calls run on the simulator and leave its report in `.report`."""
    from ..lowering.lower import lower
    from ..targets.target import load_target
    from .check import check_program
    from .parse import parse_file, parse_program
    from .pipeline import compile_graph, load_rule_files
    from .saturate import Limits

    text_given = isinstance(source, str) and "func" in source and "{" in source
    program = parse_program(source, "<string>") if text_given else parse_file(source)
    graphs = check_program(program)
    if not graphs:
        raise StitchError("the program defines no func")
    if entry is not None and entry not in graphs:
        raise StitchError(f"no func named '{entry}' (the program defines {', '.join(graphs)})")
    graph = graphs[entry] if entry else next(iter(graphs.values()))
    tgt = load_target(target)
    compiled = compile_graph(graph, load_rule_files(list(rules), builtin_rules, without_rules), tgt, limits or Limits())
    loops = lower(compiled)
    native = None
    if tgt.kind == "cpu":
        from ..targets.cpu import DEFAULT_FLAGS, build

        start = time.perf_counter()
        native = build(loops, cache_dir, tuple(cflags) if cflags else DEFAULT_FLAGS)
        compiled.seconds += time.perf_counter() - start
    if tgt.kind == "accel":
        executor = "simulator"
    else:  # the numpy executor only where no C compiler could build the library
        executor = "c" if native is not None and native.library is not None else "numpy"
    return CompiledProgram(graph, compiled, loops, native, executor)
