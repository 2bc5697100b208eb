"""A transpose copy, its inner loop walked in blocks (a STATEMENTS recognizer).

`for a { for b { out[..] = f(x[..]) } }` storing along b what it reads along a (a key cache
transposed for the product that reads it, `t[d, p] = k[p, d] * s`) reads one element per line
of x at every step of b: over a long b (2,048 positions of 256 bytes) a line is gone from the
first-level cache before the next a reads its neighbour, and each line comes from farther away
16 times. Here b runs in blocks of BLOCK: for each block, every a, then the block's b, so the
BLOCK lines of x one block reads stay in the first-level cache across all of a, and each a
writes BLOCK consecutive elements (a whole line) of out. Each iteration writes its own element
and reads no element another writes, so the order is free. A value with a transcendental op is
read_order's (it swaps the loops, so that the op runs in vectors).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.ir.extent import is_symbolic
from ...lowering.loops import For, Store
from .emit import KernelWriter
from .ops import TRANSCENDENTAL, computes
from .read_order import transposed_store

BLOCK = 16  # steps of b per block: one 64-byte line of f32 out per a


@dataclass(frozen=True)
class Plan:
    outer: For
    inner: For
    leaf: Store
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    nest = transposed_store(stmts[at])
    if nest is None or computes(nest[2].value, TRANSCENDENTAL):
        return None
    outer, inner, leaf = nest
    return Plan(outer, inner, leaf) if is_symbolic(inner.extent) or inner.extent > BLOCK else None


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    """Whole blocks with a constant trip count (gcc vectorizes the block's BLOCK reads and its
    line of stores), then the block left over."""
    a, b = plan.outer, plan.inner
    leaf = w.leaf(plan.leaf)
    w.lines += [
        f"{pad}{{ int64_t st_b0 = 0;",
        f"{pad}  for (; st_b0 + {BLOCK} <= {b.extent}; st_b0 += {BLOCK}) {{",
        f"{pad}    for (int64_t {a.var} = 0; {a.var} < {a.extent}; ++{a.var}) {{",
        f"{pad}      for (int64_t st_bi = 0; st_bi < {BLOCK}; ++st_bi) {{",
        f"{pad}        const int64_t {b.var} = st_b0 + st_bi; {leaf} }}",
        f"{pad}    }}",
        f"{pad}  }}",
        f"{pad}  for (int64_t {a.var} = 0; {a.var} < {a.extent}; ++{a.var}) {{",
        f"{pad}    for (int64_t {b.var} = st_b0; {b.var} < {b.extent}; ++{b.var}) {{ {leaf} }}",
        f"{pad}  }}",
        f"{pad}}}",
    ]
