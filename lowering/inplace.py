"""Reading in place: on a cache, a staged copy of long rows is a pass that buys nothing.

The cost model stages a read on chip where tiles or nests would read it again
(`cost.classify`): lowering copies the tile's region into a buffer of its
own first (`a_s0[p0, r0] = a[p0, 128*r0o + r0]`) and the nests read the copy.
On a scratchpad (`accel`) that copy is the only way on chip. Where on-chip
memory is a cache (a `cpu` target), the hardware keeps what the tile reads
again by itself; a copy pays only where the region's rows are short and far
apart (a tile's 144 columns of a weight's rows: each row is its own stream,
and the copy gathers them into one contiguous block), and costs a pass over
the region where they are long. This pass drops the copies whose rows (the
contiguous run the copy's innermost loop walks) are at least the target's
`inplace_run_bytes`, and the readers read the source at the copy's index
instead: a product's left operand in chunks of K (128 rows of 512 elements,
copied per chunk of every tile of columns) is then read from where the
previous kernel wrote it. Nothing else changes: the schedule, its
footprint and its bytes are the cost model's as before.
"""

from __future__ import annotations

from dataclasses import replace

from ..engine.ir.program import dtype_bytes
from ..engine.schedule.index import affine
from .loops import For, Ix, Load, LoopKernel, LoopProgram, Stmt, Store, map_leaf_loads, perfect_nest, written_once


def read_in_place(program: LoopProgram, min_run_bytes: int) -> LoopProgram:
    """A new program without the staged copies of rows at least `min_run_bytes` long (0: none)."""
    if not min_run_bytes:
        return program
    globals_ = {b.name: b for b in program.params + program.intermediates + program.output_buffers}
    return replace(program, kernels=[_Kernel(k, globals_, min_run_bytes).run() for k in program.kernels])


class _Kernel:
    def __init__(self, kernel: LoopKernel, globals_: dict, min_run_bytes: int):
        self.k = kernel
        self.globals = globals_
        self.min_run = min_run_bytes
        self.allocs = {b.name: b for b in kernel.allocs}
        self.single = written_once(kernel.body)
        self.moved: dict[str, tuple[tuple[str, ...], Load]] = {}  # copy -> (its loop variables, what it copied)

    def run(self) -> LoopKernel:
        body = self.stmts(self.k.body)
        return replace(self.k, allocs=[b for b in self.k.allocs if b.name not in self.moved], body=body)

    def stmts(self, stmts: list[Stmt]) -> list[Stmt]:
        out = []
        for s in stmts:
            if not isinstance(s, For):
                out.append(map_leaf_loads(s, self.load))
            elif not self.dropped(s):
                out.append(For(s.var, s.extent, s.kind, self.stmts(s.body)))
        return out

    def dropped(self, loop: For) -> bool:
        """Whether `loop` is a staged copy of long rows of a global buffer (now read in place)."""
        nest = perfect_nest(loop)
        if nest is None:
            return False
        loops, leaf = nest
        own = [lp.var for lp in loops]
        value = leaf.value
        if (not isinstance(leaf, Store) or leaf.buffer not in self.allocs or leaf.buffer not in self.single
                or list(leaf.index) != [Ix.var(v) for v in own] or not isinstance(value, Load)
                or value.buffer not in self.globals or not value.index  # a scalar's copy has no rows
                or not all(affine(ix) for ix in value.index)):
            return False
        inner = loops[-1]
        if value.index[-1].coef(inner.var) != 1 or any(inner.var in ix.axes() for ix in value.index[:-1]):
            return False
        if inner.extent * dtype_bytes(self.globals[value.buffer].dtype) < self.min_run:
            return False
        self.moved[leaf.buffer] = (tuple(own), value)
        return True

    def load(self, ld: Load) -> Load:
        """A read of a dropped copy, as a read of what it copied."""
        if ld.buffer not in self.moved:
            return ld
        own, source = self.moved[ld.buffer]
        at = dict(zip(own, ld.index))
        return Load(source.buffer, tuple(ix.substitute(at) for ix in source.index))
