"""Reading in place: the staged reads the plan reads where they are lose their copies.

The cost model stages a read on chip where tiles or nests would read it again
(`plan.classify`): lowering copies the tile's region into a buffer of its
own first (`a_s0[p0, r0] = a[p0, 128*r0o + r0]`) and the nests read the copy.
On a cache target the plan reads a staged region of long rows in place
(`plan.read_in_place`, `Staged.in_place`): lowering makes the copy as for any
staged read, so that the passes before this one (binding a weight lays its
copy out once) see one form, and this pass drops the copies the plan named
(`LoopKernel.in_place`): their readers read the source at the copy's index
instead. Nothing else changes: the schedule, its footprint and its bytes are
the cost model's as before.
"""

from __future__ import annotations

from dataclasses import replace

from ..engine.schedule.index import affine
from .loops import For, Ix, Load, LoopKernel, LoopProgram, Stmt, Store, map_leaf_loads, perfect_nest, written_once


def read_in_place(program: LoopProgram) -> LoopProgram:
    """A new program without the staged copies the plan reads in place."""
    if not any(k.in_place for k in program.kernels):
        return program
    globals_ = {b.name: b for b in program.params + program.intermediates + program.output_buffers}
    return replace(program, kernels=[_Kernel(k, globals_).run() if k.in_place else k for k in program.kernels])


class _Kernel:
    def __init__(self, kernel: LoopKernel, globals_: dict):
        self.k = kernel
        self.globals = globals_
        self.single = written_once(kernel.body)
        self.moved: dict[str, tuple[tuple[str, ...], Load]] = {}  # copy -> (its loop variables, what it copied)

    def run(self) -> LoopKernel:
        body = self.stmts(self.k.body)
        cached = self.k.cached | {source.buffer for _, source in self.moved.values()}
        return replace(self.k, allocs=[b for b in self.k.allocs if b.name not in self.moved], body=body,
                       cached=frozenset(cached))

    def stmts(self, stmts: list[Stmt]) -> list[Stmt]:
        out = []
        for s in stmts:
            if not isinstance(s, For):
                out.append(map_leaf_loads(s, self.load))
            elif not self.dropped(s):
                out.append(For(s.var, s.extent, s.kind, self.stmts(s.body)))
        return out

    def dropped(self, loop: For) -> bool:
        """Whether `loop` is the copy of a staged read the plan reads in place (now dropped): a
        perfect nest storing a global buffer's region, written once, affine in its loop variables."""
        nest = perfect_nest(loop)
        if nest is None:
            return False
        loops, leaf = nest
        own = [lp.var for lp in loops]
        value = leaf.value
        if (not isinstance(leaf, Store) or leaf.buffer not in self.k.in_place or leaf.buffer not in self.single
                or list(leaf.index) != [Ix.var(v) for v in own] or not isinstance(value, Load)
                or value.buffer not in self.globals or not value.index  # a scalar's copy has no rows
                or not all(affine(ix) for ix in value.index)):
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
