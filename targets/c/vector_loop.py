"""An innermost f32 loop writing a row from contiguous and loop-invariant reads with + - * / and
exp, sigmoid or tanh, written in the machine's vectors where it has AVX-512 (16 lanes) or AVX2 with
FMA (8) (st_expv_f32, vector_math.h), when the row computes an exponential or is a streamed output's.

A streamed output's row is stored with non-temporal stores straight from the registers: its whole
lines one vector each; its partial first and last lines from the vector at the row's start
and at its end, by plain stores of 8, 4, 2 and 1 lanes (st_store_lanes), so every element comes
from the same vector code wherever the output array starts; rows of 2 * STREAM_GROUP vectors and
more in groups of STREAM_GROUP, each group's values computed before the previous group's stores
(4 KiB aliasing). Non-temporal stores from a row held on the stack first (`stream`) stall while
it drains; from the registers they overlap the arithmetic. A masked store beside non-temporal
stores is far slower, hence the partial lines' plain stores. Other rows of exponentials are
stored plainly (so is such a piece of a row split.py cuts at a concat's pieces: a padded SiLU's
middle), their last iterations by the scalar loop (st_expf and st_tanhf give
st_expv_f32's and st_tanhv_f32's results). Everything else is left to gcc's vectorizer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...lowering.liveness import buffers_read
from ...lowering.loops import For, Load, Op, Store, leaves
from ...lowering.matmul import flat_coef, shift_ix
from . import stream, tuning
from .emit import KernelWriter, number_ops
from .ops import exponentials
from .rows import around, next_tile_prefetch, row_reads, row_start, row_store

# the vector widths vector_math.h has exponentials for: their C type and intrinsics' prefix
VECTORS = {64: ("__m512", "_mm512"), 32: ("__m256", "_mm256")}


@dataclass(frozen=True)
class Plan:
    loop: For
    leaf: Store
    value: str  # the row's value on the machine's lanes
    streamed: bool
    taken: int = 1
    # a row of exponentials whose value shares one op (SiLU's x * sigmoid(x)): that op's C, and the
    # rest of the value's C reading it as t0_ (`shared_first`); empty where it has none
    first: str = ""
    rest: str = ""
    # where the rest computes one sigmoid: its operand's C (reading t0_) and the rest reading the
    # sigmoid as st_g_ (`grouped_sigmoid`), so a group's sigmoids run as one st_sigmoidv4_f32
    sigmoid_arg: str = ""
    sigmoid_rest: str = ""


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    s = stmts[at]
    leaf = row_store(w, s) if w.vector_bytes in VECTORS else None
    if leaf is None or s.kind != "serial" or w.buffers[leaf.buffer].dtype != "f32":
        return None
    streamed = leaf.buffer in w.streamed and s.extent >= w.vector_bytes // 4
    if not (streamed or exponentials(leaf.value)):
        return None
    return _plan(w, s, leaf, streamed)


def piece(w: KernelWriter, loop: For, leaf) -> Plan | None:
    """The plan of one piece of a row split.py cuts at a concat's pieces (a padded SiLU row: the pads'
    copies, then the row of exponentials), where `leaf` (that piece's statement) is such a row and this
    recognizer is in the writer's table; its stores plain (a piece is part of a row); else None."""
    if not any(r.name == "vector_loop" for r in w.recognizers) or w.vector_bytes not in VECTORS:
        return None
    s = For(loop.var, loop.extent, "serial", [leaf])
    if row_store(w, s) is None or w.buffers[leaf.buffer].dtype != "f32" or not exponentials(leaf.value):
        return None
    return _plan(w, s, leaf, False)


def _plan(w: KernelWriter, s: For, leaf: Store, streamed: bool) -> Plan | None:
    value = w.vector_expr(leaf.value, s.var)
    if value is None:
        return None
    first, rest = ("", "") if streamed else shared_first(w, leaf.value, s.var, value)
    arg, sigmoid_rest = grouped_sigmoid(w, leaf.value, s.var, first) if first else ("", "")
    return Plan(s, leaf, value, streamed, first=first, rest=rest, sigmoid_arg=arg, sigmoid_rest=sigmoid_rest)


def shared_first(w: KernelWriter, e, var: str, value: str) -> tuple[str, str]:
    """(the C of the first op `e` reads twice, the rest of `value` reading it as t0_), or ("", "").
    vector_expr computes such an op first, into t0_: `value` is `({ st_vf32 t0_ = FIRST; REST })`."""
    if not isinstance(e, Op):
        return "", ""
    _, order, uses = number_ops(e)
    shared = next((op for n, op in order if uses.get(n, 0) > 1), None)
    first = w.vector_expr(shared, var) if shared is not None else None
    head = f"({{ st_vf32 t0_ = {first}; "
    if first is None or not value.startswith(head):
        return "", ""
    return first, "({ " + value[len(head):]


def grouped_sigmoid(w: KernelWriter, e, var: str, first: str) -> tuple[str, str]:
    """(the C of the operand of the one sigmoid in `e` after its shared op, reading that op as t0_
    and nothing else computed, the rest of `e`'s C reading that sigmoid as st_g_), or ("", "")."""
    operands = []

    def capture(args: list[str]) -> str:
        operands.append(args[0])
        return "st_g_"
    value = w.vector_expr(e, var, forms={"sigmoid": capture})
    head = f"({{ st_vf32 t0_ = {first}; "
    if value is None or len(operands) != 1 or not value.startswith(head) or "st_g_" in first:
        return "", ""
    rest = value[len(head):]
    if re.search(r"\bt[1-9][0-9]*_", operands[0]) or rest.count("st_g_") != 1:
        return "", ""  # (the operand reads another computed op, or the rest holds the sigmoid twice)
    return operands[0], "({ " + rest


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    s, leaf, value = plan.loop, plan.leaf, plan.value
    v, n = s.var, s.extent
    lanes, (vector, prefix) = w.vector_bytes // 4, VECTORS[w.vector_bytes]
    add = w.lines.append
    if not plan.streamed:
        plain_row(w, plan, "0", str(n), pad)
        return
    w.before_loop(s, loops, pad, skip=leaf.buffer)  # (prefetching lines to be streamed would read them)
    start = row_start(w, leaf, v)
    add(f"{pad}#if defined(ST_VECTOR_EXP)")
    # the row's value at `v`, for its partial first line, its whole lines and its partial last one
    add(f"{pad}#define ST_ROW({v}) (({vector})({value}))")
    add(f"{pad}{{ float *st_o = &{start}; int64_t st_h = (int64_t)((-(uintptr_t)st_o & {w.vector_bytes - 1}) >> 2), {v} = st_h;")
    add(f"{pad}  if (st_h) st_store_lanes(st_o, ST_ROW(0), 0, st_h);")
    reads = long_row_reads(w, leaf, v, n, loops)
    ahead_by = tuning.STREAM_PREFETCH

    def ahead(at: int) -> str:  # prefetches for the vector `at` elements past `v`
        return "".join(f"__builtin_prefetch(&{w.access(ld.buffer, shift_ix(ld.index, {v: ahead_by + at}))}, 0, 0); "
                       for ld in reads)
    group_size = tuning.STREAM_GROUP
    g = lanes * group_size
    if group_size > 1 and n >= 2 * g:
        # groups of STREAM_GROUP vectors, the next group's computed before this one's stores
        def group(name: str, at: int) -> str:
            return ", ".join(f"{name}{k} = ST_ROW({v} + {at + lanes * k})" for k in range(group_size))
        stores = " ".join(f"{prefix}_stream_ps(st_o + {v} + {lanes * k}, st_a{k});" for k in range(group_size))
        shift = " ".join(f"st_a{k} = st_b{k};" for k in range(group_size))
        add(f"{pad}  if ({v} + {2 * g} <= {n}) {{ {vector} {group('st_a', 0)};")
        add(f"{pad}    for (; {v} + {2 * g} <= {n}; {v} += {g}) {{ "
            + "".join(ahead(lanes * k) for k in range(group_size))
            + f"{vector} {group('st_b', g)}; {stores} {shift} }}")
        add(f"{pad}    {stores} {v} += {g}; }}")
    store = f"{prefix}_stream_ps(st_o + {v}, ST_ROW({v}));"
    add(f"{pad}  for (; {v} + {lanes} <= {n}; {v} += {lanes}) " + (f"{{ {ahead(0)}{store} }}" if reads else store))
    add(f"{pad}  if ({v} < {n}) st_store_lanes(st_o + {n - lanes}, ST_ROW({n - lanes}), {v} - {n - lanes}, {lanes}); }}")
    add(f"{pad}#undef ST_ROW")
    add(f"{pad}#else")
    row = stream.match_loop(w, s)
    if row is not None:
        stream.emit(w, row, pad)
    else:
        add(f"{pad}for (int64_t {v} = 0; {v} < {n}; ++{v}) {w.leaf(leaf)}")
    add(f"{pad}#endif")


def plain_row(w: KernelWriter, plan: Plan, start: str, end: str, pad: str) -> None:
    """The row from `start` to `end` (C expressions) stored plainly: in groups where its value shares
    an op (`add_groups`), then a vector at a time, its last elements by the scalar loop."""
    s, leaf = plan.loop, plan.leaf
    v, lanes = s.var, w.vector_bytes // 4
    w.lines.append(f"{pad}{{ int64_t {v} = {start};")
    w.lines.append(f"{pad}#if defined(ST_VECTOR_EXP)")
    group = tuning.SHARED_GROUP
    if plan.first and group > 1 and s.extent >= group * lanes:
        add_groups(w, plan, pad, group, end)
    w.lines.append(f"{pad}  for (; {v} + {lanes} <= {end}; {v} += {lanes}) "
                   f"*(st_vf32 *)&{w.access(leaf.buffer, leaf.index)} = {plan.value};")
    w.lines.append(f"{pad}#endif")
    w.lines.append(f"{pad}  for (; {v} < {end}; ++{v}) {w.leaf(leaf)} }}")


def add_groups(w: KernelWriter, plan: Plan, pad: str, group: int, end: str) -> None:
    """The row in groups of `group` vectors: the shared op of each (a group norm's normalized value)
    first, then the rest of each (its SiLU). The same operations on the same values as one vector
    at a time, so the same bits; written as stages, the exponentials' long chains of one group
    overlap where the out-of-order window could not reach the next vector's
    (docs/perf/2026-11-29-group-norm.md)."""
    s, leaf = plan.loop, plan.leaf
    v, lanes = s.var, w.vector_bytes // 4
    span = group * lanes
    out = w.access(leaf.buffer, leaf.index)
    at = [f"({v} + {lanes * k})" for k in range(group)]
    firsts = ", ".join(f"st_s{k} = ST_FIRST({a})" for k, a in enumerate(at))
    macros = [f"#define ST_FIRST({v}) ({plan.first})", f"#define ST_OUT({v}) {out}"]
    if plan.sigmoid_arg and group == 4:
        # the group's sigmoids as one st_sigmoidv4_f32, each of its steps on all four (vector_math.h)
        operands = ", ".join(f"ST_ARG({a}, st_s{k})" for k, a in enumerate(at))
        rests = " ".join(f"*(st_vf32 *)&ST_OUT({a}) = ST_REST({a}, st_s{k}, st_g[{k}]);" for k, a in enumerate(at))
        body = f"st_vf32 {firsts}; st_vf32 st_g[4] = {{{operands}}}; st_sigmoidv4_f32(st_g); {rests}"
        macros += [f"#define ST_ARG({v}, t0_) ({plan.sigmoid_arg})",
                   f"#define ST_REST({v}, t0_, st_g_) {plan.sigmoid_rest}"]
    else:
        rests = " ".join(f"*(st_vf32 *)&ST_OUT({a}) = ST_REST({a}, st_s{k});" for k, a in enumerate(at))
        body = f"st_vf32 {firsts}; {rests}"
        macros.append(f"#define ST_REST({v}, t0_) {plan.rest}")
    # (the next tile's lines of the reads along the row, while its arithmetic leaves the memory idle)
    declared, fetches = next_tile_prefetch(w, (leaf.value,), v, span)
    w.lines += [f"{pad}  {d}" for d in declared] + [f"{pad}{m}" for m in macros]
    w.lines.append(f"{pad}  for (; {v} + {span} <= {end}; {v} += {span}) {{ {fetches}{body} }}")
    w.lines += [f"{pad}#undef {m.split()[1].split('(')[0]}" for m in macros]


def long_row_reads(w: KernelWriter, leaf: Store, var: str, n: int, loops: tuple[For, ...]) -> list[Load]:
    """The global f32 reads of a streamed row that run along it (contiguous in `var`) for at least
    twice STREAM_PREFETCH elements and move with the loops around it (a bias read by every row
    stays in the cache), where no other statement of the loop around the row reads them (a sum
    there has just brought its row in): the row prefetches them STREAM_PREFETCH ahead."""
    if n < 2 * tuning.STREAM_PREFETCH:
        return []
    outer = around(loops)
    others = set()
    for x in outer.body if outer else []:
        inside = list(leaves([x]))
        if not any(y is leaf for y in inside):
            others |= {b for y in inside for b in buffers_read(y)}
    found = {}
    for ld in row_reads(w, (leaf.value,), var):
        shape = w.buffers[ld.buffer].shape
        if ld.buffer not in others and any(u.extent > 1 and flat_coef(ld.index, u.var, shape) for u in loops):
            found.setdefault((ld.buffer, ld.index), ld)
    return list(found.values())
