"""Prefetches ahead of a loop (a BEFORE_LOOP recognizer): the rows a few iterations of an outer
loop ahead, for global accesses that read or write short contiguous runs far apart (a tile's rows
of a larger array). The hardware prefetcher follows a stream only within a page, so each such row
would otherwise start with a full miss."""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.ir.extent import planned
from ...engine.ir.program import dtype_bytes
from ...engine.schedule.index import affine
from ...lowering.loops import Accumulate, For, Store, loads
from ...lowering.matmul import contiguous_in, flat_coef, shift_ix
from . import tuning
from .emit import KernelWriter
from .rows import at


@dataclass(frozen=True)
class Plan:
    lines: tuple[str, ...]  # one prefetch loop per access, without the indentation


def match(w: KernelWriter, inner: For, loops: tuple[For, ...], skip: str | None = None) -> Plan | None:
    """The prefetch loops ahead of `inner`, for each access whose rows an outer loop walks far apart
    (none for buffer `skip`)."""
    if not all(isinstance(x, (Store, Accumulate)) for x in inner.body):
        return None
    accesses = {}
    for leaf in inner.body:
        accesses[(leaf.buffer, leaf.index)] = 1
        for load in loads(leaf.value):
            accesses.setdefault((load.buffer, load.index), 0)
    lines = []
    for (name, index), write in accesses.items():
        b = w.buffers[name]
        if (name == skip or b.scope != "global" or not all(affine(ix) for ix in index)
                or not contiguous_in(index, inner.var)):
            continue
        run = inner.extent * dtype_bytes(b.dtype)
        outer = next((u for u in reversed(loops) if u.extent > 1 and flat_coef(index, u.var, b.shape)), None)
        if outer is None or run > tuning.PREFETCH_RUN or flat_coef(index, outer.var, b.shape) <= inner.extent:
            continue
        # (a tuning choice: at the planning size where extents are symbolic; the guard below stays exact)
        ahead = min(planned(outer.extent) // 2, max(tuning.PREFETCH_MIN_ROWS, tuning.PREFETCH_AHEAD // planned(run)))
        if ahead < 1:
            continue
        line = max(1, 64 // dtype_bytes(b.dtype))
        ahead_index = shift_ix(index, {outer.var: ahead})
        target = w.access(name, ahead_index)
        # the row's last element too: a row not starting on a line (numpy's large arrays start
        # 16 bytes into a page) spans one line more than the steps of `line` reach, and that
        # line's miss stalls every row
        last = w.access(name, at(ahead_index, inner.var, inner.extent - 1))
        lines.append(f"if ({outer.var} < {outer.extent - ahead}) {{ for (int64_t {inner.var} = 0; "
                     f"{inner.var} < {inner.extent}; {inner.var} += {line}) "
                     f"__builtin_prefetch(&{target}, {write}, 3); "
                     f"__builtin_prefetch(&{last}, {write}, 3); }}")
    return Plan(tuple(lines)) if lines else None


def emit(w: KernelWriter, plan: Plan, pad: str) -> None:
    w.lines += [pad + line for line in plan.lines]
