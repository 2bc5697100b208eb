"""An integer product whose right operand is a byte weight laid out in pairs of k (lowering/pairs.py):
B's 16-bit pairs by one widening load, `vpmaddwd` by A's pairs (a STATEMENTS recognizer, ahead of
int_rows).

    for i { for k reduce { for j { C[.., i, j] += A(i, k) * cast(w_pairs[.., j // W, k // 2, j % W, k % 2]) } } }

(less a literal zero point, for a u8 weight). A vector of columns at a pair of k is 2 x lanes
consecutive bytes of the block: `vpmovsxbw` (i8) or `vpmovzxbw` (u8) widens them into the lanes'
pairs, B(2p, j) in the low half and B(2p + 1, j) in the high. A zero point z is taken off once, not
per byte: sum_k A(i, k) (B(k, j) - z) = sum_k A(i, k) B(k, j) - z sum_k A(i, k), an identity of i32
arithmetic as it wraps, so the same bits; each row's sum of A is made in the pass that narrows it, and
z times it is taken off a block's sums after its k loop (a `vpsubw` per vector and pair made the
QUInt8 products 10-15% slower than the QInt8 ones). A's rows are narrowed to 16 bits per tile, one
loop along k a row (checked at run time to fit), so that A(i, 2p) and A(i, 2p + 1) are one 32-bit word
to broadcast; then panel by panel, every block of rows, the sums in registers across k. Where int_rows makes B's pairs from the pack on every
call, per tile and chunk (two passes over B), here B's bytes are read where the layout put them.

The sums are added with an add bound to the sum's register (`vpaddd` written as an asm statement):
gcc 12 wrote each `c = add(c, madd(a, b))` of the block into a new register and copied it back, and
folded B's loads into every multiply; a C harness of the 128 x 768 x 128 tile ran 69-77 GMAC/s with
the add bound and B in registers, 35-37 as gcc wrote it (docs/perf/2026-11-29-quantized.md).

Exact: a 16-bit value by a 16-bit value, two such summed in 32 bits; integer sums wrap in any
order: the loops' result bit for bit. Where A does not fit, the loops as written.
tests/test_c_int_pairs.py holds it to its plain-loop twin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...engine.ir.extent import is_symbolic
from ...lowering.execute import TileRun
from ...lowering.loops import Accumulate, For, Ix, Lit, Load, Op, index_vars
from ...lowering.matmul import MatmulNest, match_matmul, shift_ix
from .emit import KernelWriter
from .int_dot import fits16
from .int_rows import _FORMS, ALL_ROWS_BYTES, _row_blocks
from .micro_kernel import KSpan, along_k, computed_left, precompute_a

STAND_IN = "st_laid_out_b"  # B's place while the nest is matched as a product of loads
_WIDEN = {("i8", 32): "_mm256_cvtepi8_epi16", ("u8", 32): "_mm256_cvtepu8_epi16",
          ("i8", 64): "_mm512_cvtepi8_epi16", ("u8", 64): "_mm512_cvtepu8_epi16"}


@dataclass(frozen=True)
class Plan:
    nest: MatmulNest  # B: the stand-in
    acc: Accumulate  # the nest's own statement
    bytes: Load  # the byte weight's read
    dtype: str  # i8 | u8
    zero: int  # what the product takes off each byte (0: none): z sum_k A(i, k) off each row's sums
    step: int  # bytes from one pair of k to the next, at any column
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    if w.vector_bytes not in _FORMS:
        return None
    found = _innermost(stmts[at])
    if found is None:
        return None
    j_var, acc = found
    v = acc.value
    if not (isinstance(acc, Accumulate) and isinstance(v, Op) and v.op == "mul" and len(v.args) == 2):
        return None
    for b in v.args:
        widened = _widened_byte(b, w)
        if widened is not None:
            break
    else:
        return None
    stand_in = Load(STAND_IN, (Ix.var(j_var),))
    value = Op(v.op, tuple(stand_in if arg is b else arg for arg in v.args), v.dtype)

    def dtype_of(name: str) -> str:
        return "i32" if name == STAND_IN else w.buffers[name].dtype

    nest = match_matmul(_with_leaf(stmts[at], Accumulate(acc.buffer, acc.index, acc.op, value)), dtype_of)
    if nest is None or w.buffers[acc.buffer].dtype != "i32":
        return None
    n_i, n_k, n_j = nest.i.extent, nest.k.extent, nest.j.extent
    lanes = w.vector_bytes // 4
    width = _FORMS[w.vector_bytes][4] * lanes
    if any(is_symbolic(x) for x in (n_i, n_k, n_j)) or n_k % 2 or n_j % width:
        return None
    load, dtype, zero = widened
    step = _pair_step(w, load, nest, lanes)
    if step is None:
        return None
    return Plan(nest, acc, load, dtype, zero, step)


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    """A's pairs (of every row, or where those would pass ALL_ROWS_BYTES block of rows by block),
    then panel by panel every block of rows; the loops as written where A does not fit in 16 bits or
    the compiler has no such instructions."""
    nest = plan.nest
    _prefix, _vector, guard, mr, _nv = _FORMS[w.vector_bytes]
    n_i = nest.i.extent
    pairs = nest.k.extent // 2
    p, q = pad + "  ", pad + "    "
    lines = [f"{pad}{{"]
    lines += [f"{pad}const int64_t {', '.join(f'{u} = 0' for u in nest.units)};"] if nest.units else []
    lines.append(f"#if {guard}")
    blocks = _row_blocks(n_i, mr)
    if n_i * pairs * 4 <= ALL_ROWS_BYTES:
        lines.append(f"{pad}int st_fits = 1;")
        lines.append(f"{pad}int16_t st_ah[{n_i}][{2 * pairs}] __attribute__((aligned(64)));  /* A's pairs */")
        lines += [f"{pad}int32_t st_as[{n_i}];  /* each row's sum of A */"] if plan.zero else []
        for head, rows in blocks:
            lines += [f"{pad}{head}"] + _a_halves(w, nest, p, rows, "st_i + ", plan.zero) + [f"{pad}}}"]
        lines.append(f"{pad}if (st_fits) {{")
        lines += _panels(w, plan, p, blocks, "st_i + ")
    else:  # block of rows by block: its A's pairs, every panel; the loops for a block whose A does not fit
        lines.append(f"{pad}if (1) {{")
        for head, rows in blocks:
            lines += [f"{p}{head}", f"{q}int st_fits = 1;  /* this block's A */",
                      f"{q}int16_t st_ah[{rows}][{2 * pairs}] __attribute__((aligned(64)));"]
            lines += [f"{q}int32_t st_as[{rows}];"] if plan.zero else []
            lines += _a_halves(w, nest, q, rows, "", plan.zero)
            lines.append(f"{q}if (st_fits) {{")
            lines += _panels(w, plan, q + "  ", [("{", rows)], "")
            lines.append(f"{q}}} else {{")
            lines += _loops(w, plan, q + "  ", "st_i", rows)
            lines += [f"{q}}}", f"{p}}}"]
    lines += [f"{pad}}} else", "#endif", f"{pad}{{"]
    lines += _loops(w, plan, p, "0", n_i)
    lines += [f"{pad}}}", f"{pad}}}"]
    w.lines += lines


def _panels(w: KernelWriter, plan: Plan, pad: str, blocks: list[tuple[str, int]], base: str) -> list[str]:
    """Panel by panel of B's columns: its vectors' bytes at the first pair of k, then each block of rows."""
    nest = plan.nest
    _prefix, _vector, _, _, nv = _FORMS[w.vector_bytes]
    k, j = nest.k.var, nest.j.var
    lanes = w.vector_bytes // 4
    width = nv * lanes
    ctype = "int8_t" if plan.dtype == "i8" else "uint8_t"
    p, q = pad + "  ", pad + "    "
    out = [f"{pad}for (int64_t st_j = 0; st_j < {nest.j.extent}; st_j += {width}) {{"]
    for v in range(nv):
        at = w.access(plan.bytes.buffer, plan.bytes.index)
        out.append(f"{p}const {ctype} *st_b{v}; {{ const int64_t {k} = 0, {j} = st_j + {v * lanes}; "
                   f"st_b{v} = (const {ctype} *)&{at}; }}")
    for head, rows in blocks:
        out += [f"{p}{head}"] + _tile(w, plan, q, rows, base) + [f"{p}}}"]
    return out + [f"{pad}}}"]


def _tile(w: KernelWriter, plan: Plan, pad: str, rows: int, base: str) -> list[str]:
    """Columns st_j .. st_j + nv vectors of rows st_i .. st_i + rows - 1 (st_ah's rows from `base` on),
    their sums in registers across k, B widened from its bytes at each pair."""
    nest = plan.nest
    prefix, vector, _, _, nv = _FORMS[w.vector_bytes]
    i, j = nest.i.var, nest.j.var
    lanes = w.vector_bytes // 4
    bits = w.vector_bytes * 8
    load, store = f"{prefix}_loadu_si{bits}", f"{prefix}_storeu_si{bits}"
    half = "_mm_loadu_si128((const __m128i *)" if w.vector_bytes == 32 else "_mm256_loadu_si256((const __m256i *)"
    widen = _WIDEN[plan.dtype, w.vector_bytes]

    def c_at(r: int, v: int) -> str:
        return f"({vector} *)&" + w.access(nest.acc.buffer, shift_ix(nest.acc.index, {i: r, j: v * lanes}))

    sums = {(r, v): f"c{r}_{v}" for r in range(rows) for v in range(nv)}
    out = [f"{pad}const int64_t {i} = st_i, {j} = st_j; (void){j};",
           f"{pad}{vector} " + ", ".join(f"{c} = {load}({c_at(r, v)})" for (r, v), c in sums.items()) + ";"]
    out.append(f"{pad}for (int64_t st_p = 0; st_p < {nest.k.extent // 2}; ++st_p) {{")
    for v in range(nv):
        b = f"{widen}({half}(st_b{v} + st_p * {plan.step})))"
        out.append(f"{pad}  const {vector} b{v} = {b};")
    for r in range(rows):
        # (the add bound to the sum's register: see the module's docstring)
        out.append(f"{pad}  {{ int32_t st_a; memcpy(&st_a, &st_ah[{base}{r}][2 * st_p], 4); "
                   f"const {vector} a = {prefix}_set1_epi32(st_a); " + " ".join(
            f"{{ const {vector} t = {prefix}_madd_epi16(a, b{v}); "
            f'__asm__("vpaddd %1, %0, %0" : "+v"({sums[r, v]}) : "v"(t)); }}' for v in range(nv)) + " }")
    out.append(f"{pad}}}")
    for r in range(rows) if plan.zero else ():  # (int: the C wraps, -fwrapv)
        out.append(f"{pad}{{ const {vector} st_z = {prefix}_set1_epi32({plan.zero} * st_as[{base}{r}]); "
                   + " ".join(f"{sums[r, v]} = {prefix}_sub_epi32({sums[r, v]}, st_z);" for v in range(nv)) + " }")
    out += [f"{pad}{store}({c_at(r, v)}, {c});" for (r, v), c in sums.items()]
    return out


def _a_halves(w: KernelWriter, nest: MatmulNest, pad: str, rows: int, base: str, zero: int) -> list[str]:
    """Rows st_i .. st_i + rows - 1 of A as 16-bit values into st_ah's rows from `base` on (A(i, 2p) and
    A(i, 2p + 1) side by side: the pair p as one 32-bit word), each checked to fit (st_fits). One
    narrowing loop along k a row: A computed in it where its loads run along k (what does not change
    along k once a row, ahead), else from the micro-kernel's rows of A (`precompute_a`). (int_rows'
    pairs, made from the rows of A by a pass of their own reading k two apart, took a quarter of a
    768 x 3072 product's kernel.) With a zero point, each row's sum of A too (st_as)."""
    i, k = nest.i.var, nest.k.var
    n_k = nest.k.extent
    out = [f"{pad}const int64_t {i} = st_i;"]
    if computed_left(nest.a) and not along_k(nest):
        out += precompute_a(nest, w, pad, rows, "i32", KSpan(n_k, n_k))
        decls, value = [], f"a_pre[st_r][{k}]"
    else:
        decls, value = w.hoisted(nest.a, k)
    out += [(f"{pad}for (int64_t st_r = 0; st_r < {rows}; ++st_r) {{ const int64_t st_row = {i} + st_r; "
            f"{{ const int64_t {i} = st_row; (void){i};")]
    out += [f"{pad}  {' '.join(decls)}"] if decls else []
    out += [f"{pad}  int32_t st_s = 0;"] if zero else []
    out += [f"{pad}  #pragma omp simd reduction(&:st_fits)" + (" reduction(+:st_s)" if zero else ""),
            f"{pad}  for (int64_t {k} = 0; {k} < {n_k}; ++{k}) {{",
            f"{pad}    const int32_t st_x = {value};",
            f"{pad}    st_fits &= {fits16('st_x')};"]
    out += [f"{pad}    st_s += st_x;"] if zero else []
    out += [f"{pad}    st_ah[{base}st_r][{k}] = (int16_t)st_x;",
            f"{pad}  }}"]
    out += [f"{pad}  st_as[{base}st_r] = st_s;"] if zero else []
    out += [f"{pad}}} }}"]
    return out


def _loops(w: KernelWriter, plan: Plan, pad: str, first: str, rows) -> list[str]:
    """Rows first .. first + rows - 1 as the loops sum them."""
    nest = plan.nest
    i, k, j = nest.i.var, nest.k.var, nest.j.var
    return [f"{pad}for (int64_t {i} = {first}; {i} < {first} + {rows}; ++{i}) {{",
            f"{pad}  for (int64_t {k} = 0; {k} < {nest.k.extent}; ++{k}) {{",
            f"{pad}    for (int64_t {j} = 0; {j} < {nest.j.extent}; ++{j}) {w.leaf(plan.acc)}",
            f"{pad}  }}", f"{pad}}}"]


def _innermost(s) -> tuple[str, Accumulate] | None:
    """(the innermost loop's variable, its statement) of a chain of loops around one statement."""
    var = None
    while isinstance(s, For) and len(s.body) == 1:
        var, s = s.var, s.body[0]
    return (var, s) if var is not None and isinstance(s, Accumulate) else None


def _with_leaf(s, leaf):
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, [_with_leaf(s.body[0], leaf)])
    return leaf


