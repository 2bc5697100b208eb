"""What the pipeline's stages hand on: `Compiled`, a program through saturation and extraction (the
schedule lowering takes), and `CompiledProgram`, what `stitch.compile` returns (pipeline.py, `build`):
called with numpy arrays, it runs on its target's executor: the compiled C on a cpu target (the numpy
executor where no C compiler was found), the simulator on an accel target.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from .ir.errors import StitchError
from .ir.extent import instantiate, planning_values
from .ir.graph import Graph
from .ir.interp import (
    CallBinder,
    aligned_empty,
    bind_inputs,
    np_dtype,
    outputs_fit,
    shape_at,
)
from .ir.recursion import allows_deep_recursion

if TYPE_CHECKING:  # not imported with `import stitch`: compiling imports them
    from ..lowering.loops import LoopProgram
    from .rewrite.egraph_data import EGraphData
    from .rewrite.saturate import RunReport
    from .schedule.cost import ScheduleCost
    from .schedule.kernel import Schedule
    from .schedule.search import SearchResult
    from .schedule.target import Target


@dataclass
class Compiled:
    """A program through saturation and extraction: the Schedule lowering takes."""

    graph: Graph
    target: Target
    report: RunReport
    data: EGraphData
    extracted: SearchResult
    seconds: float
    # a symbolic program's schedules for its smaller size buckets (engine/ir/extent.py BUCKETS), each a
    # Compiled of the graph with its symbol's range cut at the bucket's top
    variants: list["Compiled"] = field(default_factory=list)

    @property
    def schedule(self) -> Schedule:
        return self.extracted.schedule

    @cached_property
    def fusion_blocked(self) -> list[str]:
        """Why the most-fused schedule was not taken, where it has fewer kernels than the one taken:
        the target's limits it breaks. Worked out when asked (`stitch compile` prints it): it builds
        and prices a whole schedule."""
        from .schedule.cost import schedule_cost
        from .schedule.extract import MOST_FUSED, extract_tree
        from .schedule.form import build_schedule

        fused = build_schedule(self.data, extract_tree(self.data, MOST_FUSED))
        if len(fused.kernels) < len(self.cost.kernels):
            return schedule_cost(fused, self.target).problems
        return []

    @property
    def cost(self) -> ScheduleCost:
        return self.extracted.cost

    def to_json(self) -> dict:
        from .schedule.schedule_print import schedule_json

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



@dataclass
class CompiledProgram:
    graph: Graph
    compiled: Compiled
    loops: LoopProgram
    native: object | None  # targets.cpu.Native, when the target runs compiled C
    executor: str  # "c" | "numpy" | "simulator"
    report: object | None = None  # the last run's targets.simulator.SimReport, on an accel target
    weights: tuple[str, ...] = ()  # the parameters bound at compile time: a call does not take them
    # what the kernels read besides a call's inputs: the blocks made from the weights, and the
    # program's own copies of the weights a kernel reads as they are
    bound: dict[str, np.ndarray] = field(default_factory=dict)
    _instances: dict = field(default_factory=dict, repr=False)  # sizes -> the loops at them (`instance`)
    # the size buckets below the top (a symbolic program): ({symbol: bucket top}, the program built for
    # it), ascending; a call runs the first whose tops its sizes fit, else this program
    variants: list = field(default_factory=list)

    @cached_property
    def binder(self) -> CallBinder:
        """Checks a call's arrays against the parameters not bound at compile time."""
        return CallBinder(self.graph, self.weights)

    def inputs(self, inputs: dict) -> dict[str, np.ndarray]:
        """A call's arrays checked against the parameters not bound at compile time, with what the
        kernels read of the bound ones."""
        return bind_inputs(self.graph, inputs, self.weights) | self.bound

    def __call__(self, out: list[np.ndarray] | None = None, **inputs) -> list[np.ndarray]:
        quick = self._quick
        if quick is not None and (got := quick(inputs, out)) is not None:
            return got
        given, sizes, program = self._called(inputs)
        # (the bound arrays are the program's own: no out= array shares them)
        if out is not None and not outputs_fit(self._output_specs, out, given):
            check_outputs(self.graph, out, given, sizes)
        if program.executor == "c":  # (it walks nothing recursively: no raised recursion limit, 3 us a call)
            return program.native.run(given, out, sizes)  # (the native program passes its bound arrays itself)
        args = given | program.bound if program.bound else given
        outputs = program._execute(args, out, sizes)
        self.report = program.report
        return outputs

    @cached_property
    def _quick(self):
        """The compiled C's one-function call of the common kind (`Native.quick_call`: None where the
        call is of another kind), for a program without symbols; else None."""
        if self.executor != "c" or self.graph.symbols or self.variants or self._output_specs is None:
            return None
        params = tuple((name, dtype, static) for name, dtype, _, static, _, _ in self.binder.params)
        if any(static is None for _, _, static in params):
            return None
        return self.native.quick_call(params, self._output_specs)

    @cached_property
    def _output_specs(self) -> tuple[tuple[np.dtype, tuple[int, ...]], ...] | None:
        """Each output's numpy dtype and shape, where every shape is static (`outputs_fit`)."""
        types = self.graph.output_types
        if not all(isinstance(d, int) for t in types for d in t.shape):
            return None
        return tuple((np_dtype(t.dtype), tuple(t.shape)) for t in types)

    def new_cache(self, name: str) -> np.ndarray:
        """A zeroed array for cache parameter `name` (compiled with `caches=`) at its capacity: pass
        its first n positions (`cache[:, :, :n]`) as the parameter; each call writes the output's new
        positions after them and returns the output as a view of this array."""
        caches = {c.param: c for c in self.loops.caches}
        if name not in caches:
            raise StitchError(f"'{name}' is not a cache of '{self.graph.name}'"
                              + (f" (its caches: {', '.join(caches)})" if caches else " (compiled without caches=)"))
        buffer = next(b for b in self.loops.params if b.name == name)
        out = aligned_empty(buffer.shape, np_dtype(buffer.dtype))
        out[...] = 0
        return out

    def _called(self, inputs: dict) -> tuple[dict[str, np.ndarray], dict[str, int], "CompiledProgram"]:
        """A call's checked arrays, the symbols' values they give, and the program that runs them."""
        given, sizes = self.binder(inputs)
        if not sizes:
            return given, sizes, self
        self._check_sizes(sizes)
        return given, sizes, self.bucket(sizes)

    def bucket(self, sizes: dict[str, int]) -> "CompiledProgram":
        """The program a call at `sizes` runs: the smallest size bucket they fit, else this one."""
        for tops, program in self.variants:
            if all(sizes[k] <= v for k, v in tops.items()):
                return program
        return self

    def _check_sizes(self, sizes: dict[str, int]) -> None:
        """A symbol's value above the one the program was scheduled at (engine/ir/extent.py: the top of
        its range, or PLANNING_LIMIT) is refused: buffers on chip are laid out for that size."""
        top = planning_values(self.compiled.graph.symbols)
        over = [f"'{name}' is {v}" for name, v in sizes.items() if name in top and v > top[name]]
        if over:
            raise StitchError(f"'{self.graph.name}' was compiled for sizes up to "
                              + ", ".join(f"{name} = {top[name]}" for name in top) + f": {', '.join(over)}",
                              hint="declare the symbol's range to compile for larger sizes ([n: 1..N] after the "
                                   "func name; stitch import --dim-range NAME=LO..HI)")

    def instance(self, sizes: dict[str, int]) -> LoopProgram:
        """The loops at these symbol values (each Extent evaluated), for the walking executors."""
        key = tuple(sorted(sizes.items()))
        if key not in self._instances:
            if len(self._instances) > 8:
                self._instances.clear()
            self._instances[key] = instantiate(self.loops, sizes)
        return self._instances[key]

    @allows_deep_recursion
    def _execute(self, args: dict[str, np.ndarray], out: list[np.ndarray] | None,
                 sizes: dict[str, int] | None = None) -> list[np.ndarray]:
        """A call on the simulator or the numpy executor, which walk the loops recursively (a
        symbolic program's at the call's sizes)."""
        loops = self.instance(sizes) if sizes else self.loops
        if self.executor == "simulator":
            from ..targets.simulator import simulate

            outputs, self.report = simulate(loops, self.compiled.target, args)
        else:
            from ..lowering.execute import execute

            outputs, _ = execute(loops, args, count=False)  # (its traffic is not asked for)
        if out is not None:
            for dst, src in zip(out, outputs):
                dst[...] = src
            return out
        return outputs

    @allows_deep_recursion
    def profile(self, runs: int = 10, cpu_time: bool = False, **inputs) -> list:
        """Each kernel's median time over `runs` calls beside the cost model's estimate
        (targets/profile.py's KernelTime rows; compiled C only). With `cpu_time` (1 thread only)
        the calling thread's CPU time instead of the wall clock."""
        from ..targets.profile import profile

        given, sizes, program = self._called(inputs)
        return profile(program, given | program.bound, runs, sizes, cpu_time)


def check_outputs(graph: Graph, out, inputs: dict[str, np.ndarray], sizes: dict[str, int] | None = None) -> None:
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
        shape = shape_at(want.shape, sizes or {})
        if arr.dtype != np_dtype(want.dtype) or arr.shape != shape:
            called = ", ".join(f"{s}={v}" for s, v in (sizes or {}).items())
            at_sizes = "" if shape == want.shape else f" ({list(shape)} at {called})"
            problems.append(f"out[{k}] is {arr.dtype}{list(arr.shape)}, the output is {want}{at_sizes}")
        flags = arr.flags
        if not flags.writeable:
            problems.append(f"out[{k}] is read-only")
        if not flags.c_contiguous:
            problems.append(f"out[{k}] is not C-contiguous (np.ascontiguousarray makes a copy that is)")
        elif not flags.aligned:
            problems.append(f"out[{k}] is not aligned to its {arr.dtype.itemsize}-byte elements (np.empty makes one that is)")
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
