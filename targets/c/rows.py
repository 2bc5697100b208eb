"""What the row recognizers share: which loop writes a row, the reads that run along it, the
prefetch of the next row and of the next tile, and the order every 16-lane sum adds in."""

from __future__ import annotations

from ...engine.ir.program import dtype_bytes
from ...engine.schedule.index import affine
from ...lowering.loops import For, Ix, Load, Store, loads
from ...lowering.matmul import flat_coef, shift_ix
from .emit import KernelWriter


def row_store(w: KernelWriter, s) -> Store | None:
    """The Store of a loop whose one statement writes consecutive elements of its buffer, one per
    iteration, from values that read nothing of that buffer but the element written (an update
    in place, lowering/reuse.py) (`stream` and `vector_loop`'s rows); else None."""
    if not (isinstance(s, For) and len(s.body) == 1 and isinstance(s.body[0], Store)):
        return None
    leaf = s.body[0]
    shape = w.buffers[leaf.buffer].shape
    if (not all(affine(ix) for ix in leaf.index) or flat_coef(leaf.index, s.var, shape) != 1
            or any(ld.buffer == leaf.buffer and ld.index != leaf.index for ld in loads(leaf.value))):
        return None
    return leaf


def row_start(w: KernelWriter, leaf: Store, var: str) -> str:
    """The element a row store writes at the row loop's first iteration."""
    return w.access(leaf.buffer, at(leaf.index, var, 0))


def row_reads(w: KernelWriter, values, var: str) -> list[Load]:
    """The global f32 reads of `values` that run along a row, contiguous in `var` (what
    `long_row_reads`, `next_row_prefetch` and `pipelined_rows` prefetch or place)."""
    found = []
    for ld in (ld for e in values for ld in loads(e)):
        b = w.buffers[ld.buffer]
        if (b.scope == "global" and b.dtype == "f32" and all(affine(ix) for ix in ld.index)
                and flat_coef(ld.index, var, b.shape) == 1):
            found.append(ld)
    return found


def next_tile_prefetch(w: KernelWriter, values, var: str, span: int) -> tuple[list[str], str]:
    """(C declaring the next tile's loop variables, C prefetching each line that the global reads of
    `values` running along a row take at the next tile, for the `span` elements from `var`), for
    reads that move with the tiles; ([], "") outside a plain tile loop or without such reads. A row
    bound by its arithmetic (a group norm's SiLU) leaves the memory idle, while the next tile's first
    pass (its sums) would wait on every line from the L3 cache or memory
    (docs/perf/2026-11-29-group-norm.md)."""
    tiles = w.next_tile
    if not tiles:
        return [], ""
    found = {}
    for ld in row_reads(w, values, var):
        shape = w.buffers[ld.buffer].shape
        if any(flat_coef(ld.index, t, shape) for t in tiles):
            found.setdefault((ld.buffer, ld.index), ld)
    if not found:
        return [], ""
    names = {t: Ix.var(f"st_n_{t}") for t in tiles}
    declared = [f"const int64_t st_n_{t} = {value};" for t, value in tiles.items()]
    fetches = []
    for ld in found.values():
        step = max(1, 64 // dtype_bytes(w.buffers[ld.buffer].dtype))  # (a line a prefetch)
        for at_ in range(0, span, step):
            index = tuple(ix.substitute(names) for ix in shift_ix(ld.index, {var: at_}))
            fetches.append(f"__builtin_prefetch(&{w.access(ld.buffer, index)}, 0, 2); ")
    return declared, "".join(fetches)


def next_row_prefetch(w: KernelWriter, values, row: For, loops: tuple[For, ...]) -> str:
    """C prefetching, at each 16-lane step of a row of exponentials, the line the same global
    f32 reads of `values` take one iteration of the loop around the row later (the next row), for
    reads contiguous along the row that move with that loop. The exponentials take ~11 cycles
    a vector, time enough for the next row's lines to arrive before its first pass needs them."""
    outer = around(loops)
    if outer is None:
        return ""
    found = {}
    for ld in row_reads(w, values, row.var):
        if flat_coef(ld.index, outer.var, w.buffers[ld.buffer].shape):
            found.setdefault(ld.buffer, ld.index)
    return "".join(f"__builtin_prefetch(&{w.access(name, shift_ix(index, {outer.var: 1}))}, 0, 3); "
                   for name, index in found.items())


def lane_sum(pad: str, loop: For, target: str, term: str, scalar_term: str, guard: bool = False,
             step: str = "", scalar_step: str = "") -> list[str]:
    """C adding `term` (an st_vf32 at 16 iterations of `loop` from its variable on; `step` runs before
    it each time) into 16 lanes, then the lanes' total into `target`, then the last iterations one by
    one (`scalar_step`, `scalar_term`): the order every 16-lane sum here adds in. `guard` leaves the
    lanes to ST_VECTOR_EXP builds (the last iterations are then every iteration)."""
    v, n = loop.var, loop.extent
    vector = [f"{pad}  {{ st_vf32 st_acc = st_bcast_f32(0.0f);",
              f"{pad}    for (; {v} + 16 <= {n}; {v} += 16) {{ {step}st_acc += {term}; }}",
              f"{pad}    acc += _mm512_reduce_add_ps((__m512)st_acc); }}"]
    if guard:
        vector = [f"{pad}#if defined(ST_VECTOR_EXP)", *vector, f"{pad}#endif"]
    return [f"{pad}{{ int64_t {v} = 0; float acc = {target};", *vector,
            f"{pad}  for (; {v} < {n}; ++{v}) {{ {scalar_step}acc += {scalar_term}; }}",
            f"{pad}  {target} = acc; }}"]


def around(loops: tuple[For, ...]) -> For | None:
    """The innermost of `loops` with more than one iteration: the loop whose iterations are rows."""
    return next((u for u in reversed(loops) if u.extent > 1), None)


def at(index: tuple[Ix, ...], var: str, value: int) -> tuple[Ix, ...]:
    """`index` at one iteration of `var`."""
    return tuple(ix.substitute({var: Ix.constant(value)}) for ix in index)