def _widened_byte(b, w: KernelWriter) -> tuple[Load, str, int] | None:
    """(the byte load, its dtype, the zero point taken off) where `b` is `cast(byte, i32)`, or that
    less (or plus) an integer literal; else None."""
    zero = 0
    if isinstance(b, Op) and b.op in ("sub", "add") and b.dtype == "i32" and len(b.args) == 2:
        x, z = b.args
        if not (isinstance(z, Lit) and z.dtype == "i32" and not isinstance(z.value, bool)
                and float(z.value).is_integer()):
            return None  # (an i32 literal may print as 134.0)
        zero, b = (int(z.value) if b.op == "sub" else -int(z.value)), x
    if not (isinstance(b, Op) and b.op == "cast" and b.dtype == "i32" and isinstance(b.args[0], Load)):
        return None
    load = b.args[0]
    dtype = w.buffers[load.buffer].dtype
    if dtype not in ("i8", "u8"):
        return None
    return load, dtype, zero


def _pair_step(w: KernelWriter, load: Load, nest: MatmulNest, lanes: int) -> int | None:
    """The bytes from one pair of k to the next where the load reads, for every pair and every vector
    of `lanes` columns from a multiple of lanes, 2 x lanes consecutive bytes: B(2p, j) and B(2p + 1, j)
    side by side, column after column; else None. Loops besides k and j are at 0 (they move the whole
    region)."""
    k, j = nest.k, nest.j
    flat = w.flat_index(load.buffer, load.index)
    others = {v: 0 for v in index_vars(flat) - {k.var, j.var}}
    ks, js = np.arange(k.extent)[:, None], np.arange(j.extent)[None, :]
    try:
        at = np.broadcast_to(np.asarray(TileRun({}, set()).index(flat, others | {k.var: ks, j.var: js}, {})),
                             (k.extent, j.extent))
    except (KeyError, TypeError):  # (an index this cannot evaluate: a gather's)
        return None
    pairs = at[0::2]
    step = at[2::2] - at[0:-2:2] if k.extent > 2 else np.zeros((0, j.extent), dtype=np.int64)
    side = np.all(at[1::2] == pairs + 1)
    along = np.all((pairs[:, 1:] - pairs[:, :-1])[:, (np.arange(1, j.extent) % lanes) != 0] == 2)
    if not (side and along) or (step.size and not np.all(step == step.flat[0])):
        return None
    return int(step.flat[0]) if step.size else 0


