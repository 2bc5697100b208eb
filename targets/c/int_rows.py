"""A product of many rows in 32-bit integers on `vpmaddwd`: 16-bit pairs of k, two multiply-adds a
lane an instruction (a STATEMENTS recognizer, ahead of `matmul`).

    for i { for k reduce { for j { C[.., i, j] += A(i, k) * B[.., k, j] } } }     (i32; lowering/matmul.py)

MatMulInteger's product as onnxruntime's quantize_dynamic writes it: A a u8 activation less its zero
point, B a byte weight (less its zero point for u8 weights), both widened to i32 by casts; the tile's B
is a pack of the widened weight or a staged copy of it. The micro-kernel (micro_kernel.py) multiplies
such a product in i32, a `vpmulld` and an add per 8 lanes. Where every A(i, k) and B(k, j) of the
tile fits in 16 bits (checked at run time, as targets/c/int_dot.py checks its A: bytes less their zero
points do), this form makes B's pairs of k once per tile (each 32-bit lane B(2p, j) in its low half,
B(2p + 1, j) in its high half, int_dot's `pair16`), a panel of columns one run, and A's rows likewise;
then panel by panel (the panel in the nearest cache), every block of rows: `vpmaddwd` of a broadcast A
pair by a vector of B's pairs adds both k's products into 32-bit lanes, an add puts them into the
block's sums, held in registers across k. A 16-bit value by a 16-bit value, and the sum of two such,
fit in 32 bits: exact, where `vpmaddubsw` would saturate. Integer sums wrap as the loops' do in any
order: the result is the loops' bit for bit. Where a value does not fit, the micro-kernel runs.

The pairs cost a pass over the tile's A and B (read once, written at half their bytes) against the
product's rows x k x columns multiply-adds. tests/test_c_int_rows.py holds it to its plain-loop twin.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.ir.extent import is_symbolic
from ...lowering.loops import For
from ...lowering.matmul import MatmulNest, match_matmul, shift_ix
from .emit import KernelWriter
from .int_dot import fits16, pair16
from .micro_kernel import KSpan, at_row, precompute_a, render_matmul

# (intrinsics' prefix, vector type, the guard that they compile, register block: rows, vectors)
_FORMS = {32: ("_mm256", "__m256i", "defined(__AVX2__)", 4, 2),
          64: ("_mm512", "__m512i", "defined(__AVX512BW__)", 8, 2)}
PAIRS_BYTES = 512 * 1024  # B's pairs on the stack, at most
# rows of a tile at least: the pairs' pass over the tile's B is paid back over its rows (tiles of 8 and
# 32 rows, K of 64-128, made the int8 GPT-2 fixture's calls 4-11% slower; GPT-2 small's tiles of 128 rows
# gain: docs/perf/2026-11-29-quantized.md)
MIN_ROWS = 64
# A's pairs of every row at most (then each panel, in the nearest cache, is read by every block of rows,
# and A's pairs are made once a tile); past it, block of rows by block, every panel inside
ALL_ROWS_BYTES = 256 * 1024


@dataclass(frozen=True)
class Plan:
    nest: MatmulNest
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    if w.vector_bytes not in _FORMS:
        return None
    nest = match_matmul(stmts[at], lambda name: w.buffers[name].dtype, lambda name: w.buffers[name].shape)
    if nest is None or w.buffers[nest.acc.buffer].dtype != "i32":
        return None
    n_i, n_k, n_j = nest.i.extent, nest.k.extent, nest.j.extent
    if any(is_symbolic(x) for x in (n_i, n_k, n_j)) or n_i < MIN_ROWS or n_k < 2:
        return None
    vectors = _FORMS[w.vector_bytes][4]
    if n_j < vectors * w.vector_bytes // 4 or (n_k + 1) // 2 * 4 * n_j > PAIRS_BYTES:
        return None
    return Plan(nest)


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    """B's pairs, a panel one run, checked to fit in 16 bits; then A's pairs of every row and each panel
    with every block of rows (`_panels_outside`), or where A's pairs of every row would pass
    ALL_ROWS_BYTES block of rows by block (`_rows_outside`); the micro-kernel where B does not fit or
    the compiler has no such instructions."""
    nest = plan.nest
    prefix, vector, guard, mr, nv = _FORMS[w.vector_bytes]
    k, j = nest.k.var, nest.j.var
    n_i, n_k, n_j = nest.i.extent, nest.k.extent, nest.j.extent
    lanes = w.vector_bytes // 4
    width = nv * lanes
    panels = n_j // width  # (the columns past the last whole panel: the loops, from the rows' A)
    pairs = (n_k + 1) // 2
    p, q = pad + "  ", pad + "    "
    lines = [f"{pad}{{"]
    lines += [f"{pad}const int64_t {', '.join(f'{u} = 0' for u in nest.units)};"] if nest.units else []
    lines.append(f"#if {guard}")
    # B(2p, j) in a lane's low half, B(2p + 1, j) in its high half (0 past an odd K's end), each panel of
    # `width` columns one run over p: what a panel's blocks of rows read from the nearest cache
    lines += [f"{pad}int32_t st_bp[{panels * pairs * width}] __attribute__((aligned(64)));",
              f"{pad}int st_fits = 1;",
              f"{pad}for (int64_t st_p = 0; st_p < {pairs}; ++st_p) {{",
              f"{p}const int32_t *st_b0, *st_b1;",
              f"{p}{{ const int64_t {k} = 2 * st_p, {j} = 0; st_b0 = &{w.expr(nest.b)}; }}",
              (f"{p}{{ const int64_t {k} = 2 * st_p + 1 < {n_k} ? 2 * st_p + 1 : 2 * st_p, {j} = 0; "
               f"st_b1 = &{w.expr(nest.b)}; }}"),
              f"{p}const int32_t st_odd = 2 * st_p + 1 < {n_k};",
              f"{p}for (int64_t st_j = 0; st_j < {panels * width}; st_j += {width}) {{",
              f"{q}int32_t *st_to = st_bp + (st_j / {width} * {pairs} + st_p) * {width};",
              f"{q}#pragma omp simd reduction(&:st_fits)",
              f"{q}for (int64_t st_c = 0; st_c < {width}; ++st_c) {{",
              f"{q}  const int32_t st_x = st_b0[st_j + st_c], st_y = st_b1[st_j + st_c] * st_odd;",
              f"{q}  st_fits &= ({fits16('st_x')}) & ({fits16('st_y')});",
              f"{q}  st_to[st_c] = {pair16('st_x', 'st_y')};",
              f"{q}}}",
              f"{p}}}",
              f"{pad}}}"]
    if n_i * pairs * 4 <= ALL_ROWS_BYTES:
        lines += _panels_outside(w, nest, pad, mr, nv, prefix, vector)
    else:
        lines += _rows_outside(w, nest, pad, mr, nv, prefix, vector)
    lines += [f"{pad}}} else", "#endif", f"{pad}{{"]
    lines += render_matmul(nest, w, p, "i32", w.vector_bytes)
    lines += [f"{pad}}}", f"{pad}}}"]
    w.lines += lines


def _row_blocks(n_i: int, mr: int) -> list[tuple[str, int]]:
    """(the C opening a block of rows, its rows): the full blocks of mr rows in a loop, then the rows left."""
    full = n_i - n_i % mr
    return ([(f"for (int64_t st_i = 0; st_i < {full}; st_i += {mr}) {{", mr)] if full else []) + (
        [(f"{{ const int64_t st_i = {full};", n_i % mr)] if n_i % mr else [])


def _panels_outside(w: KernelWriter, nest: MatmulNest, pad: str, mr: int, nv: int, prefix: str,
                    vector: str) -> list[str]:
    """A's pairs of every row (st_ap), then panel by panel, every block of rows; the columns left over."""
    n_i = nest.i.extent
    pairs = (nest.k.extent + 1) // 2
    width = nv * w.vector_bytes // 4
    p, q = pad + "  ", pad + "    "
    blocks = _row_blocks(n_i, mr)
    lines = [f"{pad}int32_t st_ap[{n_i}][{pairs}] __attribute__((aligned(64)));  /* A's pairs, as B's */"]
    for head, rows in blocks:
        lines += [f"{pad}{head}"] + _a_pairs(w, nest, p, rows, "st_i + ") + [f"{pad}}}"]
    lines += [f"{pad}if (st_fits) {{",
              f"{p}for (int64_t st_j = 0; st_j < {nest.j.extent // width * width}; st_j += {width}) {{",
              f"{q}const int32_t *st_panel = st_bp + st_j / {width} * {pairs * width};"]
    for head, rows in blocks:
        lines += [f"{q}{head}"] + _tile(w, nest, q + "  ", rows, nv, prefix, vector, "st_i + ") + [f"{q}}}"]
    lines.append(f"{p}}}")
    lines += [f"{p}for (int64_t st_i = 0; st_i < {n_i}; ++st_i) {{"] + _left_columns(w, nest, q, width, "st_i") + [
        f"{p}}}"] if nest.j.extent % width else []
    return lines


