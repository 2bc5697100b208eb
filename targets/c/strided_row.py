"""An innermost f32 loop writing a row from a read along another axis, written in vectors with
gathers (a STATEMENTS recognizer, AVX2 or AVX-512; split.py writes its pieces' rows this way too).

`for w { t[c, h, w] = clip(y[h * W + w, c] + bias[c], 0, 6) }`, the padded channels-first input of a
depthwise conv copied from the product before it (MobileNetV2's, after transpose_middle and the
splits), stores contiguously but reads y with a step of C elements: where C is a power of two
(32 in MobileNetV2's first block) gcc leaves the loop unvectorized ("complicated access pattern"),
and the ReLU6's NaN-aware max and min then run as scalar branches that mispredict on half of
random-signed inputs (figures: docs/perf/2026-11-28-vision.md); other steps gcc vectorizes
itself. Here the strided reads are gathers (one lane per iteration, the elements the scalar loop
reads) and max and min the branch-free vector forms of the scalar ones (strided_row.h): the same
bits. The last iterations (fewer than a vector's) run the scalar leaf.
Exponentials are left to vector_loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.schedule.index import affine
from ...lowering.loops import For, Load, Store, loads
from .emit import KernelWriter
from .ops import EXPONENTIALS
from .rows import row_store

LANES = {32: 8, 64: 16}  # f32 lanes of an st_vf32 by vector bytes: AVX2's and AVX-512's (strided_row.h)
# the NaN-aware maximum and minimum (float_helpers.h's st_max_f32, st_min_f32) on one st_vf32;
# exponentials have none here (vector_loop writes their rows)
FORMS = {"maximum": lambda args: f"st_maxv_f32({args[0]}, {args[1]})",
         "minimum": lambda args: f"st_minv_f32({args[0]}, {args[1]})"} | {op: None for op in EXPONENTIALS}


@dataclass(frozen=True)
class Plan:
    loop: For
    leaf: Store
    value: str
    taken: int = 1


def enabled(w: KernelWriter) -> bool:
    """Whether this recognizer is in the writer's table (split.py asks before writing a row this way)."""
    return any(r.name == "strided_row" for r in w.recognizers)


def vector_row(w: KernelWriter, loop: For, leaf) -> str | None:
    """The row's value on 16 lanes, where `leaf` (the only statement of `loop`) stores a contiguous
    f32 row and reads at least one f32 element at a constant step other than 0 and 1; else None."""
    if w.vector_bytes not in LANES or not isinstance(leaf, Store) or w.buffers[leaf.buffer].dtype != "f32":
        return None
    if leaf.buffer in w.streamed or row_store(w, For(loop.var, loop.extent, loop.kind, [leaf])) is None:
        return None
    if not any(unvectorized_step(w, ld, loop.var) for ld in loads(leaf.value)):
        return None  # gcc vectorizes the plain loop itself
    return w.vector_expr(leaf.value, loop.var, operand, FORMS)


def unvectorized_step(w: KernelWriter, ld: Load, var: str) -> bool:
    """Whether `ld` moves along `var` by a power of two of 16 elements or more: gcc 12 vectorizes a
    read at any other constant step element by element, but takes such a step for an interleaved
    group it cannot form ("complicated access pattern") and leaves the whole loop scalar. (Gathers
    where gcc does vectorize were slower on Zen 3: 0.31 ms against 0.24 at a step of 96, the same
    copy 2.8 ms against 0.32 at a step of 32.)"""
    flat = w.flat_index(ld.buffer, ld.index)
    if w.buffers[ld.buffer].dtype != "f32" or not affine(flat):
        return False
    step = abs(flat.coef(var))
    return step >= 16 and step & (step - 1) == 0


def operand(w: KernelWriter, e, var: str) -> str | None:
    """An operand as KernelWriter.vector_operand writes it (a literal, a broadcast, the lanes in
    place), else an f32 load at another constant step gathered (its offsets 32-bit)."""
    vector = w.vector_operand(e, var)
    if vector is not None or not isinstance(e, Load) or w.buffers[e.buffer].dtype != "f32":
        return vector
    flat = w.flat_index(e.buffer, e.index)
    if not affine(flat):
        return None
    step = flat.coef(var)
    return f"st_gatherv_f32(&{w.access(e.buffer, e.index)}, {step})" if abs(step) * 15 < 2**31 else None


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    s = stmts[at]
    if not (isinstance(s, For) and s.kind == "serial" and len(s.body) == 1 and isinstance(s.extent, int)
            and s.extent >= LANES.get(w.vector_bytes, 0)):
        return None
    value = vector_row(w, s, s.body[0])
    return None if value is None else Plan(s, s.body[0], value)


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    w.lines += row_lines(w, plan.loop.var, plan.leaf, plan.value, "0", str(plan.loop.extent), pad)


def row_lines(w: KernelWriter, var: str, leaf: Store, value: str, start: str, end: str, pad: str) -> list[str]:
    """C for the row over start..end-1: a vector's iterations at a time, then the rest one by one."""
    n, target = LANES[w.vector_bytes], w.access(leaf.buffer, leaf.index)
    return [f"{pad}{{ int64_t {var} = {start};",
            f"{pad}  for (; {var} + {n} <= {end}; {var} += {n}) *(st_vf32 *)&{target} = {value};",
            f"{pad}  for (; {var} < {end}; ++{var}) {w.leaf(leaf)} }}"]
