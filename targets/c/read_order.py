"""A transpose whose value has a transcendental op, its two loops swapped so that the inner loop
reads contiguously (a REWRITE recognizer).

`for a { for b { out[..] = f(x[..]) } }` storing along b what it reads along a (other reads may
be along b where they do not vary with a, as a bias) becomes `for b { for a { ... } }`: the inner
loop reads contiguously and gcc vectorizes f, storing lanes one by one; reading along b, a
gather, it ran f one element at a time. Each iteration writes its own element and reads no
element another writes, so the order is free.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...lowering.loops import For, Store, loads
from ...lowering.matmul import contiguous_in, uses_var
from .emit import KernelWriter
from .ops import TRANSCENDENTAL, computes


@dataclass(frozen=True)
class Plan:
    swapped: For  # the nest with its loops swapped


def match(w: KernelWriter, s) -> Plan | None:
    if not (isinstance(s, For) and s.kind == "serial" and len(s.body) == 1):
        return None
    inner = s.body[0]
    if not (isinstance(inner, For) and inner.kind == "serial" and len(inner.body) == 1
            and isinstance(inner.body[0], Store)):
        return None
    leaf = inner.body[0]
    if not computes(leaf.value, TRANSCENDENTAL) or any(ld.buffer == leaf.buffer for ld in loads(leaf.value)):
        return None
    a, b = s.var, inner.var
    reads = [ld for ld in loads(leaf.value) if ld.index]
    if not (contiguous_in(leaf.index, b) and uses_var(leaf.index, a)
            and not any(contiguous_in(ld.index, b) and uses_var(ld.index, a) for ld in reads)
            and any(contiguous_in(ld.index, a) and uses_var(ld.index, b) for ld in reads)):
        return None
    return Plan(For(b, inner.extent, "serial", [For(a, s.extent, "serial", [leaf])]))


def emit(w: KernelWriter, plan: Plan) -> For:
    return plan.swapped
