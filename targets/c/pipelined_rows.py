"""A loop over rows whose body ends in a summed row of exponentials (`summed_row`) and a row of the
output that reads, of what the body writes, only that row at its element and its sum (softmax's
`e / sum(e)`, rows a multiple of 16 long): each row's division runs in the loop of the next row's
exponentials, a vector of each a step, the row's sum kept from the step before.

The division takes the divider, the exponentials the multiply-add and add pipes: side by side
they share each step instead of waiting on each other. The next row's exponentials overwrite the
row in place, each vector after the division has read it. The division's stores run `st_k`
elements ahead where they would otherwise fall just ahead of the exponentials' reads modulo
4 KiB (tuning.ROW_STORE_GAP). A streamed output's whole lines take non-temporal stores and its
partial first and last lines plain ones, as `vector_loop` writes them; another output's rows
unaligned stores. Each element is computed as before: the same bits. Where ST_VECTOR_EXP is not
defined the rows run one after the other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...lowering.liveness import buffers_read
from ...lowering.loops import For, Ix, Load, Store, index_vars, leaves, loads, map_indices
from ...lowering.matmul import shift_ix
from . import summed_row, tuning
from .emit import KernelWriter
from .ops import exponentials
from .rows import at as index_at
from .rows import row_reads, row_start, row_store


@dataclass(frozen=True)
class Plan:
    loop: For  # the loop over rows
    out: Store  # the output row's store (the body's last loop)
    at: int  # where the summed row starts in the body
    row: summed_row.Plan
    division: str  # the previous row's output on 16 lanes, its sum read as st_sum
    sum_at: str  # the C of the sum's element
    reads: tuple[Load, ...]  # the summed row's global reads along it
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    s = stmts[at]
    if not (isinstance(s, For) and w.vector_bytes == 64 and s.kind == "serial" and s.extent >= 2
            and len(s.body) >= 2):
        return None
    body, tail = list(s.body), s.body[-1]
    out = row_store(w, tail)
    if out is None or w.buffers[out.buffer].dtype != "f32" or tail.kind != "serial" or tail.extent % 16:
        return None
    found = [(i, r) for i in range(len(body) - 1) if (r := summed_row.match(w, body, i)) is not None]
    if not found or found[-1][0] + found[-1][1].taken != len(body) - 1:
        return None
    row_at, row = found[-1]
    if tail.extent != row.loop.extent or not (exponentials(row.leaf.value) or exponentials(row.term)):
        return None
    # what the division reads of the body: the summed row at the element it is on, and the sum
    value = map_indices(out.value, lambda ix: ix.substitute({tail.var: Ix.var(row.loop.var)}))
    written = {x.buffer for x in leaves(body[:-1])}
    if (any(ld.buffer == row.leaf.buffer and ld.index != row.leaf.index for ld in loads(value))
            or any(ld.buffer in written - {row.leaf.buffer, row.acc.buffer} for ld in loads(value))
            or any(s.var in index_vars(ix) for ix in (*row.leaf.index, *row.acc.index))
            or out.buffer in written or any(out.buffer in buffers_read(x) for x in leaves(body[:-1]))
            or any(x.buffer == row.leaf.buffer for x in leaves(body[:row_at]))):  # (it runs beside the division)
        return None
    sum_at = w.access(row.acc.buffer, row.acc.index)
    previous = map_indices(value, lambda ix: shift_ix((ix,), {s.var: -1})[0])
    division = w.vector_expr(previous, row.loop.var)
    if division is None or sum_at not in division:
        return None
    reads = row_reads(w, (row.leaf.value,), row.loop.var)
    return Plan(s, out, row_at, row, division.replace(sum_at, "st_sum"), sum_at, tuple(reads))


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    s, out, row, reads, sum_at = plan.loop, plan.out, plan.row, plan.reads, plan.sum_at
    body, tail = list(s.body), s.body[-1]
    n = row.loop.extent
    v, i = row.loop.var, s.var
    depth = len(pad) // 2
    inner = loops + (s,)
    add = w.lines.append
    add(f"{pad}#if defined(ST_VECTOR_EXP)")
    add(f"{pad}{{ float st_sum = 0;")
    add(f"{pad}  for (int64_t {i} = 0; {i} <= {s.extent}; ++{i}) {{")
    add(f"{pad}    #define ST_ROW({v}) ((__m512)({plan.division}))")
    start = row_start(w, dataclasses.replace(out, index=shift_ix(out.index, {s.var: -1})), tail.var)
    # (the previous row's output: row -1 is never written, its address never formed but here)
    add(f"{pad}    float *st_o = {i} > 0 ? &{start} : 0;")
    # a streamed output's whole lines take non-temporal stores, its partial first and last lines
    # plain ones (as `vector_loop` writes them); another output's rows plain unaligned stores
    streamed = out.buffer in w.streamed
    store = "_mm512_stream_ps" if streamed else "_mm512_storeu_ps"
    add(f"{pad}    int64_t st_h = " + ("(int64_t)((-(uintptr_t)st_o & 63) >> 2)" if streamed else "0") + ", st_k = 0;")
    if reads:
        gap = tuning.ROW_STORE_GAP + 64
        first = w.access(reads[0].buffer, index_at(reads[0].index, v, 0))
        add(f"{pad}    if ({i} > 0 && {i} < {s.extent}) {{ int64_t st_d = (int64_t)(((uintptr_t)(st_o + st_h) - "
            f"(uintptr_t)&{first}) & 4095);")
        # (st_d + 64: a store up to 63 bytes behind the read overlaps it, and comes first in the step)
        add(f"{pad}      st_d = (st_d + 64) & 4095; st_k = st_d < {gap} ? ({gap} - st_d + 63) / 64 * 16 : 0; "
            f"if (st_k > {n - 16}) st_k = {n - 16}; }}")  # (the last line's part: in the loop)
    add(f"{pad}    if ({i} > 0) {{")
    add(f"{pad}      if (st_h) st_store_lanes(st_o, ST_ROW(0), 0, st_h);")
    add(f"{pad}      for (int64_t {v} = st_h; {v} < st_h + ({i} < {s.extent} ? st_k : {n}) && {v} + 16 <= {n}; {v} += 16) "
        f"{store}(st_o + {v}, ST_ROW({v}));")
    add(f"{pad}      if ({i} == {s.extent} && st_h) st_store_lanes(st_o + {n - 16}, ST_ROW({n - 16}), st_h, 16); }}")
    add(f"{pad}    if ({i} < {s.extent}) {{")
    w.block(body[:plan.at], depth + 3, inner)
    w.block(row.start, depth + 3, inner)
    step = (f"if ({i} > 0) {{ int64_t st_q = st_h + st_k + {v}; "
            f"if (st_q + 16 <= {n}) {store}(st_o + st_q, ST_ROW(st_q)); "
            f"else if (st_h && st_q == {n - 16} + st_h) st_store_lanes(st_o + {n - 16}, ST_ROW({n - 16}), st_h, 16); }} ")
    w.lines += summed_row.loop_lines(w, row, pad + "      ", inner, step)
    w.block(row.after, depth + 3, inner)
    add(f"{pad}      st_sum = {sum_at}; }}")
    add(f"{pad}    #undef ST_ROW")
    add(f"{pad}  }} }}")
    add(f"{pad}#else")
    add(f"{pad}for (int64_t {i} = 0; {i} < {s.extent}; ++{i}) {{")
    w.block(s.body, depth + 1, inner)
    add(f"{pad}}}")
    add(f"{pad}#endif")
