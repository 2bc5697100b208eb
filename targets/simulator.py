"""The accelerator simulator: run a LoopProgram on an `accel` target and count its cycles.

Functionally it is the numpy executor (`lowering/execute.py`), tile by tile;
`SimRun` extends the executor's kernel runner to keep time as each loop nest
runs. Its values of elementwise ops are therefore the reference interpreter's
own (engine/ir/interp.py's ELEMENTWISE table, checked against the op table at
import); an op's cycles default to 1 where `op_cycles` does not name it.

The time model (README, "The accelerator model"):

    dma(statement)     = ceil(global bytes it reads and writes / global_bandwidth)
    matrix(statement)  = batch * ceil(m / tile_m) * ceil(n / tile_n) * ceil(k / tile_k) * cycles_per_tile
    vector(statement)  = ceil(elements / vector_lanes) * (sum of op_cycles of its ops)
    step               = max(dma, matrix + vector) with overlap_dma, else their sum
    kernel             = launch_cycles + sum of its steps

A step is one tile: every statement run since the previous tile ended (so a
tile's staging copies belong to it, and the kernel's prologue to its first
tile). A matrix statement is an `Accumulate` lowering marked `unit="matrix"`
(a matmul's multiply-accumulate); m and n are the extents its last two
accumulator indices run over in the nest, k the loops its index does not use. Copies and
initializations do no vector work. The target has one core: tiles run one
after another.

Before anything runs, each kernel's on-chip footprint (its merged shared
buffer plus its local buffers, as the verifier counts it) must fit
`onchip_bytes`; otherwise the program is refused, naming the kernel and bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..engine.ir.errors import StitchError
from ..engine.schedule.target import Target
from ..lowering.execute import TileRun, execute
from ..lowering.loops import Accumulate, For, LoopKernel, LoopProgram, Op
from ..lowering.verify import capacity_problem, onchip_bytes


@dataclass
class KernelReport:
    name: str
    tiles: int = 0
    cycles: float = 0.0
    dma_cycles: float = 0.0
    matrix_cycles: float = 0.0
    vector_cycles: float = 0.0
    global_bytes_read: int = 0
    global_bytes_written: int = 0
    peak_onchip_bytes: int = 0


COUNTS = ("cycles", "dma_cycles", "matrix_cycles", "vector_cycles", "global_bytes_read", "global_bytes_written")


@dataclass
class SimReport:
    target: Target
    kernels: list[KernelReport] = field(default_factory=list)

    def total(self, key: str) -> float:
        return sum(getattr(k, key) for k in self.kernels)

    @property
    def cycles(self) -> float:
        return self.total("cycles")

    @property
    def global_bytes(self) -> int:
        return self.total("global_bytes_read") + self.total("global_bytes_written")

    @property
    def peak_onchip_bytes(self) -> int:
        return max((k.peak_onchip_bytes for k in self.kernels), default=0)

    def to_json(self) -> dict:
        """Totals (`peak_onchip_bytes` is the largest kernel's) and one object per kernel."""
        out = {key: _number(self.total(key)) for key in COUNTS}
        out["peak_onchip_bytes"] = self.peak_onchip_bytes
        out["simulated_seconds"] = self.target.seconds(self.cycles)
        out["kernels"] = [{"name": k.name, "tiles": k.tiles, "peak_onchip_bytes": k.peak_onchip_bytes,
                           **{key: _number(getattr(k, key)) for key in COUNTS}} for k in self.kernels]
        return out

    def table(self) -> str:
        """A readable table: one row per kernel and a total."""
        head = ("kernel", "tiles", "cycles", "dma", "matrix", "vector", "read B", "written B", "on-chip B")
        rows = [(k.name, k.tiles, *(_number(getattr(k, key)) for key in COUNTS), k.peak_onchip_bytes)
                for k in self.kernels]
        rows.append(("total", sum(k.tiles for k in self.kernels), *(_number(self.total(key)) for key in COUNTS),
                     self.peak_onchip_bytes))
        cells = [head] + [tuple(str(c) for c in row) for row in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
        lines = [f"simulated on {self.target.name}: {_number(self.cycles)} cycles "
                 f"({self.target.seconds(self.cycles) * 1e6:.3f} us at {self.target.clock_ghz:g} GHz)"]
        for row in cells:
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        return "\n".join(lines)


def simulate(program: LoopProgram, target: Target, inputs: dict[str, np.ndarray]) -> tuple[list[np.ndarray], SimReport]:
    """Outputs in return order and the report; refuses a kernel that does not fit on chip."""
    if target.matrix is None:
        raise StitchError(f"target '{target.name}' has no [matrix] unit: the simulator runs accel targets")
    report = SimReport(target)
    for kernel in program.kernels:
        report.kernels.append(KernelReport(kernel.name, peak_onchip_bytes=check_fits(kernel, target)))
    runs: list[SimRun] = []

    def runner(kernel: LoopKernel, memory, global_names) -> SimRun:
        runs.append(SimRun(memory, global_names, target, report.kernels[len(runs)]))
        return runs[-1]

    outputs, _ = execute(program, inputs, runner=runner)
    for run in runs:
        run.end_tile()
        run.kernel.cycles += target.launch_cycles
        run.kernel.global_bytes_read, run.kernel.global_bytes_written = run.read, run.written
    return outputs, report


def check_fits(kernel: LoopKernel, target: Target) -> int:
    """The kernel's on-chip bytes (lowering/verify.py's count), or its error if they exceed the target's."""
    problem = capacity_problem(kernel, target.onchip_bytes)
    if problem:
        raise StitchError(f"kernel {kernel.name}: {problem}",
                          hint=f"compile for target '{target.name}' (the cost model then picks tiles that fit), "
                               "or raise onchip_bytes")
    return sum(onchip_bytes(kernel))


class SimRun(TileRun):
    """The executor's kernel runner, also timing each loop nest and closing a step at the end of each tile."""

    def __init__(self, memory, global_names, target: Target, kernel: KernelReport):
        super().__init__(memory, global_names)
        self.target = target
        self.kernel = kernel
        self.dma = self.matrix = self.vector = 0.0

    def block(self, stmts, env: dict) -> None:
        for s in stmts:
            if isinstance(s, For) and s.kind == "parallel":
                innermost = not any(isinstance(b, For) and b.kind == "parallel" for b in s.body)
                for i in range(s.extent):
                    self.block(s.body, {**env, s.var: i})
                    if innermost:
                        self.end_tile()
            else:
                super().block([s], env)

    def nest(self, loops: list[For], leaf, env: dict) -> None:
        moved = self.read + self.written
        super().nest(loops, leaf, env)
        self.dma += dma_cycles(self.target, self.read + self.written - moved)
        if isinstance(leaf, Accumulate) and leaf.unit == "matrix":
            self.matrix += matrix_cycles(self.target, loops, leaf)
        else:
            self.vector += vector_cycles(self.target, loops, leaf)

    def end_tile(self) -> None:
        """Close the current step (if anything ran in it) and add its time to the kernel."""
        if not (self.dma or self.matrix or self.vector):
            return
        compute = self.matrix + self.vector
        k = self.kernel
        k.tiles += 1
        k.cycles += max(self.dma, compute) if self.target.overlap_dma else self.dma + compute
        k.dma_cycles += self.dma
        k.matrix_cycles += self.matrix
        k.vector_cycles += self.vector
        self.dma = self.matrix = self.vector = 0.0


def dma_cycles(target: Target, nbytes: int) -> float:
    return math.ceil(nbytes / target.global_bandwidth) if nbytes else 0


def matrix_cycles(target: Target, loops: list[For], leaf: Accumulate) -> float:
    """Matrix-unit tiles of one multiply-accumulate nest: its m x n output block and k reduce extent.

    k is what the accumulator sums over: the loops its index does not use. Not the loops marked
    `reduce`: a matmul output axis that the kernel reduces later is a `reduce` loop too, and
    counting it in k multiplied the tiles by its extent. Rows and columns are the loops lowering
    names (`Accumulate.matrix`), not the accumulator's last two dimensions: after a reshape it may
    be laid out [4, 1, 1] for a product of one row and four columns."""
    extents = {loop.var: loop.extent for loop in loops}
    indexed = {var for ix in leaf.index for var in ix.axes()}
    k = math.prod(loop.extent for loop in loops if loop.var not in indexed)
    out = math.prod(extents[var] for var in indexed if var in extents)
    m, n = (math.prod(extents.get(var, 1) for var in axes) for axes in leaf.matrix)
    batch = out // max(m * n, 1)
    unit = target.matrix
    tiles = batch * -(-m // unit.tile_m) * -(-n // unit.tile_n) * -(-k // unit.tile_k)
    return tiles * unit.cycles_per_tile


def vector_cycles(target: Target, loops: list[For], leaf) -> float:
    """Lane-wide passes over the nest's elements, each costing the cycles of the ops it applies."""
    per_element = sum(target.cycles_per_element(op) for op in _ops(leaf.value))
    if isinstance(leaf, Accumulate):
        per_element += target.cycles_per_element(leaf.op)
    elements = math.prod(loop.extent for loop in loops)
    return -(-elements // target.vector_lanes) * per_element


def _ops(e) -> list[str]:
    if isinstance(e, Op):
        return [e.op] + [op for a in e.args for op in _ops(a)]
    return []


def _number(x: float):
    return int(x) if float(x).is_integer() else round(x, 3)
