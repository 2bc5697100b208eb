"""A loop over rows of on-chip f32 buffers whose body is row loops over the same columns, each
writing its row in place or adding it into a sum over the rows (a layer norm over the first axis:
its tile's deviations and their squares' sum), written with the columns outside.

For each block of 16 columns, the rows in turn, each sum's 16 lanes in a register (gcc keeps them
in memory, a load and a store a row). Each element is still updated in the order of the rows, so
the results are the same bit for bit. Legal where no two columns touch one element: every access
is contiguous in the columns and its rows lie at least a row of columns apart (or it does not
move with the rows), a written buffer is read only at the element being written, and a sum's
buffer is read by no statement of the loop. Up to four blocks of 16 columns go in a pass over
the rows: each sum's chain waits on an add's latency a row, and four chains keep the adder busy.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.schedule.index import affine
from ...lowering.loops import Accumulate, For, Ix, Store, loads, map_indices
from ...lowering.matmul import flat_coef, through_units
from .emit import KernelWriter
from .ops import exponentials


@dataclass(frozen=True)
class Plan:
    loop: For  # the loop over rows
    columns: For  # the first row loop (its variable names the columns)
    blocks: tuple[tuple, ...]  # per block of 16 columns: (lines before the rows, a row's lines, lines after)
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    s = stmts[at]
    if w.vector_bytes != 64 or not (isinstance(s, For) and s.kind in ("serial", "reduce") and s.extent > 1):
        return None
    rows, col, body = s.var, None, []
    for x in s.body:
        units: list[str] = []
        inner = through_units(x, units)
        if not (isinstance(inner, For) and inner.kind == "serial" and len(inner.body) == 1
                and isinstance(inner.body[0], (Store, Accumulate))):
            return None
        col = col or inner
        if inner.extent != col.extent:
            return None
        rename = {inner.var: Ix.var(col.var)} | {u: Ix.constant(0) for u in units}
        body.append(map_indices(inner.body[0], lambda ix, m=rename: ix.substitute(m)))
    n, c = col.extent, col.var
    if n % 16 or any(exponentials(leaf.value) for leaf in body):
        return None
    sums = [leaf for leaf in body if isinstance(leaf, Accumulate)]
    written = {leaf.buffer: leaf.index for leaf in body if isinstance(leaf, Store)}
    if not sums or len({leaf.buffer for leaf in sums}) != len(sums) or set(written) & {x.buffer for x in sums}:
        return None

    def columnwise(buffer: str, index) -> bool:
        b = w.buffers[buffer]
        if buffer in w.globals or b.dtype != "f32" or not all(affine(ix) for ix in index):
            return False
        step = flat_coef(index, rows, b.shape)
        return flat_coef(index, c, b.shape) == 1 and (step == 0 or abs(step) >= n)

    for leaf in body:
        reads = list(loads(leaf.value))
        if (not columnwise(leaf.buffer, leaf.index) or any(not columnwise(ld.buffer, ld.index) for ld in reads)
                or any(ld.buffer in written and ld.index != written[ld.buffer] for ld in reads)
                or any(ld.buffer == x.buffer for ld in reads for x in sums)
                or isinstance(leaf, Accumulate) and (leaf.op != "sum" or leaf.unit != "vector"
                                                     or flat_coef(leaf.index, rows, w.buffers[leaf.buffer].shape))):
            return None
    count = next(b for b in (4, 2, 1) if n % (16 * b) == 0)
    blocks = []
    for j in range(count):
        shift = {c: Ix.var(c, 1, 16 * j)}
        shifted = [map_indices(leaf, lambda ix, m=shift: ix.substitute(m)) for leaf in body] if j else body
        values = [w.vector_expr(leaf.value, c) for leaf in shifted]
        if None in values:
            return None
        blocks.append(_column_block(w, shifted, values, rows, f"_{j}" if count > 1 else "", written))
    return Plan(s, col, tuple(blocks))


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    """Each statement written for every block in turn."""
    rows, c, n = plan.loop.var, plan.columns.var, plan.columns.extent
    parts = plan.blocks
    lines = [f"{pad}for (int64_t {c} = 0; {c} < {n}; {c} += {16 * len(parts)}) {{"]
    lines += [f"{pad}  {line}" for part in parts for line in part[0]]
    lines.append(f"{pad}  for (int64_t {rows} = 0; {rows} < {plan.loop.extent}; ++{rows}) {{")
    # statement by statement, each for every block
    lines += [f"{pad}    {line}" for same in zip(*(part[1] for part in parts)) for line in same]
    lines.append(f"{pad}  }}")
    lines += [f"{pad}  {line}" for part in parts for line in part[2]]
    w.lines += lines + [f"{pad}}}"]


def _column_block(w: KernelWriter, body: list, values: list[str], rows: str, suffix: str, written) -> tuple:
    """One block of 16 columns: (the lines before the row loop: the sums' lanes and what does not
    move with the rows, loaded once; the row's statements; the lines after: the sums stored). Its
    registers' names end in `suffix`."""
    sums = [leaf for leaf in body if isinstance(leaf, Accumulate)]
    lanes = {id(leaf): f"st_c{k}{suffix}" for k, leaf in enumerate(sums)}
    before = [f"st_vf32 {lanes[id(x)]} = {w.lanes_at(x.buffer, x.index)};" for x in sums]
    # what does not move with the rows, loaded once (the buffers share the scratch block: gcc
    # cannot tell a row's stores leave the mean alone)
    fixed = {ld.buffer: ld.index for leaf in body for ld in loads(leaf.value)
             if ld.buffer not in written and not flat_coef(ld.index, rows, w.buffers[ld.buffer].shape)}
    for k, (buffer, index) in enumerate(fixed.items()):
        vector = w.lanes_at(buffer, index)
        before.append(f"st_vf32 st_f{k}{suffix} = {vector};")
        values = [v.replace(vector, f"st_f{k}{suffix}") for v in values]
    row = []
    for k, leaf in enumerate(body):
        if id(leaf) in lanes:
            row.append(f"{lanes[id(leaf)]} += {values[k]};")
            continue
        vector = w.lanes_at(leaf.buffer, leaf.index)
        row.append(f"st_vf32 st_w{k}{suffix} = {values[k]}; {vector} = st_w{k}{suffix};")
        values = values[:k + 1] + [v.replace(vector, f"st_w{k}{suffix}") for v in values[k + 1:]]  # (not loaded again)
    after = [f"{w.lanes_at(x.buffer, x.index)} = {lanes[id(x)]};" for x in sums]
    return tuple(before), tuple(row), tuple(after)
