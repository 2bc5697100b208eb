"""A reduction over an innermost reduce loop into one element, vectorized into a scalar by gcc
(`omp simd reduction`): a sum, or an integer maximum or minimum. Float extrema are `extremum`'s,
f32 sums of exponentials `vector_sum`'s (which falls back on this module's sum)."""

from __future__ import annotations

from dataclasses import dataclass

from ...lowering.loops import Accumulate, For, index_vars
from . import tuning
from .emit import KernelWriter
from .prelude import C_TYPES


@dataclass(frozen=True)
class Plan:
    loop: For
    leaf: Accumulate
    taken: int = 1


def reduction(w: KernelWriter, s) -> Accumulate | None:
    """The accumulation of a reduce loop of one statement into one element, long enough to
    vectorize (SIMD_REDUCE_TRIPS) and of a dtype these forms take; else None."""
    if not (isinstance(s, For) and s.kind == "reduce" and len(s.body) == 1) or s.extent < tuning.SIMD_REDUCE_TRIPS:
        return None
    leaf = s.body[0]
    if not isinstance(leaf, Accumulate) or any(s.var in index_vars(ix) for ix in leaf.index):
        return None
    if leaf.op != "sum" and w.buffers[leaf.buffer].dtype not in ("f32", "f64", "i32", "i64"):
        return None
    return leaf


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    s = stmts[at]
    leaf = reduction(w, s)
    if leaf is None or not (leaf.op == "sum" or w.buffers[leaf.buffer].dtype in ("i32", "i64")):
        return None
    return Plan(s, leaf)


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    s, leaf = plan.loop, plan.leaf
    if leaf.op == "sum":
        w.lines += sum_lines(w, s, leaf, pad)
        return
    ctype = C_TYPES[w.buffers[leaf.buffer].dtype]
    target = w.access(leaf.buffer, leaf.index)
    cmp = ">" if leaf.op == "max" else "<"
    w.lines += [f"{pad}{{ {ctype} acc = {target};", f"{pad}  #pragma omp simd reduction({leaf.op}:acc)",
                f"{pad}  {loop_head(s)} {{ {ctype} v = {w.expr(leaf.value)}; acc = v {cmp} acc ? v : acc; }}",
                f"{pad}  {target} = acc; }}"]


def sum_lines(w: KernelWriter, s: For, leaf: Accumulate, pad: str) -> list[str]:
    """The sum as gcc vectorizes it. f16 sums accumulate in float and round once, as numpy's
    half-precision sum does."""
    dtype = w.buffers[leaf.buffer].dtype
    acc_type = "float" if dtype == "f16" else C_TYPES[dtype]
    target = w.access(leaf.buffer, leaf.index)
    return [f"{pad}{{ {acc_type} acc = {target};", f"{pad}  #pragma omp simd reduction(+:acc)",
            f"{pad}  {loop_head(s)} acc += {w.expr(leaf.value)};", f"{pad}  {target} = acc; }}"]


def loop_head(s: For) -> str:
    return f"for (int64_t {s.var} = 0; {s.var} < {s.extent}; ++{s.var})"
