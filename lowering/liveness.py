"""Liveness of a kernel's on-chip buffers: the statements during which each holds a value.

The rule, as in TVM's MergeSharedMemoryAllocations (whose linear access pattern
records a touch inside a loop on the loop itself):

1. Number the leaf statements (Store / Accumulate) of the kernel body 0, 1, 2, ...
   in execution (pre-)order, loop bodies written out once.
2. The *tile loops* are the `parallel` For loops at the top of the body: a
   statement list made only of `parallel` loops (the kernel body, then their
   bodies, recursively) is at tile level. Every tile has its own copy of the
   kernel's allocations, so one tile iteration never sees another's values:
   tile loops do not extend a live range.
3. Every other loop (`serial`, `reduce`, and a `parallel` loop inside a tile,
   whose iterations may run at once) repeats its body, so a value written in one
   iteration can be read in the next. An access inside such a loop therefore
   counts as an access at every statement of the *outermost* non-tile loop that
   contains it: it spans [first, last] leaf index of that loop.
4. A buffer's live range is [start of its first access span, end of its last
   access span], inclusive. A statement that reads one buffer and writes another
   makes both live at that index (no in-place reuse here: lowering/reuse.py
   rewrites such a statement to update its operand in place before merging).

Buffers of `kernel.allocs` that no statement touches have no live range and are
absent from the result; they conflict with nothing.
"""

from __future__ import annotations

from typing import Union

from .loops import Accumulate, For, LoopKernel, Stmt, Store, index_loads, loads


# a leaf, its region (the number of its outermost non-tile loop; None at tile level) and the
# non-tile loops around it, outermost first
Placed = tuple[Union[Store, Accumulate], Union[int, None], tuple[For, ...]]


def placed_leaves(kernel: LoopKernel) -> list[Placed]:
    """The kernel's leaves in execution order (rule 1), each with its region and loops."""
    out: list[Placed] = []
    _collect(kernel.body, in_tiles=True, region=None, loops=(), next_region=[0], out=out)
    return out


def live_ranges(kernel: LoopKernel) -> dict[str, tuple[int, int]]:
    """Map each accessed allocation of `kernel` to its inclusive live range of leaf indices."""
    leaves = placed_leaves(kernel)
    region_span = region_spans(leaves)
    allocated = {b.name for b in kernel.allocs}
    ranges: dict[str, tuple[int, int]] = {}
    for index, (leaf, region, _) in enumerate(leaves):
        start, end = region_span[region] if region is not None else (index, index)
        for name in buffers_touched(leaf) & allocated:
            lo, hi = ranges.get(name, (start, end))
            ranges[name] = (min(lo, start), max(hi, end))
    return ranges


def region_spans(leaves: list[Placed]) -> dict[int, tuple[int, int]]:
    """Each region's first and last leaf index (a region's leaves are consecutive)."""
    spans: dict[int, tuple[int, int]] = {}
    for index, (_, region, _) in enumerate(leaves):
        if region is not None:
            spans[region] = (spans.get(region, (index, index))[0], index)
    return spans


def ranges_overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    """Whether two inclusive live ranges share a statement (None: never live)."""
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


def buffers_touched(leaf: Store | Accumulate) -> set[str]:
    """The buffers a leaf statement reads or writes (a gathered index of its own included)."""
    return {leaf.buffer} | buffers_read(leaf)


def buffers_read(leaf: Store | Accumulate) -> set[str]:
    """The buffers a leaf statement loads from: its value's and its own index's gathered values."""
    return {load.buffer for load in loads(leaf.value)} | {load.buffer for ix in leaf.index for load in index_loads(ix)}


def _collect(stmts: list[Stmt], in_tiles: bool, region: int | None, loops: tuple[For, ...],
             next_region: list[int], out: list[Placed]) -> None:
    tile_level = in_tiles and all(isinstance(s, For) and s.kind == "parallel" for s in stmts)
    for s in stmts:
        if not isinstance(s, For):
            out.append((s, region, loops))
            continue
        inner = region
        if not tile_level and region is None:  # the outermost non-tile loop: a new region
            inner = next_region[0]
            next_region[0] += 1
        _collect(s.body, tile_level, inner, loops if tile_level else loops + (s,), next_region, out)
