"""A product of one row whose right operand is a quantized weight dequantized where it is read: each
column a dot product over packed bytes, unpacked in registers (a STATEMENTS recognizer).

    for k reduce { for j { C[.., j] += A(k) * ((cast(Q(j, k)) - Z(j, k)) * S(j, k)) } }

Q is a weight's integer element read from bytes that run along k for each column j: one byte per
element (`b[j, k]`, 8 bits), or a nibble of one byte per two elements (`bitand(shr(b[j, k // 2],
shift), 15)` with the shift 0 at even k and 4 at odd k, the low nibble first: how ONNX's
MatMulNBits and DequantizeLinear's int4 pack them). S (the scale) and Z (the zero point, or none)
are the same for every k of an aligned block of BLOCK (a quantization block of 32 or more: their
reads depend on k only through k // 32 or coarser). A is contiguous along k (the activation row).

Written plainly, every element is a shift, a mask, a cast and two float ops, one column after
another; here each block of 32 k is one 16-byte load per column, its low and high nibbles
looked up in a table of the block's 16 weights ((level - Z) * S, made once per block: vpermps
reads a lane's low 4 bits as the index) and multiplied into A's even and odd elements (A's 32
values loaded and split once per block for DOT_COLUMNS columns). Each weight is the value the
loops compute, (cast(Q) - Z) * S rounded as they round it; 8-bit elements are converted, the zero
point subtracted, and the block's sum scaled once: C[.., j] += sum over blocks of S * sum of (Q - Z) * A.
With AVX2's 8 lanes (no 16-entry table lookup) nibbles are converted too (`_emit_avx2`); where the
machine's vectors are 8 lanes, lowering/nibbles.py lays the bytes out at binding, 8 columns a
32-byte word, and the laid-out form (`_emit_laid_out`) gives 8 columns' weights at one k by an AND,
read as subnormal floats (an AND and a multiply-add per 8 weights). The dequantized weight never
reaches memory, and the product reads half a byte per element. The order of the sum and where the
scale multiplies differ from the loops as written (as the matmul micro-kernel's order does): within
the reference's tolerance. Columns left over and k beyond the last whole block run the plain
expression.

Where it applies is the plan's choice (engine/schedule/kernel.py, `read_along_sum`: such a weight
is not packed); tests/test_c_nibble_dot.py holds it to its plain-loop twin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...engine.schedule.index import Ix, indirect
from ...lowering.execute import TileRun
from ...lowering.loops import Accumulate, For, IndexValue, Lit, Load, Op, index_vars, loads
from ...lowering.matmul import expr_uses
from .dot import column_steps, one_row_product
from .emit import KernelWriter

BLOCK = 32  # k per step: one 16-byte load of nibbles, two of bytes
DOT_COLUMNS = 4  # columns summed side by side, sharing A's vectors
GROUP = 8  # columns of a 32-byte word in lowering/nibbles.py's layout: a lane each
SPANS = (4, 2, 1)  # groups of GROUP columns a laid-out block interleaves (lowering/nibbles.py), summed together
CHAINS = 2  # sums a group keeps per block in the laid-out form (each FMA waits on the one before)
LAYOUT_BYTES = 128 << 10  # AVX2's layout of A on a thread's stack, at most
_RECORD_BYTES = 160  # a block of A laid out: four vectors of 8 and a fifth for its sum
_EVEN = "_mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0)"
_ODD = "_mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1)"
_LEVELS = "_mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)"  # a nibble's 16 values


@dataclass(frozen=True)
class Plan:
    k: For
    j: For
    acc: Accumulate
    a: object  # the factor without j
    b: object  # the dequantized weight, as written (the leftovers' plain expression)
    source: Load  # the bytes
    nibbles: bool
    scale: object
    zero: object | None
    laid_out: int = 0  # the groups of 8 columns interleaved in lowering/nibbles.py's layout (0: not laid out)
    taken: int = 1


def match(w: KernelWriter, stmts: list, at: int, loops: tuple[For, ...]) -> Plan | None:
    shape = one_row_product(w, stmts[at], vector_bytes=32)
    if shape is None:
        return None
    k, j, acc, pairs = shape
    if not (isinstance(k.extent, int) and isinstance(j.extent, int) and k.extent >= BLOCK):
        return None
    if w.vector_bytes == 32 and k.extent // BLOCK * _RECORD_BYTES > LAYOUT_BYTES:
        return None  # (AVX2's layout of A would not fit the stack)
    for a, b in pairs:
        plan = _dequantized(w, b, k, j) if w.vector_expr(a, k.var) is not None else None
        if plan is not None:
            return Plan(k, j, acc, a, b, *plan)
    return None


def _dequantized(w: KernelWriter, b, k: For, j: For):
    """(source, nibbles, scale, zero, laid out) where `b` is (cast(Q) - Z) * S or cast(Q) * S as the
    module says; else None."""
    if not (isinstance(b, Op) and b.op == "mul" and b.dtype == "f32"):
        return None
    for d, scale in (b.args, b.args[::-1]):
        if not _block_invariant(w, scale, k):
            continue
        zero = None
        if isinstance(d, Op) and d.op == "sub":
            d, zero = d.args
            if not _block_invariant(w, zero, k):
                continue
        if not (isinstance(d, Op) and d.op == "cast" and d.dtype == "f32" and len(d.args) == 1):
            continue
        q = _quantized(w, d.args[0], k, j)
        if q is not None:
            source, nibbles, laid_out = q
            return source, nibbles, scale, zero, laid_out
    return None


def _quantized(w: KernelWriter, q, k: For, j: For) -> tuple[Load, bool, int] | None:
    """(the byte load, whether it holds nibbles, the groups of 8 columns interleaved where they are
    laid out 8 columns a word, else 0) of an 8-bit element or a nibble, as the module says."""
    if isinstance(q, Load):
        ok = w.buffers[q.buffer].dtype in ("u8", "i8") and _columns_apart(q, k, j) and _runs(w, q, k, 1)
        return (q, False, 0) if ok else None
    if not (isinstance(q, Op) and q.op == "bitand" and q.dtype == "u8"):
        return None
    shifted, mask = q.args
    if not (isinstance(mask, Lit) and mask.value == 15 and isinstance(shifted, Op) and shifted.op == "shr"):
        return None
    byte, shift = shifted.args
    if not (isinstance(byte, Load) and w.buffers[byte.buffer].dtype == "u8"):
        return None
    laid_out = _interleaved(w, byte, k, j)
    if not (laid_out or _columns_apart(byte, k, j) and _runs(w, byte, k, 2)):
        return None
    ks = np.arange(k.extent, dtype=np.int64)
    shifts = _evaluate(shift, k.var, ks)
    if shifts is None or not np.array_equal(np.broadcast_to(shifts, ks.shape), (ks % 2) * 4):
        return None
    return byte, True, laid_out


def _interleaved(w: KernelWriter, ld: Load, k: For, j: For) -> int:
    """The groups of 8 columns whose words of a block follow one another where the load reads
    lowering/nibbles.py's layout (32-byte words, each a column's 4 bytes of 8 k after another's);
    else 0."""
    if not (isinstance(k.extent, int) and isinstance(j.extent, int) and k.extent % BLOCK == 0
            and j.extent % GROUP == 0):
        return 0
    js, ks = np.arange(j.extent)[:, None], np.arange(k.extent)[None, :]
    at = _grid(w.flat_index(ld.buffer, ld.index), {j.var: js, k.var: ks})
    for span in SPANS:
        if j.extent // GROUP % span == 0 and at is not None and np.array_equal(at - at[0, 0], (
                js // (GROUP * span) * (k.extent * 4 * span) + ks // BLOCK * (128 * span) + js // GROUP % span * 128
                + ks % BLOCK // 8 * 32 + js % GROUP * 4 + ks % 8 // 2)):
            return span
    return 0


def _scales_laid_out(w: KernelWriter, scale, k: For, j: For, span: int) -> bool:
    """The scale is a load of lowering/nibbles.py's layout: 8 columns' scales of a block side by
    side, `span` groups' one after another."""
    if not isinstance(scale, Load):
        return False
    js, ks = np.arange(j.extent)[:, None], np.arange(k.extent)[None, :]
    at = _grid(w.flat_index(scale.buffer, scale.index), {j.var: js, k.var: ks})
    want = ((js // (GROUP * span) * (k.extent // BLOCK) + ks // BLOCK) * span + js // GROUP % span) * GROUP + js % GROUP
    return at is not None and np.array_equal(at - at[0, 0], want)


def _grid(ix: Ix, at: dict):
    """`ix` over the arrays of positions `at` (every other loop variable at 0); None where it reads
    a tensor."""
    if indirect(ix):
        return None
    return np.broadcast_to(TileRun({}, set()).index(ix, {v: 0 for v in index_vars(ix)} | at, {}),
                           np.broadcast_shapes(*(np.shape(v) for v in at.values())))


def _runs(w: KernelWriter, ld: Load, k: For, per_element: int) -> bool:
    """The load's element moves one place per `per_element` steps of k, from wherever it starts."""
    ks = np.arange(k.extent, dtype=np.int64)
    flat = w.flat_index(ld.buffer, ld.index)
    at = _values(flat, k.var, ks)
    return at is not None and np.array_equal(np.broadcast_to(at - _values(flat, k.var, 0), ks.shape),
                                             ks // per_element)


def _columns_apart(ld: Load, k: For, j: For) -> bool:
    """The columns j move the load's index only where k does not (each column its own run)."""
    return not any(j.var in index_vars(ix) and k.var in index_vars(ix) for ix in ld.index)


def _block_invariant(w: KernelWriter, e, k: For) -> bool:
    """An f32 expression of loads and literals (no position along k read as a value) whose every
    load reads one element for all k of each aligned block of BLOCK."""
    if isinstance(e, Lit):
        return e.dtype == "f32"
    dtype = w.buffers[e.buffer].dtype if isinstance(e, Load) else getattr(e, "dtype", None)
    if dtype != "f32" or any(isinstance(x, IndexValue) for x in _leaves(e)):
        return False
    ks = np.arange(k.extent, dtype=np.int64)
    for ld in loads(e):
        flat = w.flat_index(ld.buffer, ld.index)
        values = _values(flat, k.var, ks)
        if values is None or not np.array_equal(np.broadcast_to(values, ks.shape),
                                                np.broadcast_to(_values(flat, k.var, ks - ks % BLOCK), ks.shape)):
            return False
    return all(isinstance(x, (Load, Lit, Op)) for x in _leaves(e))


def _leaves(e):
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Op):
            stack += x.args
        else:
            yield x


def _values(ix: Ix, k: str, at):
    """`ix` at k = `at` (an array of positions, or one), every other loop variable at 0, as the numpy
    executor evaluates an index (lowering/execute.py); None where it reads a tensor (a gather)."""
    if indirect(ix):
        return None
    return TileRun({}, set()).index(ix, {v: 0 for v in index_vars(ix)} | {k: at}, {})


def _evaluate(e, var: str, ks: np.ndarray):
    """An expression of literals and positions along `var` (an iota) at every k, as the numpy executor
    evaluates it; None where it reads memory or another loop's position."""
    if any(True for _ in loads(e)) or any(isinstance(x, IndexValue) and index_vars(x.ix) - {var} for x in _leaves(e)):
        return None
    if not all(isinstance(x, (Lit, IndexValue)) for x in _leaves(e)):
        return None
    with np.errstate(all="ignore"):
        return TileRun({}, set()).expr(e, {var: ks}, {})


def emit(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    """Blocks of DOT_COLUMNS columns, then the columns left over one at a time; in each, the whole
    blocks of k unpacked in registers, then k's leftover elements as written."""
    k, j = plan.k, plan.j
    n_k, whole = k.extent, k.extent - k.extent % BLOCK
    target = w.access(plan.acc.buffer, plan.acc.index)
    a_vec = w.vector_expr(plan.a, k.var)
    bytes_at = f"(const {'int8_t' if w.buffers[plan.source.buffer].dtype == 'i8' else 'uint8_t'} *)&" \
               f"{w.access(plan.source.buffer, plan.source.index)}"
    widen = "_mm512_cvtepi8_epi32" if w.buffers[plan.source.buffer].dtype == "i8" else "_mm512_cvtepu8_epi32"
    scale, zero = w.expr(plan.scale), (w.expr(plan.zero) if plan.zero is not None else None)
    a_one, b_one = w.expr(plan.a), w.expr(plan.b)

    def columns(count: int, p: str) -> list[str]:
        sums = [f"s{c}" for c in range(count)] + ([f"t{c}" for c in range(count)] if plan.nibbles else [])
        out = [f"{p}st_vf32 {', '.join(f'{v} = st_bcast_f32(0.0f)' for v in sums)};",
               f"{p}for (int64_t st_k = 0; st_k < {whole}; st_k += {BLOCK}) {{",
               f"{p}  st_vf32 a0, a1;",
               f"{p}  {{ const int64_t {k.var} = st_k; a0 = {a_vec}; }}",
               f"{p}  {{ const int64_t {k.var} = st_k + 16; a1 = {a_vec}; }}"]
        if plan.nibbles:  # the low nibbles are the even k, the high ones the odd
            out += [f"{p}  const __m512 x0 = _mm512_permutex2var_ps((__m512)a0, {_EVEN}, (__m512)a1);",
                    f"{p}  const __m512 x1 = _mm512_permutex2var_ps((__m512)a0, {_ODD}, (__m512)a1);"]
        else:
            out += [f"{p}  const st_vf32 x0 = a0, x1 = a1;"]
        for c in range(count):
            out.append(f"{p}  {{ const int64_t {j.var} = st_j + {c}; const int64_t {k.var} = st_k;")
            if plan.nibbles:
                # the block's 16 weights as a table, indexed by each nibble (vpermps reads an index's low 4 bits)
                level = f"_mm512_sub_ps({_LEVELS}, _mm512_set1_ps({zero}))" if zero is not None else _LEVELS
                out += [f"{p}    const __m512i q = {widen}(_mm_loadu_si128((const __m128i *)({bytes_at})));",
                        f"{p}    const __m512 tab = _mm512_mul_ps({level}, _mm512_set1_ps({scale}));",
                        f"{p}    s{c} = (st_vf32)_mm512_fmadd_ps(_mm512_permutexvar_ps(q, tab), x0, (__m512)s{c});",
                        f"{p}    t{c} = (st_vf32)_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), tab), "
                        f"x1, (__m512)t{c}); }}"]
                continue
            out += [f"{p}    st_vf32 lo = (st_vf32)_mm512_cvtepi32_ps({widen}(_mm_loadu_si128("
                    f"(const __m128i *)({bytes_at}))));",
                    f"{p}    st_vf32 hi = (st_vf32)_mm512_cvtepi32_ps({widen}(_mm_loadu_si128("
                    f"(const __m128i *)({bytes_at} + 16))));"]
            if zero is not None:
                out.append(f"{p}    {{ const st_vf32 z = st_bcast_f32({zero}); lo -= z; hi -= z; }}")
            out.append(f"{p}    s{c} = (st_vf32)_mm512_fmadd_ps(_mm512_fmadd_ps((__m512)lo, (__m512)x0, "
                       f"(__m512)(hi * x1)), _mm512_set1_ps({scale}), (__m512)s{c}); }}")
        out.append(f"{p}}}")
        for c in range(count):
            total = f"s{c} + t{c}" if plan.nibbles else f"s{c}"
            out.append(f"{p}{{ const int64_t {j.var} = st_j + {c}; float t = _mm512_reduce_add_ps((__m512)({total}));")
            if whole < n_k:
                out.append(f"{p}  for (int64_t {k.var} = {whole}; {k.var} < {n_k}; ++{k.var}) t += {a_one} * {b_one};")
            out.append(f"{p}  {target} += t; }}")
        return out

    if plan.laid_out:
        _emit_laid_out(w, plan, pad, loops)
        return
    if w.vector_bytes == 32:
        _emit_avx2(w, plan, pad, loops)
        return
    w.lines.append(f"{pad}{{ int64_t st_j = 0;")
    w.lines += column_steps(pad, j.extent, [(DOT_COLUMNS, columns(DOT_COLUMNS, pad + "  ")),
                                            (1, columns(1, pad + "  "))])
    w.lines.append(f"{pad}}}")


def _emit_avx2(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    """The same walk in 8-lane vectors (AVX2 has no 16-entry vpermps). A's whole blocks are laid out
    once ahead of the columns (on the stack, at most LAYOUT_BYTES), each block's 32 k as four vectors
    (deinterleaved into even and odd k for nibbles) and its sum times -Z where Z is the same for
    every column: the columns read them as memory operands, and A's expression is computed once per
    k, not once per group of columns. Each column's 16 bytes are two widening loads of 8, nibbles
    split by a mask and a shift, every element converted; the block's sum((Q - Z) * A) is made as
    sum(Q * A) - Z * sum(A) in one chain of multiply-adds, then scaled once: C[.., j] += sum over
    blocks of S * that. While a group of columns is summed, the next group's bytes are prefetched,
    as many per block as the group reads (weights bound row after row): the hardware's prefetch lags
    four rows read a few bytes at a time when the weights come from the last-level cache, as in a
    decoder step (one product run again and again does not show it). Without AVX2 and FMA, or with
    a zero point and an infinity or a NaN in A (whose fold would give NaN where the loops give an
    infinity), the loops as written."""
    k, j = plan.k, plan.j
    n_k, whole = k.extent, k.extent - k.extent % BLOCK
    target = w.access(plan.acc.buffer, plan.acc.index)
    a_vec = w.vector_expr(plan.a, k.var)
    signed = w.buffers[plan.source.buffer].dtype == "i8"
    bytes_at = f"(const {'int8_t' if signed else 'uint8_t'} *)&{w.access(plan.source.buffer, plan.source.index)}"
    widen = "_mm256_cvtepi8_epi32" if signed else "_mm256_cvtepu8_epi32"
    scale, zero = w.expr(plan.scale), (w.expr(plan.zero) if plan.zero is not None else None)
    shared_zero = zero is not None and not expr_uses(plan.zero, j.var)
    a_one, b_one = w.expr(plan.a), w.expr(plan.b)
    record = 40 if zero is not None else 32

    def load(at: str) -> str:
        return f"{widen}(_mm_loadl_epi64((const __m128i *)({bytes_at} + {at})))"

    def x(i: int) -> str:
        return f"_mm256_load_ps(st_xb + {8 * i})"

    def columns(count: int, p: str) -> list[str]:
        out = [f"{p}__m256 {', '.join(f's{c} = _mm256_setzero_ps()' for c in range(count))};",
               f"{p}for (int64_t st_k = 0; st_k < {whole}; st_k += {BLOCK}) {{",
               f"{p}  const float *st_xb = st_x + st_k / {BLOCK} * {record};"]
        if count > 1:
            step = count * (BLOCK // 2 if plan.nibbles else BLOCK)
            fetch = " ".join(f"__builtin_prefetch(st_pf + {step} * st_k / {BLOCK} + {at}, 0, 3);"
                             for at in range(0, step, 64))
            out.append(f"{p}  if (st_j + {2 * count} <= {j.extent}) {{ const int64_t {j.var} = st_j + {count}; "
                       f"const int64_t {k.var} = 0; const char *st_pf = (const char *)({bytes_at}); {fetch} }}")
        for c in range(count):
            out.append(f"{p}  {{ const int64_t {j.var} = st_j + {c}; const int64_t {k.var} = st_k;")
            if zero is None:
                start = f"_mm256_mul_ps(st_c0, {x(0)})"
            elif shared_zero:
                start = f"_mm256_fmadd_ps(st_c0, {x(0)}, {x(4)})"
            else:
                start = f"_mm256_fmadd_ps(st_c0, {x(0)}, _mm256_mul_ps(_mm256_set1_ps(-({zero})), {x(4)}))"
            if plan.nibbles:
                out += [f"{p}    const __m256i q0 = {load(0)}, q1 = {load(8)}, m = _mm256_set1_epi32(15);",
                        f"{p}    const __m256 st_c0 = _mm256_cvtepi32_ps(_mm256_and_si256(q0, m));",
                        f"{p}    const __m256 st_c1 = _mm256_cvtepi32_ps(_mm256_srli_epi32(q0, 4));",
                        f"{p}    const __m256 st_c2 = _mm256_cvtepi32_ps(_mm256_and_si256(q1, m));",
                        f"{p}    const __m256 st_c3 = _mm256_cvtepi32_ps(_mm256_srli_epi32(q1, 4));"]
            else:
                out += [f"{p}    const __m256 st_c{i} = _mm256_cvtepi32_ps({load(8 * i)});" for i in range(4)]
            out += [f"{p}    __m256 u = {start};",
                    *(f"{p}    u = _mm256_fmadd_ps(st_c{i}, {x(i)}, u);" for i in range(1, 4)),
                    f"{p}    s{c} = _mm256_fmadd_ps(u, _mm256_set1_ps({scale}), s{c}); }}"]
        out.append(f"{p}}}")
        for c in range(count):
            out.append(f"{p}{{ const int64_t {j.var} = st_j + {c}; float t = st_hsum_f32((st_vf32)s{c});")
            if whole < n_k:
                out.append(f"{p}  for (int64_t {k.var} = {whole}; {k.var} < {n_k}; ++{k.var}) t += {a_one} * {b_one};")
            out.append(f"{p}  {target} += t; }}")
        return out

    q = pad + "  "
    lay = [f"{q}_Alignas(32) float st_x[{whole // BLOCK * record}];",
           *([f"{q}__m256i st_top = _mm256_setzero_si256();"] if zero is not None else []),
           f"{q}for (int64_t st_k = 0; st_k < {whole}; st_k += {BLOCK}) {{",
           f"{q}  float *st_xb = st_x + st_k / {BLOCK} * {record};",
           f"{q}  __m256 a0, a1, a2, a3;"]
    lay += [f"{q}  {{ const int64_t {k.var} = st_k + {8 * i}; a{i} = (__m256)({a_vec}); }}" for i in range(4)]
    if plan.nibbles:
        for i, (lo, hi, imm) in enumerate([(0, 1, "0x88"), (0, 1, "0xDD"), (2, 3, "0x88"), (2, 3, "0xDD")]):
            lay.append(f"{q}  _mm256_store_ps(st_xb + {8 * i}, _mm256_castpd_ps(_mm256_permute4x64_pd("
                       f"_mm256_castps_pd(_mm256_shuffle_ps(a{lo}, a{hi}, {imm})), 0xD8)));")
    else:
        lay += [f"{q}  _mm256_store_ps(st_xb + {8 * i}, a{i});" for i in range(4)]
    if zero is not None:  # (A's largest magnitude, as bits: an infinity or a NaN runs the loops as written)
        lay += [f"{q}  {_magnitude_into_top(f'a{i}')}" for i in range(4)]
        total = "_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3))"
        if shared_zero:
            total = f"_mm256_mul_ps(_mm256_set1_ps(-({zero})), {total})"
            lay.append(f"{q}  {{ const int64_t {k.var} = st_k;")
            lay.append(f"{q}    _mm256_store_ps(st_xb + 32, {total}); }}")
        else:
            lay.append(f"{q}  _mm256_store_ps(st_xb + 32, {total});")
    lay.append(f"{q}}}")
    w.lines.append("#if defined(__AVX2__) && defined(__FMA__)")
    w.lines.append(f"{pad}{{ int64_t st_j = 0;")
    w.lines += lay
    steps = column_steps(q, j.extent, [(DOT_COLUMNS, columns(DOT_COLUMNS, q + "  ")), (1, columns(1, q + "  "))])
    if zero is not None:  # the fold sum(Q * A) - Z * sum(A) makes NaN of an infinity where the loops do not
        r = q + "  "
        w.lines += _unless_finite(q)
        w.plain(k, len(r) // 2, loops)
        w.lines += [f"{q}}} else {{", *("  " + line for line in steps), f"{q}}}"]
    else:
        w.lines += steps
    w.lines.append(f"{pad}}}")
    w.lines.append("#else")
    w.plain(k, len(pad) // 2, loops)
    w.lines.append("#endif")


def _emit_laid_out(w: KernelWriter, plan: Plan, pad: str, loops: tuple[For, ...]) -> None:
    """The product over lowering/nibbles.py's layout, in 8-lane vectors (AVX2; AVX-512 runs the same
    C): the groups of 8 columns a block interleaves (4, 2 or 1) at a time, one column a lane, their
    words one stream. Each 32-byte word holds 8 k of 8 columns, a column's nibbles k = 8w + i at
    bits 4i; a mask (an AND) leaves nibble i of each lane in
    place, and those bits read as a float are q * 2^(4i - 149), a subnormal number: exact. A times
    2^(149 - D - 4i), laid out once ahead of the columns, makes their product q * A * 2^-D in one
    multiply-add, so a weight costs an AND and a multiply-add per 8 columns: no shift, no
    conversion, no shuffle, and A broadcast from memory for all the groups. Nibbles 4-7 are shifted
    down 16 bits first, one shift per word. D, chosen per call from A's largest magnitude (below 2^E:
    D = E + 22, within [22, 149]), keeps A's scaled copy finite and the products normal; the sums
    are scaled back by 2^D at the end, exactly. The zero point is folded per block as
    Q * A - Z * sum(A) (the block sums of A, times 2^-D, made once per call), then the block's sum
    scaled: C[.., j] += 2^D * sum over blocks of S * that. The scales are one vector load where they
    are laid out too, else 8 reads.

    Subnormal inputs are read as such only where MXCSR's denormals-are-zero bit is clear: it is
    cleared for the columns' sums and restored after. An A with an infinity or a NaN (whose fold
    would give NaN where the loops give an infinity) runs the loops as written, as does a machine
    without AVX2 and FMA. The sums run in another order than the loops': within the reference's
    tolerance."""
    k, j = plan.k, plan.j
    q, r = pad + "  ", pad + "    "
    w.lines += ["#if defined(__AVX2__) && defined(__FMA__)",
                f"{pad}{{ int64_t st_j = 0;",
                f"{q}_Alignas(64) float st_x[{k.extent}]; float st_z[{k.extent // BLOCK}];",
                f"{q}for (int64_t st_k = 0; st_k < {k.extent}; st_k += {w.vector_bytes // 4}) {{",
                f"{q}  const int64_t {k.var} = st_k; *(st_vf32 *)(st_x + st_k) = {w.vector_expr(plan.a, k.var)};",
                f"{q}}}",
                f"{q}__m256i st_top = _mm256_setzero_si256();  // A's largest magnitude, as bits",
                f"{q}for (int64_t st_k = 0; st_k < {k.extent}; st_k += 8)",
                f"{q}  {_magnitude_into_top('_mm256_load_ps(st_x + st_k)')}",
                *_unless_finite(q)]
    w.plain(k, len(r) // 2, loops)
    w.lines += [f"{q}}} else {{",
                f"{r}const unsigned st_csr = _mm_getcsr();",
                f"{r}_mm_setcsr(st_csr & ~0x40u);  // (denormals are not zero: the weights are read as subnormal floats)",
                *_scaled_a(w, plan, r),
                (f"{r}const __m256i st_m0 = _mm256_set1_epi32(0xF), st_m1 = _mm256_set1_epi32(0xF0), "
                 f"st_m2 = _mm256_set1_epi32(0xF00), st_m3 = _mm256_set1_epi32(0xF000);")]
    w.lines += column_steps(r, j.extent, [(GROUP * plan.laid_out, _groups(w, plan, plan.laid_out, r + "  "))])
    w.lines += [f"{r}_mm_setcsr(st_csr);", f"{q}}}", f"{pad}}}", "#else"]
    w.plain(k, len(pad) // 2, loops)
    w.lines.append("#endif")


def _magnitude_into_top(v: str) -> str:
    """C: st_top, the largest of A's magnitudes as bits lane by lane, taking in the 8 floats `v`."""
    return (f"st_top = _mm256_max_epi32(st_top, _mm256_and_si256(_mm256_castps_si256({v}), "
            f"_mm256_set1_epi32(0x7fffffff)));")


def _unless_finite(p: str) -> list[str]:
    """C opening `if` A holds an infinity or a NaN: st_most, the largest of st_top's lanes (A's
    magnitudes as bits), above the largest finite float's."""
    return [f"{p}int32_t st_most = 0;",
            (f"{p}for (int st_i = 0; st_i < 8; ++st_i) {{ const int32_t v = ((const int32_t *)&st_top)[st_i]; "
             f"if (v > st_most) st_most = v; }}"),
            f"{p}if (st_most > 0x7f7fffff) {{  // an infinity or a NaN in A: the loops as written"]


def _scaled_a(w: KernelWriter, plan: Plan, p: str) -> list[str]:
    """C making D from A's largest magnitude, A's copy times 2^(149 - D - 4 (k % 4)) in place, and
    each block's sum of A times 2^-D (times -Z where every column shares Z) in st_z."""
    k, j = plan.k, plan.j
    down = "_mm256_set1_ps(st_down)"
    out = [f"{p}int st_d = (st_most >> 23) - 104;  // |A| < 2^E: D = E + 22",
           f"{p}st_d = st_d < 22 ? 22 : st_d > 149 ? 149 : st_d;",
           f"{p}const float st_down = ldexpf(1.0f, -st_d);",
           (f"{p}const __m256 st_up0 = _mm256_set1_ps(ldexpf(1.0f, st_d / 2)), "
            f"st_up1 = _mm256_set1_ps(ldexpf(1.0f, st_d - st_d / 2));  // 2^D, in two steps"),
           (f"{p}const __m256 st_f = _mm256_mul_ps(_mm256_set1_ps(ldexpf(1.0f, 149 - st_d)), "
            f"_mm256_setr_ps(1.0f, 0x1p-4f, 0x1p-8f, 0x1p-12f, 1.0f, 0x1p-4f, 0x1p-8f, 0x1p-12f));"),
           f"{p}for (int64_t st_b = 0; st_b < {k.extent // BLOCK}; ++st_b) {{",
           f"{p}  float *st_xb = st_x + {BLOCK} * st_b;",
           *(f"{p}  const __m256 a{i} = _mm256_load_ps(st_xb + {8 * i});" for i in range(4)),
           (f"{p}  const __m256 st_v = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(a0, {down}), "
            f"_mm256_mul_ps(a1, {down})), _mm256_add_ps(_mm256_mul_ps(a2, {down}), _mm256_mul_ps(a3, {down})));"),
           f"{p}  __m128 h = _mm_add_ps(_mm256_castps256_ps128(st_v), _mm256_extractf128_ps(st_v, 1));",
           f"{p}  h = _mm_add_ps(h, _mm_movehl_ps(h, h));",
           f"{p}  st_z[st_b] = _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));"]
    if plan.zero is not None and not expr_uses(plan.zero, j.var):
        out.append(f"{p}  {{ const int64_t {k.var} = {BLOCK} * st_b; st_z[st_b] *= -({w.expr(plan.zero)}); }}")
    out += [f"{p}  _mm256_store_ps(st_xb + {8 * i}, _mm256_mul_ps(a{i}, st_f));" for i in range(4)]
    return out + [f"{p}}}"]


def _groups(w: KernelWriter, plan: Plan, count: int, p: str) -> list[str]:
    """C summing `count` groups of 8 columns from st_j on over every block, into C[.., j]."""
    k, j = plan.k, plan.j
    gs = range(count)
    shared_zero = plan.zero is not None and not expr_uses(plan.zero, j.var)

    def at(g: int, c: int = 0, kk: str = "0") -> str:
        return f"const int64_t {j.var} = st_j + {GROUP * g + c}; const int64_t {k.var} = {kk};"

    def per_lane(e, g: int) -> str:  # an expression of j at the group's 8 columns
        return "_mm256_setr_ps(" + ", ".join(f"({{ {at(g, c, f'{BLOCK} * st_b')} {w.expr(e)}; }})"
                                             for c in range(GROUP)) + ")"

    q, r = p + "  ", p + "    "
    out = [f"{p}__m256 {', '.join(f's{g} = _mm256_setzero_ps()' for g in gs)};"]
    out += [f"{p}const uint8_t *st_p{g}; {{ {at(g)} st_p{g} = &{w.access(plan.source.buffer, plan.source.index)}; }}"
            for g in gs]
    out.append(f"{p}for (int64_t st_b = 0; st_b < {k.extent // BLOCK}; ++st_b) {{")
    for g in gs:
        start = ["_mm256_broadcast_ss(st_z + st_b)" if shared_zero and h == 0 else "_mm256_setzero_ps()"
                 for h in range(CHAINS)]
        out.append(f"{q}__m256 {', '.join(f't{g}_{h} = {start[h]}' for h in range(CHAINS))};")
    out += [f"{q}for (int st_w = 0; st_w < {BLOCK // 8}; ++st_w) {{",  # a word: 8 k of the group's 8 columns
            f"{r}const float *st_xw = st_x + {BLOCK} * st_b + 8 * st_w;"]
    out += [f"{r}__m256i st_q{g} = _mm256_loadu_si256((const __m256i *)(st_p{g} + {BLOCK * 4 * count} * st_b + 32 * st_w));"
            for g in gs]
    for i in range(8):
        if i == 4:
            out += [f"{r}st_q{g} = _mm256_srli_epi32(st_q{g}, 16);" for g in gs]
        out.append(f"{r}{{ const __m256 st_a = _mm256_broadcast_ss(st_xw + {i});")
        out += [(f"{r}  t{g}_{i % CHAINS} = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(st_q{g}, "
                 f"st_m{i % 4})), st_a, t{g}_{i % CHAINS});") for g in gs]
        out.append(f"{r}}}")
    out.append(f"{q}}}")
    for g in gs:
        total = f"t{g}_0"
        for h in range(1, CHAINS):
            total = f"_mm256_add_ps({total}, t{g}_{h})"
        if plan.zero is not None and not shared_zero:
            total = f"_mm256_fnmadd_ps({per_lane(plan.zero, g)}, _mm256_broadcast_ss(st_z + st_b), {total})"
        if _scales_laid_out(w, plan.scale, k, j, count):
            scale = (f"({{ {at(g, 0, f'{BLOCK} * st_b')} "
                     f"_mm256_loadu_ps(&{w.access(plan.scale.buffer, plan.scale.index)}); }})")
        else:
            scale = per_lane(plan.scale, g)
        out.append(f"{q}s{g} = _mm256_fmadd_ps({total}, {scale}, s{g});")
    out.append(f"{p}}}")
    for g in gs:
        out += [f"{p}{{ {at(g)} float *st_c = &{w.access(plan.acc.buffer, plan.acc.index)};",
                (f"{p}  _mm256_storeu_ps(st_c, _mm256_add_ps(_mm256_loadu_ps(st_c), "
                 f"_mm256_mul_ps(_mm256_mul_ps(s{g}, st_up0), st_up1))); }}")]
    return out
