"""A transpose with a loop between its two loops, that middle loop moved outside (a REWRITE recognizer).

`for a { for m { for b { out[..] = f(x[..]) } } }` storing along b what it reads along a (the
padded input of a depthwise conv, channels-first, copied from the product before it, whose rows
are positions: `t[c, h, w] = clip(y[h * W + w, c] + bias[c])`), reads one element per line of x
at every step of b, and a whole m x b plane of lines before a moves to the neighbouring element
of each: far more than the first-level cache holds for MobileNetV2's expansions (24 channels a
tile, 114 x 114 positions, lines 384 bytes apart; figures: docs/perf/2026-11-28-vision.md).
Written `for m { for a { for b } }`, the lines one m reads (b of them, each holding a's elements)
stay in the first-level cache across all of a. Taken when those lines fit in L1_BYTES. Each
iteration writes its own element and reads no element another writes, so the order is free.
Reads along b (the zero borders of a pad) keep reading contiguously.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.ir.extent import is_symbolic
from ...engine.ir.program import dtype_bytes
from ...lowering.loops import For, Store, loads
from ...lowering.matmul import contiguous_in, uses_var
from .emit import KernelWriter

L1_BYTES = 32 * 1024  # of the first-level cache, for the lines one step of m reads across a and b
LINE = 64


@dataclass(frozen=True)
class Plan:
    swapped: For  # the nest with its middle loop outside


def nest(s) -> tuple[For, For, For, Store] | None:
    """(a, m, b, the store) of three serial loops, each the only statement of the one outside it."""
    loops = []
    while isinstance(s, For) and s.kind == "serial" and len(s.body) == 1 and len(loops) < 3:
        loops.append(s)
        s = s.body[0]
    if len(loops) != 3 or not isinstance(s, Store) or any(is_symbolic(f.extent) for f in loops):
        return None
    return loops[0], loops[1], loops[2], s


def match(w: KernelWriter, s) -> Plan | None:
    found = nest(s)
    if found is None:
        return None
    a, m, b, leaf = found
    if any(ld.buffer == leaf.buffer for ld in loads(leaf.value)) or not contiguous_in(leaf.index, b.var):
        return None
    transposed = [ld for ld in loads(leaf.value) if ld.index and contiguous_in(ld.index, a.var)
                  and uses_var(ld.index, b.var) and uses_var(ld.index, m.var)]
    if not transposed or any(contiguous_in(ld.index, m.var) for ld in loads(leaf.value) if ld.index):
        return None
    elem = max(dtype_bytes(w.buffers[ld.buffer].dtype) for ld in transposed)
    lines = b.extent * -(-a.extent * elem // LINE) * len(transposed)
    if lines * LINE > L1_BYTES:
        return None
    return Plan(For(m.var, m.extent, "serial", [For(a.var, a.extent, "serial", [For(b.var, b.extent, "serial",
                                                                                    [leaf])])]))


def emit(w: KernelWriter, plan: Plan) -> For:
    return plan.swapped
