"""An f16 matmul nest, with numpy's f16 matmul semantics: products and sums in float, one rounding
per output element. The accumulator's cells of one row block live in a float shadow across the
reduce loop (rounding them at every step drifts by several ulp). The accumulator itself is f32
(lowering/widen.py), so a reduction walked in chunks keeps its float sum between chunks."""

from __future__ import annotations

from dataclasses import dataclass

from ...lowering.loops import Accumulate, For, accumulates_in_float, index_vars, perfect_nest
from . import tuning
from .emit import KernelWriter
from .prelude import C_TYPES


@dataclass(frozen=True)
class Plan:
    outer: tuple[For, ...]  # the loops over the accumulator's row blocks
    inner: tuple[For, ...]  # the reduce loop and the loops inside it
    leaf: Accumulate
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    s = stmts[at]
    nest = perfect_nest(s) if isinstance(s, For) else None
    if nest is None or not accumulates_in_float(nest[1], w.buffers[nest[1].buffer].dtype):
        return None
    nest_loops, leaf = nest
    indexed = {v for ix in leaf.index for v in index_vars(ix)}
    first = next((i for i, loop in enumerate(nest_loops) if loop.var not in indexed), None)
    if first is None:
        return None
    return Plan(tuple(nest_loops[:first]), tuple(nest_loops[first:]), leaf)


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    outer, inner, leaf = plan.outer, plan.inner, plan.leaf
    indexed = {v for ix in leaf.index for v in index_vars(ix)}
    cells = [loop for loop in inner if loop.var in indexed]
    size, offset = 1, "0"
    for loop in cells:
        offset = f"({offset}) * {loop.extent} + {loop.var}" if size > 1 else loop.var
        size *= loop.extent
    target = w.access(leaf.buffer, leaf.index)
    a, b = (f"(float)({w.expr(arg)})" for arg in leaf.value.args)
    depth = len(pad) // 2
    lines = []
    for i, loop in enumerate(outer):
        lines.append("  " * i + f"for (int64_t {loop.var} = 0; {loop.var} < {loop.extent}; ++{loop.var}) {{")
    inside = "  " * len(outer)
    if size * 4 > tuning.LOCAL_STACK_BYTES and w.frame is not None:
        lines.append(f"{inside}{{ float *acc_f = (float *)(st_scratch + {w.reserve(size * 4)});")
    else:
        lines.append(f"{inside}{{ float acc_f[{size}];")

    def over(loop_list, body):
        head = [inside + "  " * (k + 1) + f"for (int64_t {lp.var} = 0; {lp.var} < {lp.extent}; ++{lp.var})"
                for k, lp in enumerate(loop_list)]
        return head + [inside + "  " * (len(loop_list) + 1) + body]

    lines += over(cells, f"acc_f[{offset}] = (float){target};")
    lines += over(inner, f"acc_f[{offset}] += {a} * {b};")
    lines += over(cells, f"{target} = ({C_TYPES[w.buffers[leaf.buffer].dtype]})acc_f[{offset}];")
    lines.append(f"{inside}}}")
    lines += ["  " * i + "}" for i in reversed(range(len(outer)))]
    w.lines += ["  " * depth + line for line in lines]