def _rows_outside(w: KernelWriter, nest: MatmulNest, pad: str, mr: int, nv: int, prefix: str,
                  vector: str) -> list[str]:
    """Block of rows by block: its A's pairs, then every panel, the columns left over; the loops as
    written for a block whose A does not fit."""
    n_i, n_k = nest.i.extent, nest.k.extent
    pairs = (n_k + 1) // 2
    width = nv * w.vector_bytes // 4
    p, q = pad + "  ", pad + "    "
    blocks = _row_blocks(n_i, mr)
    lines = [f"{pad}if (st_fits) {{"]
    for head, rows in blocks:
        lines += [f"{p}{head}", f"{q}int st_fits = 1;  /* this block's A */",
                  f"{q}int32_t st_ap[{rows}][{pairs}] __attribute__((aligned(64)));"]
        lines += _a_pairs(w, nest, q, rows, "")
        lines += [f"{q}if (st_fits) {{",
                  f"{q}  for (int64_t st_j = 0; st_j < {nest.j.extent // width * width}; st_j += {width}) {{",
                  f"{q}    const int32_t *st_panel = st_bp + st_j / {width} * {pairs * width};"]
        lines += _tile(w, nest, q + "    ", rows, nv, prefix, vector, "")
        lines.append(f"{q}  }}")
        for r in range(rows) if nest.j.extent % width else ():
            lines += [f"{q}  {{ const int64_t st_r = {r};"] + _left_columns(w, nest, q + "    ", width, "st_r") + [
                f"{q}  }}"]
        lines.append(f"{q}}} else {{")
        lines += _block_loops(w, nest, q + "  ", rows)
        lines += [f"{q}}}", f"{p}}}"]
    return lines


