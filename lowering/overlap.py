"""Pipelined tiles: one tile's reads beside the previous tile's writes.

A tile of a memory-bound kernel reads its rows from global memory (its first row
loop), works on them on chip, then writes its rows out (its last row loop): the
tile's reads and its writes take turns on the memory bus, and the cost model's
transfer term, reads and writes over one bandwidth, assumes they share it at
once. Where the target asks for it (`pipeline_tiles`, on a cpu), the C backend
runs a tile's last row loop and the next tile's first in one loop:

    tile t-1: before  head | middle |  tail
    tile t:                          before  head | middle | tail
                                            (one loop)

two stages of a software pipeline, each tile's buffers in its own copy of the
kernel's scratch block (tile t in copy t mod 2). It is legal because a tile
loop's tiles are independent (`parallel`): no tile reads what another writes,
and nothing of one copy is live in the other's tile. What a tile computes, and
in which order within the tile, is unchanged, so its results are the same to
the bit. It pays where a tile's stores and the next tile's first reads would
otherwise wait on each other (docs/perf/2026-11-27-pass-choices.md).

The plan says which kernels to pipeline (`KernelPlan.pipelined`, copied to
`LoopKernel.pipelined` by lowering); this pass keeps the mark where it is legal,
the tile loops having the shape (`stages`) and two copies of the merged scratch
fitting the on-chip budget, and clears it elsewhere. Lowering's other passes and
the numpy executor see the same loops.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .liveness import buffers_read, buffers_touched
from .loops import Accumulate, For, LoopKernel, LoopProgram, Stmt, leaves
from .verify import capacity_problem

# Rows a head and a tail loop take turns in at least: with fewer, a tile's reads and the previous
# tile's writes hardly interleave, and a loop of one row is the two stages one after the other.
MIN_ROWS = 8


@dataclass(frozen=True)
class Stages:
    """A tile loop cut into a pipeline's stages."""

    nest: tuple[For, ...]  # the tile loop and the tile loops directly inside it: one tile index
    before: tuple[Stmt, ...]  # the tile's statements before its first read, on chip only
    head: For  # the first row loop reading global memory
    middle: tuple[Stmt, ...]
    tail: For  # the last statement: a row loop writing global memory, as many rows as `head`


def stages(loop: For, on_chip: set[str]) -> Stages | None:
    """The stages of a tile loop (`on_chip`: the kernel's own buffers), or None where it has no
    such shape: the head and the tail must be plain row loops of the same extent (MIN_ROWS at
    least) over inner loops (no product's nest, which the C backend blocks itself)."""
    nest = [loop]
    while len(nest[-1].body) == 1 and isinstance(nest[-1].body[0], For) and nest[-1].body[0].kind == "parallel":
        nest.append(nest[-1].body[0])
    body = nest[-1].body
    first = next((i for i, s in enumerate(body) if _reads_global(s, on_chip)), None)
    if first is None or first == len(body) - 1:
        return None
    head, tail = body[first], body[-1]
    if any(_touches_global(s, on_chip) for s in body[:first]):
        return None
    if not (_row_loop(head) and _row_loop(tail) and head.extent == tail.extent and head.extent >= MIN_ROWS):
        return None
    if not any(leaf.buffer not in on_chip for leaf in leaves([tail])):
        return None
    return Stages(tuple(nest), tuple(body[:first]), head, tuple(body[first + 1:-1]), tail)


def tile_loops(kernel: LoopKernel) -> list[For]:
    return [s for s in kernel.body if isinstance(s, For) and s.kind == "parallel"]


def pipeline_tiles(program: LoopProgram, capacity: int) -> LoopProgram:
    """Keep the mark of the kernels the plan pipelines (`KernelPlan.pipelined`) where it is legal:
    their tile loops all have a pipeline's stages and two copies of their buffers fit `capacity`
    (the verifier's check, `capacity_problem`, with two copies); clear it on the others."""
    kernels = []
    for k in program.kernels:
        on_chip = {b.name for b in k.allocs}
        loops = tile_loops(k)
        pipelined = (k.pipelined and bool(loops) and all(stages(loop, on_chip) is not None for loop in loops)
                     and capacity_problem(k, capacity) is None)
        kernels.append(k if pipelined == k.pipelined else replace(k, pipelined=pipelined))
    return replace(program, kernels=kernels)


def _row_loop(s: Stmt) -> bool:
    return (isinstance(s, For) and s.kind != "parallel" and bool(s.body) and all(isinstance(x, For) for x in s.body)
            and not any(isinstance(leaf, Accumulate) and leaf.unit == "matrix" for leaf in leaves([s])))


def _reads_global(s: Stmt, on_chip: set[str]) -> bool:
    return isinstance(s, For) and any(buffers_read(leaf) - on_chip for leaf in leaves([s]))


def _touches_global(s: Stmt, on_chip: set[str]) -> bool:
    return any(buffers_touched(leaf) - on_chip for leaf in leaves([s]))
