"""A row stored to an on-chip f32 buffer and a later sum over that row, written as one loop.

The row is written in 16-lane vectors (`vector_expr`), and the sum's terms read the row at the
element the sum is on (softmax's denominator, a layer norm's mean and sum of squared
deviations). Between the two loops may stand the statement setting the sum's start, written
first, and statements that neither write what the two loops read or write nor read the sum (a
copy of the row to an output), written after. Each vector of terms is added to a 16-lane sum as
the row's vector is stored, the last iterations one by one, in the order `vector_sum` adds its
exponentials: the row is not walked again. gcc's vectorizer leaves such a fused loop scalar
where the loops are fused before it (lowering/fuse.py: a float sum needs its reduction pragma),
so it is done here. Rows of exponentials keep ST_NO_VECTOR_EXP's scalar form.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...lowering.liveness import buffers_read
from ...lowering.loops import Accumulate, For, Ix, Store, index_vars, leaves, loads, map_indices
from . import tuning
from .emit import KernelWriter
from .ops import exponentials
from .rows import lane_sum, next_row_prefetch, row_store


@dataclass(frozen=True)
class Plan:
    """A row stored and summed in one loop."""

    loop: For  # the row's loop
    leaf: Store  # the row's store
    acc: Accumulate  # the sum
    term: object  # the sum's term at the row's element
    start: tuple  # the sum's start
    after: tuple  # statements between the two loops, written after them
    value: str  # the row's 16-lane value
    terms: str  # the sum's 16-lane term, reading the stored vector as st_e
    taken: int  # statements the two loops and those between them are


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...] = ()) -> Plan | None:
    """The summed row at `stmts[at]`, or None."""
    if w.vector_bytes != 64:
        return None
    row = stmts[at]
    leaf = row_store(w, row)
    if (leaf is None or row.kind != "serial" or row.extent < 16 or w.buffers[leaf.buffer].dtype != "f32"
            or leaf.buffer in w.streamed):
        return None
    end = at + 1
    while end < min(len(stmts), at + 1 + tuning.SUMMED_ROW_BETWEEN) and not (
            isinstance(stmts[end], For) and stmts[end].kind == "reduce"):
        end += 1
    if end == len(stmts):
        return None
    total, between = stmts[end], stmts[at + 1:end]
    if not (isinstance(total, For) and total.kind == "reduce" and total.extent == row.extent
            and len(total.body) == 1 and isinstance(total.body[0], Accumulate)):
        return None
    acc = total.body[0]
    term = map_indices(acc.value, lambda ix: ix.substitute({total.var: Ix.var(row.var)}))
    read = {ld.buffer for e in (leaf.value, term) for ld in loads(e)}
    if (acc.op != "sum" or w.buffers[acc.buffer].dtype != "f32" or acc.buffer == leaf.buffer
            or any(total.var in index_vars(ix) for ix in acc.index) or acc.buffer in read
            or leaf.buffer not in {ld.buffer for ld in loads(term)}
            or any(ld.buffer == leaf.buffer and ld.index != leaf.index for ld in loads(term))):
        return None
    start = [x for x in between if isinstance(x, Store) and x.buffer == acc.buffer]
    after = [x for x in between if not any(x is y for y in start)]
    moved = list(leaves(after))
    if (len(start) > 1 or any(leaf.buffer in buffers_read(x) for x in start)
            or any(x.buffer in read | {leaf.buffer, acc.buffer} or acc.buffer in buffers_read(x) for x in moved)
            or any(x.buffer in buffers_read(y) for x in moved for y in start)):
        return None
    value, terms = w.vector_expr(leaf.value, row.var), w.vector_expr(term, row.var)
    if value is None or terms is None:
        return None
    stored = w.lanes_at(leaf.buffer, leaf.index)
    if stored not in terms:
        return None
    terms = terms.replace(stored, "st_e")  # the vector just stored, not loaded again
    return Plan(row, leaf, acc, term, tuple(start), tuple(after), value, terms, end - at + 1)


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    w.block(plan.start, len(pad) // 2, loops)  # the sum's start, ahead of the row
    w.lines += loop_lines(w, plan, pad, loops)
    w.block(plan.after, len(pad) // 2, loops)  # (they read the row whole)


def loop_lines(w: KernelWriter, row: Plan, pad: str, loops: tuple[For, ...], step: str = "") -> list[str]:
    """The summed row's loop; `step` runs first at each 16-lane step (`pipelined_rows`)."""
    exp = exponentials(row.leaf.value) or exponentials(row.term)
    ahead = next_row_prefetch(w, (row.leaf.value, row.term), row.loop, loops) if exp else ""
    stored = w.lanes_at(row.leaf.buffer, row.leaf.index)
    return lane_sum(pad, row.loop, w.access(row.acc.buffer, row.acc.index), row.terms, w.expr(row.term),
                    exp, f"{step}{ahead}st_vf32 st_e = {row.value}; {stored} = st_e; ", f"{w.leaf(row.leaf)} ")
