"""A float maximum or minimum into one element, as the prelude's st_max/st_min define it, in plain
vector reductions combined after the loop: the extremum of the non-NaN values and an any-NaN flag.

Only when the extremum is a zero does the sign matter (+0.0 is the larger zero, whatever order the
lanes combine in): then a second pass looks for a zero of the winning sign, cheaper than tracking
the sign in the first pass. An f32 extremum with a 16-lane form (`vector_expr`) is written with
two vectors of lanes and a NaN mask (`extremum_lanes`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...lowering.loops import Accumulate, For
from . import simd_reduce
from .emit import KernelWriter
from .ops import exponentials
from .prelude import C_TYPES


@dataclass(frozen=True)
class Plan:
    loop: For
    leaf: Accumulate
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    s = stmts[at]
    leaf = simd_reduce.reduction(w, s)
    if leaf is None or leaf.op == "sum" or w.buffers[leaf.buffer].dtype not in ("f32", "f64"):
        return None
    return Plan(s, leaf)


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    leaf = plan.leaf
    write(w, leaf, w.access(leaf.buffer, leaf.index), C_TYPES[w.buffers[leaf.buffer].dtype],
          simd_reduce.loop_head(plan.loop), pad, plan.loop)


def write(w: KernelWriter, leaf: Accumulate, target: str, ctype: str, head: str, pad: str, loop: For,
          first: list[str] | None = None) -> None:
    """The extremum `leaf` over `loop` (C head `head`) into `target`; `first`, when given, sets
    `acc` and `nan` instead of the first pass (`pipelined_passes`: from lanes it kept)."""
    if leaf.op == "max":
        cmp, start, zero, other = ">", "-INFINITY", "!__builtin_signbit(v)", f"-({ctype})0"
        winner = f"({ctype})0"
    else:
        cmp, start, zero, other = "<", "INFINITY", "(__builtin_signbit(v) != 0)", f"({ctype})0"
        winner = f"-({ctype})0"
    dtype = w.buffers[leaf.buffer].dtype
    value = w.expr(leaf.value)
    first = first or extremum_lanes(w, leaf, loop, value, start, pad) or [
        f"{pad}  #pragma omp simd reduction({leaf.op}:acc) reduction(|:nan)",
        f"{pad}  {head} {{ {ctype} v = {value}; nan |= v != v; acc = v {cmp} acc ? v : acc; }}"]
    w.lines += [f"{pad}{{ {ctype} acc = {start}; int nan = 0;", *first,
                f"{pad}  if (acc == 0 && !nan) {{ int zero = 0;",
                f"{pad}    #pragma omp simd reduction(|:zero)",
                f"{pad}    {head} {{ {ctype} v = {value}; zero |= (v == 0) & {zero}; }}",
                f"{pad}    acc = zero ? {winner} : {other}; }}",
                f"{pad}  {target} = st_{leaf.op}_{dtype}({target}, nan ? ({ctype})NAN : acc); }}"]


def extremum_lanes(w: KernelWriter, leaf: Accumulate, loop: For, value: str, start: str, pad: str) -> list[str]:
    """The first pass of an f32 row maximum (minimum) in 16-lane vectors, two of them a step
    (gcc's one vector of lanes waits on each max's latency), the NaN flag a mask of unordered
    compares, the last iterations one by one; [] where the value has no 16-lane form. `maxps
    (v, m)` gives m where v is NaN, and m where the two are zeros, as `v > m ? v : m` does: the
    same extremum of the non-NaN values, whose zero sign the caller's second pass settles.
    `value` is the scalar C of the extremum's value."""
    if w.vector_bytes != 64 or w.buffers[leaf.buffer].dtype != "f32" or exponentials(leaf.value):
        return []
    v, n = loop.var, loop.extent
    vector = w.vector_expr(leaf.value, v)
    if vector is None or n < 32:
        return []
    cmp = ">" if leaf.op == "max" else "<"
    op = "_mm512_max_ps" if leaf.op == "max" else "_mm512_min_ps"
    reduce = "_mm512_reduce_max_ps" if leaf.op == "max" else "_mm512_reduce_min_ps"
    return [f"{pad}  {{ __m512 st_m0 = _mm512_set1_ps({start}), st_m1 = st_m0; __mmask16 st_nan = 0; int64_t {v} = 0;",
            f"{pad}    for (; {v} + 32 <= {n}; {v} += 32) {{",
            f"{pad}      __m512 st_v0 = (__m512)({vector}), st_v1;",
            f"{pad}      {{ const int64_t st_next = {v} + 16; {{ const int64_t {v} = st_next; st_v1 = (__m512)({vector}); }} }}",
            f"{pad}      st_nan |= _mm512_cmp_ps_mask(st_v0, st_v1, _CMP_UNORD_Q);",
            f"{pad}      st_m0 = {op}(st_v0, st_m0); st_m1 = {op}(st_v1, st_m1); }}",
            f"{pad}    for (; {v} + 16 <= {n}; {v} += 16) {{ __m512 st_v0 = (__m512)({vector});",
            f"{pad}      st_nan |= _mm512_cmp_ps_mask(st_v0, st_v0, _CMP_UNORD_Q); st_m0 = {op}(st_v0, st_m0); }}",
            f"{pad}    acc = {reduce}({op}(st_m0, st_m1)); nan = st_nan != 0;",
            f"{pad}    for (; {v} < {n}; ++{v}) {{ float v = {value}; nan |= v != v; acc = v {cmp} acc ? v : acc; }} }}"]
