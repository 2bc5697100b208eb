"""An f32 sum of exponentials (or tanh) with a 16-lane form on AVX-512, as a sum of st_expv_f32's
(st_tanhv_f32's) vectors: gcc's vectors of st_expf cannot use vscalefps. The last iterations run
one by one (`lane_sum`), and the sum as gcc vectorizes it (`simd_reduce`) is the ST_NO_VECTOR_EXP
fallback. Another order of the same terms than gcc's lanes: one order, whichever thread runs it.
The next row's reads are prefetched meanwhile (`next_row_prefetch`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...lowering.loops import Accumulate, For
from . import simd_reduce
from .emit import KernelWriter
from .ops import exponentials
from .rows import lane_sum, next_row_prefetch


@dataclass(frozen=True)
class Plan:
    loop: For
    leaf: Accumulate
    value: str  # the term on 16 lanes
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    s = stmts[at]
    leaf = simd_reduce.reduction(w, s)
    if (leaf is None or leaf.op != "sum" or w.vector_bytes != 64 or w.buffers[leaf.buffer].dtype != "f32"
            or not exponentials(leaf.value)):
        return None
    value = w.vector_expr(leaf.value, s.var)
    return Plan(s, leaf, value) if value is not None else None


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    s, leaf = plan.loop, plan.leaf
    target = w.access(leaf.buffer, leaf.index)
    w.lines += [f"{pad}#if defined(ST_VECTOR_EXP)",
                *lane_sum(pad, s, target, plan.value, w.expr(leaf.value),
                          step=next_row_prefetch(w, (leaf.value,), s, loops)),
                f"{pad}#else", *simd_reduce.sum_lines(w, s, leaf, pad), f"{pad}#endif"]