def _left_columns(w: KernelWriter, nest: MatmulNest, pad: str, width: int, row: str) -> list[str]:
    """The columns past the last whole panel of row st_i + st_r (or st_i), from A's pairs' halves, as
    the loops sum them."""
    i, k, j = nest.i.var, nest.k.var, nest.j.var
    at = w.access(nest.acc.buffer, nest.acc.index)
    return [f"{pad}const int64_t {i} = st_i{' + st_r' if row == 'st_r' else ''};",
            f"{pad}for (int64_t {k} = 0; {k} < {nest.k.extent}; ++{k}) {{",
            f"{pad}  const int32_t st_a = (int32_t)(int16_t)(st_ap[{row}][{k} / 2] >> ({k} % 2 * 16));",
            (f"{pad}  for (int64_t {j} = {nest.j.extent // width * width}; {j} < {nest.j.extent}; ++{j}) "
             f"{at} += st_a * {w.expr(nest.b)};"),
            f"{pad}}}"]


def _block_loops(w: KernelWriter, nest: MatmulNest, pad: str, rows: int) -> list[str]:
    """Rows st_i .. st_i + rows - 1 as the loops sum them, A from a_pre."""
    i, k, j = nest.i.var, nest.k.var, nest.j.var
    out = [f"{pad}const int64_t {i} = st_i;",
           f"{pad}for (int64_t {k} = 0; {k} < {nest.k.extent}; ++{k}) {{",
           f"{pad}  for (int64_t {j} = 0; {j} < {nest.j.extent}; ++{j}) {{"]
    for r in range(rows):
        at = w.access(nest.acc.buffer, shift_ix(nest.acc.index, {i: r}))
        out.append(f"{pad}    {at} += a_pre[{r}][{k}] * {w.expr(nest.b)};")
    return out + [f"{pad}  }}", f"{pad}}}"]


