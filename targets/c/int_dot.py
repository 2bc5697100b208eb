"""A product of one row in 32-bit integers whose right operand is a weight of bytes read along the
columns: each pair of k one AVX-512 VNNI instruction per 16 columns, or on AVX2 a vpmaddwd and an add
per 8 columns (a STATEMENTS recognizer).

    for k reduce { for j { C[.., j] += A(k) * cast(B(k, j), i32) } }

B is an i8 or u8 weight contiguous along j (MatMulInteger's [K, N], what onnxruntime's
quantize_dynamic writes), A an i32 value of k alone (the activation quantized per call, less its zero
point), C an i32 accumulator contiguous along j. Written plainly, every element is a widening, a
32-bit multiply and an add, with C loaded and stored for each k. Here, where every A(k) fits in 16
bits (checked first, over the K values: a u8 activation less its zero point does), two rows of B are
widened to 16 bits and interleaved, and `vpdpwssd` adds both rows' products into 16 columns' sums
at once; C is touched once per group of columns. Rows are taken ROWS at a time; where they lie one
after the other (a bound weight, laid out tile by tile by lowering/bind.py), the next block's bytes
are prefetched while a block is summed: the groups read each row a part at a time, an order the
hardware's prefetchers do not follow (8 products of [768, 2304], 14 MB: 1.34 ms without, 0.29 with,
1 thread). With AVX2 and 32-byte vectors (`group_avx2`), the same walk in 256-bit vectors: 16 columns
of two rows widened to 16 bits and interleaved, `vpmaddwd` adds both rows' products (each a byte by a
16-bit A: no saturation, unlike vpmaddubsw's 16-bit pairs) into 8 columns' 32-bit pairs, an add puts
them into the sums. Integer sums wrap as the loops' do, in any order: the result is the loops' bit
for bit. Where A does not fit, or the machine has neither, the loops run as written.

Where it applies is the plan's choice (engine/schedule/kernel.py, `one_row`: the operand of a
product of one row is not packed); tests/test_c_int_dot.py holds it to its plain-loop twin.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...lowering.loops import Accumulate, For, Load, Op
from ...lowering.matmul import affine, contiguous_in, expr_dtype
from .dot import column_steps, one_row_product
from .emit import KernelWriter

HALF = 32  # columns of one 16-bit widening of 32 bytes: two sums of 16 columns
GROUP = 4  # halves side by side: 128 columns, 8 accumulators, two cache lines of each row
HALF_AVX2 = 16  # AVX2: one widening of 16 bytes, two sums of 8 columns
GROUP_AVX2 = 4  # 64 columns, 8 accumulators of AVX2's 16 registers, one cache line of each row
ROWS = 16  # rows of B per block (even)
# unpacklo/hi_epi16 interleave within 128-bit lanes: the low sum's dword i is column 8*(i//4) + i%4 of
# the 32, the high sum's 8*(i//4) + 4 + i%4; these put columns 0..15 and 16..31 back in order
_ORDER = [[(16 if (c % 8) >= 4 else 0) + 4 * (c // 8) + c % 4 for c in range(lo, lo + 16)] for lo in (0, 16)]
# AVX2's 256-bit unpacks: the low sum holds columns 0-3 | 8-11, the high 4-7 | 12-15; vperm2i128 with
# these selectors takes columns 0-7 and 8-15
_LANES_AVX2 = ("0x20", "0x31")


@dataclass(frozen=True)
class Plan:
    k: For
    j: For
    acc: Accumulate
    a: object  # A(k): i32, no j
    b: Op  # cast(the bytes, i32)
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    shape = one_row_product(w, stmts[at], "i32", vector_bytes=32)
    if shape is None:
        return None
    k, j, acc, pairs = shape
    if not (isinstance(k.extent, int) and isinstance(j.extent, int) and j.extent >= _half(w)
            and all(affine(ix) for ix in acc.index)):
        return None
    for a, b in pairs:
        if not (isinstance(b, Op) and b.op == "cast" and b.dtype == "i32"):
            continue
        src = b.args[0]
        if (isinstance(src, Load) and w.buffers[src.buffer].dtype in ("i8", "u8") and contiguous_in(src.index, j.var)
                and all(affine(ix) for ix in src.index) and expr_dtype(a, lambda n: w.buffers[n].dtype) == "i32"):
            return Plan(k, j, acc, a, b)
    return None


def fits16(x: str) -> str:
    """C: whether i32 `x` fits in 16 bits (1 or 0)."""
    return f"({x} >= -32768) & ({x} <= 32767)"


def pair16(lo: str, hi: str) -> str:
    """C: the i32 whose low 16 bits are `lo`'s and high 16 bits `hi`'s, the pair of k vpmaddwd and
    vpdpwssd multiply by (int_rows.py makes its pairs with it too)."""
    return f"(int32_t)((uint32_t)(uint16_t){lo} | ((uint32_t)(uint16_t){hi} << 16))"


def _half(w: KernelWriter) -> int:
    return HALF if w.vector_bytes >= 64 else HALF_AVX2


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    """The range check of A, then groups of halves of columns, one half at a time, and the columns
    left over as written; the loops as written where A does not fit in 16 bits. AVX-512 VNNI where
    the writer's vectors are 64 bytes, else AVX2."""
    k, j = plan.k, plan.j
    n_k, n_j = k.extent, j.extent
    target = w.access(plan.acc.buffer, plan.acc.index)
    a_one = w.expr(plan.a)
    src = plan.b.args[0]
    b_one = w.expr(plan.b)
    ctype = "int8_t" if w.buffers[src.buffer].dtype == "i8" else "uint8_t"
    wide = w.vector_bytes >= 64
    half, halves = (HALF, GROUP) if wide else (HALF_AVX2, GROUP_AVX2)
    widen = ("_mm512_cvtepi8_epi16" if wide else "_mm256_cvtepi8_epi16") if ctype == "int8_t" else \
        ("_mm512_cvtepu8_epi16" if wide else "_mm256_cvtepu8_epi16")
    p = pad + "  "

    def row(at_k: str, at_j: str) -> str:
        at = w.access(src.buffer, src.index)
        return f"({{ const int64_t {k.var} = {at_k}, {j.var} = {at_j}; (const {ctype} *)&{at}; }})"

    def plain(first: str, q: str) -> list[str]:
        return [f"{q}for (int64_t {k.var} = 0; {k.var} < {n_k}; ++{k.var}) {{",
                f"{q}  const int32_t st_a = {a_one};",
                f"{q}  for (int64_t {j.var} = {first}; {j.var} < {n_j}; ++{j.var}) {target} += st_a * {b_one};",
                f"{q}}}"]

    # where B's rows lie one after the other (a bound weight laid out tile by tile, lowering/bind.py),
    # the next block of rows is one run of bytes: prefetched while this block is summed, as the
    # hardware does not follow the groups' order
    flat = w.flat_index(src.buffer, src.index)
    iterations = (n_j // (half * halves) + n_j % (half * halves) // half) * (ROWS // 2)
    prefetch = 64 * -(-ROWS * n_j // (64 * iterations)) if flat.coef(j.var) == 1 and flat.coef(k.var) == n_j else 0

    def pairs_loop(count: int, q: str, vector: str, prefix: str, zero: str) -> list[str]:
        """The sums' declarations and the head of the loop over the block's pairs of rows (`vector`
        the sums' type, `prefix` its intrinsics', `zero` its zeroing intrinsic's suffix)."""
        sums = [f"c{h}{s}" for h in range(count) for s in "lh"]
        out = [f"{q}{vector} {', '.join(f'{c} = {prefix}_setzero_{zero}()' for c in sums)};",
               f"{q}for (int64_t st_k = st_k0; st_k < st_k1; st_k += 2) {{",
               f"{q}  const {vector} st_pair = {prefix}_set1_epi32(st_pairs[(st_k - st_k0) / 2]);",
               f"{q}  const {ctype} *st_r0 = {row('st_k', 'st_j')};",
               f"{q}  const {ctype} *st_r1 = st_k + 1 < {n_k} ? {row('st_k + 1', 'st_j')} : st_r0;"]
        if prefetch:  # a share of the next block's bytes, a few lines per pair of rows
            out.append(f"{q}  if (st_pf < st_pf_end) {{ " + " ".join(
                f"__builtin_prefetch(st_pf + {64 * i}, 0, 3);" for i in range(prefetch // 64))
                + f" st_pf += {prefetch}; }}")
        return out

    def group(count: int, q: str) -> list[str]:
        """The columns st_j .. st_j + HALF * count - 1 over the block's rows, added into C."""
        out = pairs_loop(count, q, "__m512i", "_mm512", "si512")
        for h in range(count):
            out += [f"{q}  {{ const __m512i x = {widen}(_mm256_loadu_si256((const __m256i *)(st_r0 + {HALF * h})));",
                    f"{q}    const __m512i y = {widen}(_mm256_loadu_si256((const __m256i *)(st_r1 + {HALF * h})));",
                    f"{q}    c{h}l = _mm512_dpwssd_epi32(c{h}l, _mm512_unpacklo_epi16(x, y), st_pair);",
                    f"{q}    c{h}h = _mm512_dpwssd_epi32(c{h}h, _mm512_unpackhi_epi16(x, y), st_pair); }}"]
        out.append(f"{q}}}")
        for h in range(count):
            for part, order in enumerate(_ORDER):
                idx = ", ".join(str(i) for i in reversed(order))
                out += [f"{q}{{ const int64_t {j.var} = st_j + {HALF * h + 16 * part}; int32_t *st_c = &{target};",
                        (f"{q}  _mm512_storeu_si512(st_c, _mm512_add_epi32(_mm512_loadu_si512(st_c), "
                        f"_mm512_permutex2var_epi32(c{h}l, _mm512_set_epi32({idx}), c{h}h))); }}")]
        return out

    def group_avx2(count: int, q: str) -> list[str]:
        """The columns st_j .. st_j + HALF_AVX2 * count - 1 over the block's rows, added into C."""
        out = pairs_loop(count, q, "__m256i", "_mm256", "si256")
        for h in range(count):
            out += [f"{q}  {{ const __m256i x = {widen}(_mm_loadu_si128((const __m128i *)(st_r0 + {HALF_AVX2 * h})));",
                    f"{q}    const __m256i y = {widen}(_mm_loadu_si128((const __m128i *)(st_r1 + {HALF_AVX2 * h})));",
                    f"{q}    c{h}l = _mm256_add_epi32(c{h}l, _mm256_madd_epi16(_mm256_unpacklo_epi16(x, y), st_pair));",
                    f"{q}    c{h}h = _mm256_add_epi32(c{h}h, _mm256_madd_epi16(_mm256_unpackhi_epi16(x, y), st_pair)); }}"]
        out.append(f"{q}}}")
        for h in range(count):
            for part, lanes in enumerate(_LANES_AVX2):
                out += [f"{q}{{ const int64_t {j.var} = st_j + {HALF_AVX2 * h + 8 * part}; int32_t *st_c = &{target};",
                        (f"{q}  _mm256_storeu_si256((__m256i *)st_c, _mm256_add_epi32(_mm256_loadu_si256((__m256i *)st_c), "
                        f"_mm256_permute2x128_si256(c{h}l, c{h}h, {lanes}))); }}")]
        return out

    w.lines.append(f"{pad}{{")
    w.lines.append("#if defined(__AVX512VNNI__) && defined(__AVX512BW__)" if wide else "#if defined(__AVX2__)")
    w.lines.append(f"{pad}int st_fits = 1;")
    w.lines.append(f"{pad}for (int64_t {k.var} = 0; {k.var} < {n_k}; ++{k.var}) {{ const int32_t st_a = {a_one}; "
                   f"st_fits &= {fits16('st_a')}; }}")
    w.lines.append(f"{pad}if (st_fits) {{")
    # blocks of ROWS rows: A's pairs made once per block, B's rows stay in the nearest cache from group
    # to group, and the next block is prefetched
    w.lines.append(f"{p}for (int64_t st_k0 = 0; st_k0 < {n_k}; st_k0 += {ROWS}) {{")
    q = p + "  "
    w.lines += [f"{q}const int64_t st_k1 = st_k0 + {ROWS} < {n_k} ? st_k0 + {ROWS} : {n_k};",
                f"{q}int32_t st_pairs[{ROWS // 2}];  /* A's pairs of k as 16-bit halves; 0 past the end */",
                f"{q}for (int64_t st_k = st_k0; st_k < st_k1; st_k += 2) {{",
                f"{q}  int32_t st_a0, st_a1 = 0;",
                f"{q}  {{ const int64_t {k.var} = st_k; st_a0 = {a_one}; }}",
                f"{q}  if (st_k + 1 < {n_k}) {{ const int64_t {k.var} = st_k + 1; st_a1 = {a_one}; }}",
                f"{q}  st_pairs[(st_k - st_k0) / 2] = {pair16('st_a0', 'st_a1')};",
                f"{q}}}",
                f"{q}int64_t st_j = 0;"]
    if prefetch:
        w.lines += [f"{q}const char *st_pf = st_k1 < {n_k} ? (const char *){row('st_k1', '0')} : 0;",
                    (f"{q}const char *st_pf_end = st_pf ? st_pf + "
                    f"(st_k1 + {ROWS} < {n_k} ? {ROWS} : {n_k} - st_k1) * {n_j} : 0;")]
    body = group if wide else group_avx2
    w.lines += column_steps(q, n_j, [(half * halves, body(halves, q + "  ")), (half, body(1, q + "  "))])
    w.lines.append(f"{p}}}")
    w.lines += plain(f"{n_j - n_j % half}", p)
    w.lines.append(f"{pad}}} else")
    w.lines.append("#endif")
    w.lines.append(f"{pad}{{")
    w.lines += plain("0", p)
    w.lines.append(f"{pad}}} }}")
