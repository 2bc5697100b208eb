"""A long f32 sum (a group norm's 4096 elements a group) in four vector accumulators.

gcc vectorizes a sum's `omp simd` loop (`simd_reduce`) into one vector of partial sums, so each
vector of terms waits for the previous add: on Zen 3 at 8 lanes, 512 dependent vaddps a group of
4096, three cycles each. Four accumulators, each taking every fourth vector of terms, keep four
adds in flight. The terms are computed as the plain loop computes them; only the order of the sum
differs: the accumulators added pairwise, then their lanes one by one from the first, then the last
iterations one by one. Another order than gcc's, one order whichever thread runs it; within the
reference's tolerance as any sum's order is. Terms with exponentials are left to `vector_sum`
and `simd_reduce` (their vector forms need ST_VECTOR_EXP).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...lowering.loops import Accumulate, For
from . import simd_reduce, tuning
from .emit import KernelWriter
from .ops import exponentials

ACCUMULATORS = 4


@dataclass(frozen=True)
class Plan:
    loop: For
    leaf: Accumulate
    term: str  # the term on the machine's lanes
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    s = stmts[at]
    leaf = simd_reduce.reduction(w, s)
    if (leaf is None or leaf.op != "sum" or w.vector_bytes not in (32, 64) or s.extent < tuning.LONG_SUM_TRIPS
            or w.buffers[leaf.buffer].dtype != "f32" or exponentials(leaf.value)):
        return None
    term = w.vector_expr(leaf.value, s.var)
    return Plan(s, leaf, term) if term is not None else None


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    s, leaf = plan.loop, plan.leaf
    v, n, lanes = s.var, s.extent, w.vector_bytes // 4
    target = w.access(leaf.buffer, leaf.index)
    accs = [f"st_a{k}" for k in range(ACCUMULATORS)]
    adds = " ".join(f"{a} += ST_TERM(({v} + {lanes * k}));" for k, a in enumerate(accs))
    w.lines += [f"{pad}{{ int64_t {v} = 0; float acc = {target};",
                f"{pad}#define ST_TERM({v}) ({plan.term})",
                f"{pad}  {{ st_vf32 {accs[0]} = st_bcast_f32(0.0f), " + ", ".join(f"{a} = {accs[0]}" for a in accs[1:]) + ";",
                f"{pad}    for (; {v} + {lanes * ACCUMULATORS} <= {n}; {v} += {lanes * ACCUMULATORS}) {{ {adds} }}",
                f"{pad}    st_vf32 st_s = ({accs[0]} + {accs[1]}) + ({accs[2]} + {accs[3]});",
                f"{pad}    for (int st_k = 0; st_k < {lanes}; ++st_k) acc += st_s[st_k]; }}",
                f"{pad}#undef ST_TERM",
                f"{pad}  for (; {v} < {n}; ++{v}) acc += {w.expr(leaf.value)};",
                f"{pad}  {target} = acc; }}"]