def _a_pairs(w: KernelWriter, nest: MatmulNest, pad: str, rows: int, base: str) -> list[str]:
    """Rows st_i .. st_i + rows - 1 of A (the micro-kernel's a_pre where A is computed) in pairs of k
    into st_ap's rows from `base` on, each checked to fit in 16 bits."""
    i, k = nest.i.var, nest.k.var
    n_k = nest.k.extent
    pairs = (n_k + 1) // 2
    p = pad + "  "
    out = [f"{pad}const int64_t {i} = st_i;"]
    computed = precompute_a(nest, w, pad, rows, "i32", KSpan(n_k, n_k))
    if computed:
        out += computed
    else:  # A read where it is
        out.append(f"{pad}int32_t a_pre[{rows}][{n_k}] __attribute__((aligned(64)));")
        out.append(f"{pad}for (int64_t {k} = 0; {k} < {n_k}; ++{k}) {{")
        out += [f"{p}{at_row(i, r, f'a_pre[{r}][{k}] = {w.expr(nest.a)};')}" for r in range(rows)]
        out.append(f"{pad}}}")
    out += [f"{pad}for (int64_t st_r = 0; st_r < {rows}; ++st_r) {{",
            f"{p}#pragma omp simd reduction(&:st_fits)",
            f"{p}for (int64_t st_p = 0; st_p < {n_k // 2}; ++st_p) {{",
            f"{p}  const int32_t st_x = a_pre[st_r][2 * st_p], st_y = a_pre[st_r][2 * st_p + 1];",
            f"{p}  st_fits &= ({fits16('st_x')}) & ({fits16('st_y')});",
            f"{p}  st_ap[{base}st_r][st_p] = {pair16('st_x', 'st_y')};",
            f"{p}}}"]
    if n_k % 2:
        out += [f"{p}{{ const int32_t st_x = a_pre[st_r][{n_k - 1}];",
                f"{p}  st_fits &= ({fits16('st_x')}); st_ap[{base}st_r][{pairs - 1}] = {pair16('st_x', '0')}; }}"]
    return out + [f"{pad}}}"]


def _tile(w: KernelWriter, nest: MatmulNest, pad: str, rows: int, nv: int, prefix: str, vector: str,
          base: str) -> list[str]:
    """Columns st_j .. st_j + nv vectors (one panel) of rows st_i .. st_i + rows - 1 (st_ap's rows from
    `base` on), their sums in registers across k."""
    i, j = nest.i.var, nest.j.var
    pairs = (nest.k.extent + 1) // 2
    lanes = w.vector_bytes // 4
    load, store = f"{prefix}_loadu_si{w.vector_bytes * 8}", f"{prefix}_storeu_si{w.vector_bytes * 8}"

    def c_at(r: int, v: int) -> str:
        return f"({vector} *)&" + w.access(nest.acc.buffer, shift_ix(nest.acc.index, {i: r, j: v * lanes}))

    sums = {(r, v): f"c{r}_{v}" for r in range(rows) for v in range(nv)}
    out = [f"{pad}const int64_t {i} = st_i, {j} = st_j;",
           f"{pad}{vector} " + ", ".join(f"{c} = {load}({c_at(r, v)})" for (r, v), c in sums.items()) + ";",
           f"{pad}for (int64_t st_p = 0; st_p < {pairs}; ++st_p) {{"]
    out += [f"{pad}  const {vector} b{v} = {load}(({vector} *)&st_panel[st_p * {nv * lanes} + {v * lanes}]);"
            for v in range(nv)]
    for r in range(rows):
        out.append(f"{pad}  {{ const {vector} a = {prefix}_set1_epi32(st_ap[{base}{r}][st_p]); "
                   + " ".join(f"{sums[r, v]} = {prefix}_add_epi32({sums[r, v]}, {prefix}_madd_epi16(a, b{v}));"
                              for v in range(nv)) + " }")
    out.append(f"{pad}}}")
    out += [f"{pad}{store}({c_at(r, v)}, {c});" for (r, v), c in sums.items()]
    return out
