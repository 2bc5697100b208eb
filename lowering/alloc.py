"""Merge each kernel's shared allocations into one buffer, reusing bytes by liveness.

What TVM's MergeSharedMemoryAllocations does per kernel launch, for stitch:

- Each kernel owns its own merged buffer (`kernel.offsets`, `kernel.merged_bytes`);
  nothing is planned across kernels (the bug TVM's rework fixed was a second
  kernel losing its merged buffer to the first).
- Only `shared` allocations are merged. `local` ones are registers/accumulators,
  left to the backend, and globals are not the kernel's.
- Two buffers whose live ranges (lowering/liveness.py) overlap never share a
  byte; buffers live at different times may.
- Every buffer starts at a multiple of its alignment: its dtype's size, or
  `alignment` if that is larger (a target's 64, say; a power of two).

The planner is greedy first-fit over live intervals. Buffers are placed one at
a time, by alignment descending, then size descending (the larger a buffer,
the harder it is to fit later), then first use; each goes at the lowest aligned
offset clear of every already-placed buffer whose live range overlaps its own.
A buffer occupies its size rounded up to its alignment. Taking larger
alignments first means every end offset is already aligned for what follows,
so no padding is ever inserted. The unmerged figure (`unmerged_bytes`) counts
each buffer the same way, its size rounded up to its alignment (as separate
aligned allocations would take, and as the cost model counts a tile's
footprint), so the merged buffer is never larger than the unmerged one: with
every pair of buffers live at once, first fit stacks them end to end, and
fewer overlaps only let a buffer go lower. (Counting raw sizes unmerged made
a kernel's single 4-byte accumulator 64 bytes merged against 4 unmerged.)

A kernel with a single shared buffer (or none) is left alone, as in TVM: no
offsets, and `merged_bytes` is that buffer's size rounded up to its alignment
(0 with no shared buffer).
"""

from __future__ import annotations

from dataclasses import replace

from ..engine.ir.extent import is_symbolic
from ..engine.ir.program import dtype_bytes
from .liveness import live_ranges, ranges_overlap
from .loops import Buffer, LoopKernel, LoopProgram


def merge_allocations(program: LoopProgram, alignment: int = 0) -> LoopProgram:
    """A copy of `program` whose kernels each have one liveness-planned merged shared buffer."""
    if alignment < 0 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be 0 or a power of two, not {alignment}")
    kernels = []
    for kernel in program.kernels:
        offsets, merged_bytes = _plan(kernel, alignment)
        unmerged_bytes = sum(round_up(b.nbytes, buffer_alignment(b, alignment))
                             for b in kernel.allocs if b.scope == "shared")
        kernels.append(replace(kernel, offsets=offsets, merged_bytes=merged_bytes, unmerged_bytes=unmerged_bytes))
    return replace(program, kernels=kernels)


def shared_bytes(kernel: LoopKernel) -> tuple[int, int]:
    """(merged, unmerged) shared bytes of a kernel; before merging both are the sum of the buffers' sizes."""
    if not kernel.merged_bytes:
        total = sum(b.nbytes for b in kernel.allocs if b.scope == "shared")
        return total, total
    return kernel.merged_bytes, kernel.unmerged_bytes


def local_bytes(kernel: LoopKernel) -> int:
    """Bytes of a kernel's local buffers (each its own array, beside the merged shared buffer)."""
    return sum(b.nbytes for b in kernel.allocs if b.scope == "local")


def buffer_alignment(buffer: Buffer, alignment: int = 0) -> int:
    """The byte alignment a buffer's offset in the merged buffer must have."""
    return max(dtype_bytes(buffer.dtype), alignment)


def _plan(kernel: LoopKernel, alignment: int) -> tuple[dict[str, int], int]:
    shared = [b for b in kernel.allocs if b.scope == "shared"]
    if len(shared) <= 1:
        return {}, sum(round_up(b.nbytes, buffer_alignment(b, alignment)) for b in shared)
    if any(is_symbolic(b.nbytes) for b in shared):
        # sizes of a symbolic program's call: first fit compares them at one size, and a gap or an
        # end chosen there may not hold at another (a [3, 64] buffer and a [3, past + 1] one at the
        # same offset, the merged size the second's end); one after another holds at every size
        offsets, at = {}, 0
        for b in shared:
            align = buffer_alignment(b, alignment)
            offsets[b.name] = round_up(at, align)
            at = offsets[b.name] + round_up(b.nbytes, align)
        return offsets, at

    ranges = live_ranges(kernel)
    first_use = {b.name: ranges[b.name][0] if b.name in ranges else -1 for b in shared}
    order = sorted(shared, key=lambda b: (-buffer_alignment(b, alignment), -b.nbytes,
                                          first_use[b.name], b.name))
    placed: dict[str, tuple[int, int]] = {}  # name -> [start, end) in bytes
    for b in order:
        align = buffer_alignment(b, alignment)
        size = round_up(b.nbytes, align)
        clashes = sorted(span for name, span in placed.items()
                         if ranges_overlap(ranges.get(name), ranges.get(b.name)))
        offset = 0
        for start, end in clashes:  # first fit: the lowest gap that holds `size` bytes
            if offset + size <= start:
                break
            offset = max(offset, round_up(end, align))
        placed[b.name] = (offset, offset + size)

    offsets = {b.name: placed[b.name][0] for b in shared}  # in allocation order
    return offsets, max(end for _, end in placed.values())


def round_up(n: int, align: int) -> int:
    return -(-n // align) * align


LINE = 64  # each buffer of a pipelined tile's copy starts on a cache line, as the C backend's scratch reservations do


def scratch_layout(kernel: LoopKernel) -> tuple[int, dict[str, int]]:
    """One copy of a pipelined tile's buffers: (its bytes, each buffer's byte offset in it), the
    shared buffers at their merged offsets, then the local ones, each on a cache line of its own."""
    shared = [b for b in kernel.allocs if b.scope == "shared"]
    size = kernel.merged_bytes or sum(round_up(b.nbytes, LINE) for b in shared)
    offsets, at = {}, 0
    for b in shared:
        offsets[b.name] = kernel.offsets.get(b.name, at)
        at = offsets[b.name] + round_up(b.nbytes, LINE)
    at = round_up(size, LINE)
    for b in kernel.allocs:
        if b.scope == "local":
            offsets[b.name] = at
            at += round_up(b.nbytes, LINE)
    return at, offsets
