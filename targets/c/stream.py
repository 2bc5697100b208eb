"""An innermost loop writing a row of a large output: the row is computed into a stack buffer (its
loop vectorizes as before) and streamed out with non-temporal stores, which write whole lines
without reading them first (a plain store reads each line it writes: a third more memory
traffic for a kernel that reads as much as it writes), nor keep them in the cache."""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.ir.program import dtype_bytes
from ...lowering.loops import For, Store
from . import tuning
from .emit import KernelWriter
from .prelude import C_TYPES
from .rows import row_start, row_store


@dataclass(frozen=True)
class Plan:
    loop: For
    leaf: Store
    taken: int = 1


def match_loop(w: KernelWriter, s) -> Plan | None:
    leaf = row_store(w, s)
    if leaf is None or leaf.buffer not in w.streamed:
        return None
    b = w.buffers[leaf.buffer]
    row_bytes = s.extent * dtype_bytes(b.dtype)
    if b.dtype not in ("f32", "f64") or not tuning.STREAM_ROW <= row_bytes <= tuning.STREAM_ROW_BYTES:
        return None
    return Plan(s, leaf)


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    return match_loop(w, stmts[at])


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...] = ()) -> None:
    s, leaf = plan.loop, plan.leaf
    b = w.buffers[leaf.buffer]
    start = row_start(w, leaf, s.var)
    w.lines.append(f"{pad}{{ {C_TYPES[b.dtype]} st_row[{s.extent}] __attribute__((aligned(64)));")
    w.lines.append(f"{pad}  for (int64_t {s.var} = 0; {s.var} < {s.extent}; ++{s.var}) "
                   f"st_row[{s.var}] = {w.expr(leaf.value)};")
    w.lines.append(f"{pad}  st_stream_{b.dtype}(&{start}, st_row, {s.extent}); }}")
