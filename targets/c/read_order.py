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
    nest = transposed_store(s)
    if nest is None or not computes(nest[2].value, TRANSCENDENTAL):
        return None
    outer, inner, leaf = nest
    return Plan(For(inner.var, inner.extent, "serial", [For(outer.var, outer.extent, "serial", [leaf])]))


def transposed_store(s) -> tuple[For, For, Store] | None:
    """(a, b, the store) of `for a { for b { out[..] = f(x[..]) } }` storing along b what it reads
    along a (no read along b varies with a) and reading no element it writes; else None. The
    transpose recognizer (transpose.py) takes such a nest too, when f has no transcendental."""
    if not (isinstance(s, For) and s.kind == "serial" and len(s.body) == 1):
        return None
    inner = s.body[0]
    if not (isinstance(inner, For) and inner.kind == "serial" and len(inner.body) == 1
            and isinstance(inner.body[0], Store)):
        return None
    leaf = inner.body[0]
    if any(ld.buffer == leaf.buffer for ld in loads(leaf.value)):
        return None
    a, b = s.var, inner.var
    reads = [ld for ld in loads(leaf.value) if ld.index]
    if not (contiguous_in(leaf.index, b) and uses_var(leaf.index, a)
            and not any(contiguous_in(ld.index, b) and uses_var(ld.index, a) for ld in reads)
            and any(contiguous_in(ld.index, a) and uses_var(ld.index, b) for ld in reads)):
        return None
    return s, inner, leaf


def emit(w: KernelWriter, plan: Plan) -> For:
    return plan.swapped
