"""A register-blocked micro-kernel for the matmul nests lowering writes.

Lowering writes a matmul tile as

    for i serial { for k reduce { for j serial { C[.., i, j] += mul(A(i, k), B[.., k, j]) } } }

with j contiguous in C and B. Compiled as written, every `+=` goes through
memory and gcc keeps one vector of C in a register at a time. Here the nest
becomes blocks of MR rows x NV vectors of C held in registers (GCC vector
extensions, so the block shape does not depend on what the auto-vectorizer
decides) across the whole k loop: per k, NV vector loads of B, MR scalars of A
(computed once per row and k however complex A is: the softmax in attention is
an A) and MR*NV fused multiply-adds. Leftover rows and vectors run as smaller
blocks, leftover columns as the scalar nest. C of f32, f64 or i32 (an integer
product, as an ONNX MatMulInteger's: a multiply and an add per lane, wrapping as
every integer op does; other integer dtypes keep the plain loops).

The blocks' order follows A (the cost model's `panel_bytes` prices each): an A
read where it is goes panel by panel of B's columns, every block of rows
inside (`_panels`: the panel stays in the nearest cache); a computed A, made
once per block of rows, goes block by block, every panel inside
(`_row_blocks`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.ir.extent import is_symbolic, planned
from ...engine.ir.program import dtype_bytes
from ...engine.schedule.machine import (
    MICRO_ROWS,
    MICRO_VECTORS,
    NARROWEST_VECTOR_BYTES,
    PANEL_VECTOR_BYTES,
    panel_vectors,
    reads_left_in_place,
)
from ...lowering.delinearize import digits, indices_in, split_digits, substituted
from ...lowering.loops import For, Ix, Load, loads, map_indices
from ...lowering.matmul import BLOCKED_DTYPES, MatmulNest, shift_ix
from . import a_pieces, tuning
from .emit import KernelWriter

VECTOR_TYPES = {"f32": "st_vf32", "f64": "st_vf64", "i32": "st_vi32"}
assert tuple(VECTOR_TYPES) == BLOCKED_DTYPES
C_ELEMENT = {"f32": "float", "f64": "double", "i32": "int32_t"}
MAX_ROWS = MICRO_ROWS  # rows of C in one register block (the cost model prices its panel reads by it)


def vector_typedefs(vector_bytes: int) -> str:
    """Unaligned, aliasing vector types: loads and stores go straight to any element address; and
    st_fma_* (scalar a, vector b, vector c: a * b + c), fused where the machine has FMA. The full
    width, and each half of it down to 16 bytes (a product whose tile has fewer columns than a full
    vector: see `render_matmul`).

    Code is compiled with -ffp-contract=off (no fused multiply-add outside matmul: README,
    "Floating-point semantics"), so the micro-kernel asks for FMA explicitly, as BLAS does."""
    out = []
    width = vector_bytes
    while width >= NARROWEST_VECTOR_BYTES or width == vector_bytes:
        out.append(_typedefs(width, vector_bytes))
        width //= 2
    return "".join(out)


def vector_names(dtype: str, width: int, full: int) -> tuple[str, str]:
    """The C vector type of `width` bytes and its multiply-add (the full width: st_vf32, st_fma_f32)."""
    suffix = "" if width == full else f"_{width}"
    return VECTOR_TYPES[dtype] + suffix, f"st_fma_{dtype}{suffix}"


def _typedefs(width: int, full: int) -> str:
    out = []
    kinds = [(t, c, *vector_names(t, width, full)) for t, c in (("f32", "float"), ("f64", "double"))]
    integer = [(t, c, *vector_names(t, width, full)) for t, c in (("i32", "int32_t"),)]
    for t, c, name, _ in kinds + integer:
        out.append(f"typedef {c} {name} __attribute__((vector_size({width}), aligned({dtype_bytes(t)}), "
                   f"may_alias));\n")
    intrinsic, guard = _FMA_INTRINSICS.get(width, (None, None))
    if intrinsic:
        out.append(f"#if {guard}\n#include <immintrin.h>\n")
        for t, c, name, fma in kinds:
            suffix = "ps" if t == "f32" else "pd"
            out.append(f"static inline {name} {fma}({c} a, {name} b, {name} c) "
                       f"{{ return {intrinsic}_fmadd_{suffix}({intrinsic}_set1_{suffix}(a), b, c); }}\n")
        out.append("#else\n")
    for t, c, name, fma in kinds:
        out.append(f"static inline {name} {fma}({c} a, {name} b, {name} c) {{ return a * b + c; }}\n")
    if intrinsic:
        out.append("#endif\n")
    for t, c, name, fma in integer:  # (wraps: the C is compiled with -fwrapv)
        out.append(f"static inline {name} {fma}({c} a, {name} b, {name} c) {{ return a * b + c; }}\n")
    if width == full:
        out.append(_lane_helpers(width))
    return "".join(out)


def _lane_helpers(width: int) -> str:
    """st_hsum_f32 (an st_vf32's lanes added: vreduce's order on AVX-512, halves added pairwise
    elsewhere) and, below AVX-512 (vector_math.h has its own), st_bcast_f32 (a float on every lane):
    what the recognizers written for any width (dot.py) use."""
    lanes = width // 4
    pairwise = (f"  float t[{lanes}];\n  memcpy(t, &v, sizeof t);\n"
                f"  for (int h = {lanes // 2}; h >= 1; h /= 2)\n    for (int i = 0; i < h; ++i) t[i] += t[i + h];\n"
                "  return t[0];\n")
    out = ["static inline float st_hsum_f32(st_vf32 v) {\n"]
    if width == 64:
        out += ["#if defined(__AVX512F__)\n  return _mm512_reduce_add_ps((__m512)v);\n#else\n", pairwise, "#endif\n"]
    else:
        out.append(pairwise)
    out.append("}\n")
    if width != 64:
        every = ", ".join(["a"] * lanes)
        out.append(f"static inline st_vf32 st_bcast_f32(float a) {{ return (st_vf32){{{every}}}; }}\n")
    return "".join(out)


# x86 FMA intrinsics per vector width, and the macro that says the compiler may use them
_FMA_INTRINSICS = {16: ("_mm", "defined(__FMA__)"), 32: ("_mm256", "defined(__FMA__) && defined(__AVX__)"),
                   64: ("_mm512", "defined(__AVX512F__)")}


def render_matmul(nest: MatmulNest, kernel: KernelWriter, pad: str, dtype: str, vector_bytes: int) -> list[str]:
    """C for the nest: MR x NV register blocks over rows and vector columns, then the leftovers.

    Vectors are the machine's widest unless the nest has fewer columns than one holds: then the
    widest that fits (16 bytes at least), so a tile of 8 columns is one 8-lane vector, not 8 scalar
    columns (a head's projection tiled 8 columns wide ran at a tenth of the speed)."""
    width = vector_bytes
    while width > NARROWEST_VECTOR_BYTES and nest.j.extent < width // dtype_bytes(dtype):
        width //= 2
    vec = _Vec(*vector_names(dtype, width, vector_bytes), width // dtype_bytes(dtype))
    lanes = vec.lanes
    registers = 32 if vector_bytes >= 64 else 16
    nv = block_vectors(planned(nest.j.extent) // lanes, registers)  # (a number: vectors unrolled)
    if planned(nest.i.extent) == 1:
        nv = one_row_vectors(planned(nest.j.extent), nv, width, registers, dtype_bytes(dtype))
    mr = max(1, min(MAX_ROWS, planned(nest.i.extent), (registers - nv - 2) // nv))  # (a number: rows unrolled)
    n_i = nest.i.extent
    lines = [f"{pad}{{ const int64_t {', '.join(f'{u} = 0' for u in nest.units)};"] if nest.units else []
    full_rows = n_i - n_i % mr
    ahead = _ahead(nest, kernel, full_rows // mr, nest.j.extent // (nv * lanes))
    walk = _row_blocks if computed_left(nest.a) else _panels
    lines += walk(nest, kernel, pad, mr, nv, vec, dtype, ahead)
    if nest.units:
        lines.append(f"{pad}}}")
    return lines


def _row_blocks(nest: MatmulNest, kernel: KernelWriter, pad: str, mr: int, nv: int, vec: _Vec, dtype: str,
                ahead: _Ahead) -> list[str]:
    """A computed A's product, block of rows by block: each block computes its rows of A once
    (`precompute_a`) and walks every panel of B's columns with them."""
    i, n_i = nest.i.var, nest.i.extent
    full_rows = n_i - n_i % mr
    lines = []
    if full_rows:
        start = ahead.start(pad)  # (in a block of its own: a tile may hold several products)
        lines += [f"{pad}{{"] + start if start else []
        lines.append(f"{pad}for (int64_t {i} = 0; {i} < {full_rows}; {i} += {mr}) {{")
        lines += _row_block(nest, kernel, pad + "  ", mr, nv, vec, dtype, ahead)
        lines.append(f"{pad}}}" + ("}" if start else ""))
    if is_symbolic(n_i % mr):
        lines += _left_rows(i, full_rows, n_i, mr, pad,
                            lambda p, rows: _row_block(nest, kernel, p, rows, nv, vec, dtype))
    elif n_i % mr:
        lines.append(f"{pad}{{ const int64_t {i} = {full_rows};")
        lines += _row_block(nest, kernel, pad + "  ", n_i % mr, nv, vec, dtype)
        lines.append(f"{pad}}}")
    return lines


def _left_rows(i: str, full_rows, n_i, mr: int, pad: str, block) -> list[str]:
    """The rows left over the full blocks when their count (0 .. mr-1) is symbolic: a block of each
    power of two the count has (4, 2, 1 for mr = 8), so B is read at most three times for them, not
    once per row."""
    lines = [f"{pad}{{ int64_t st_i = {full_rows}; const int64_t st_left = {n_i} - st_i;"]
    p = 1 << ((mr - 1).bit_length() - 1) if mr > 1 else 0
    while p:
        lines.append(f"{pad}  if (st_left & {p}) {{ const int64_t {i} = st_i;")
        lines += block(pad + "    ", p)
        lines.append(f"{pad}    st_i += {p}; }}")
        p //= 2
    return lines + [f"{pad}}}"]


def _panels(nest: MatmulNest, kernel: KernelWriter, pad: str, mr: int, nv: int, vec: _Vec, dtype: str,
            ahead: _Ahead) -> list[str]:
    """A plain A's product, panel by panel: for each nv vectors of B's columns, every block of rows.

    A panel of B (k x nv vectors) stays in the nearest cache while all the blocks of rows read it,
    and the tile's rows of A (read where they are) in the next. With the rows outside, every block
    of 8 rows read the tile's whole k x columns of B again."""
    i, n_i = nest.i.var, nest.i.extent
    j, n_j = nest.j.var, nest.j.extent
    lanes = vec.lanes
    width = nv * lanes
    full_cols = n_j - n_j % width
    left_vectors = (n_j - full_cols) // lanes
    full_rows = n_i - n_i % mr
    span = KSpan(nest.k.extent, nest.k.extent)
    lines: list[str] = []

    def rows_of(p: str, vectors: int, prefetch: _Ahead) -> list[str]:
        out = []
        if full_rows:
            out.append(f"{p}for (int64_t {i} = 0; {i} < {full_rows}; {i} += {mr}) {{")
            out += _tile(nest, kernel, p + "  ", mr, vectors, vec, dtype, None, span, prefetch)
            out.append(f"{p}}}")
        if is_symbolic(n_i % mr):
            out += _left_rows(i, full_rows, n_i, mr, p,
                              lambda q, rows: _tile(nest, kernel, q, rows, vectors, vec, dtype, None, span))
        elif n_i % mr:
            out.append(f"{p}{{ const int64_t {i} = {full_rows};")
            out += _tile(nest, kernel, p + "  ", n_i % mr, vectors, vec, dtype, None, span)
            out.append(f"{p}}}")
        return out

    if full_cols:
        start = ahead.start(pad)
        lines += [f"{pad}{{"] + start if start else []
        lines.append(f"{pad}for (int64_t {j} = 0; {j} < {full_cols}; {j} += {width}) {{")
        lines += rows_of(pad + "  ", nv, ahead)
        lines.append(f"{pad}}}" + ("}" if start else ""))
    if is_symbolic(left_vectors):  # vectors left over a symbolic count: one at a time
        lines.append(f"{pad}for (int64_t {j} = {full_cols}; {j} + {lanes} <= {n_j}; {j} += {lanes}) {{")
        lines += rows_of(pad + "  ", 1, _Ahead())
        lines.append(f"{pad}}}")
    elif left_vectors:
        lines.append(f"{pad}{{ const int64_t {j} = {full_cols};")
        lines += rows_of(pad + "  ", left_vectors, _Ahead())
        lines.append(f"{pad}}}")
    start = full_cols + left_vectors * lanes
    if is_symbolic(start) or start < n_j:  # (symbolic: columns may be left over at some size)
        k = nest.k
        lines.append(f"{pad}for (int64_t {i} = 0; {i} < {n_i}; ++{i}) {{")
        lines.append(f"{pad}  for (int64_t {k.var} = 0; {k.var} < {k.extent}; ++{k.var}) {{")
        lines.append(f"{pad}    for (int64_t {j} = {start}; {j} < {n_j}; ++{j}) {{")
        lines.append(f"{pad}      {kernel.leaf(nest.acc)}")
        lines.append(f"{pad}    }}")
        lines.append(f"{pad}  }}")
        lines.append(f"{pad}}}")
    return lines


def block_vectors(vectors: int, registers: int) -> int:
    """Vectors of C across one register block. With 32 registers, 3 (8 rows: 24 sums, B's panel read
    once per 8 rows) unless that leaves a lone vector over that 4 (6 rows) does not: a little faster
    than 6 x 4 on the transformer blocks' products. With 16 registers, 2 (6 rows)."""
    if registers < 32 or vectors < MICRO_VECTORS:
        return max(1, min(registers // 8, vectors))
    return panel_vectors(vectors)  # (the cost model's panels and lowering/panels.py's are this wide)


def one_row_vectors(columns: int, vectors: int, vector_bytes: int, registers: int, element_bytes: int) -> int:
    """Vectors across the register block of a product of one row, whose block holds nothing but one sum
    per vector: the columns of one panel of the widest vectors (lowering/panels.py lays bound weights
    out so), whatever this machine's vectors, so the block reads a panel's rows whole and its weight
    streams in one contiguous pass. With 16 registers the rows' block is narrower than a panel, and a
    decoder step's weights were read in one pass per block, each touching a cache line of every few
    (8-lane vectors in a panel of 48 f32: three passes), well below a plain read's bandwidth
    (docs/perf/2026-11-28-decode.md, "evening"). `vectors` is the block's width otherwise."""
    lanes = PANEL_VECTOR_BYTES // element_bytes
    wide = panel_vectors(columns // lanes) if columns % lanes == 0 else MICRO_VECTORS
    span = wide * PANEL_VECTOR_BYTES // vector_bytes
    return max(1, min(columns * element_bytes // vector_bytes, max(vectors, span), registers - 4))


@dataclass(frozen=True)
class _Vec:
    """The vectors of one micro-kernel: their C type, their multiply-add, their lanes."""

    type: str
    fma: str
    lanes: int


@dataclass(frozen=True)
class _Ahead:
    """Prefetching the region of B the next nest reads while this one computes.

    A product reads its right operand B once from memory (in its first row block) and then from
    the cache; straight from memory, that first pass waits on it, longer than its multiply-adds
    take. Where the nest reads B from a global buffer as one contiguous
    region of R elements (a weight's block laid out by lowering/bind.py, one tile's chunk after
    the other), the next chunk or tile most likely reads the R elements after it: every full
    register block prefetches its share of them, a line every few iterations of its k loop, so
    that stream overlaps this nest's arithmetic. Nothing past the buffer's end is prefetched."""

    step: int = 0  # bytes of the next region per iteration of a block's k loop (0: no prefetching)
    start_at: str = ""  # C: the flat offset of this nest's region in its buffer
    buffer: str = ""  # C: the buffer
    region: int = 0  # elements
    span: int = 0  # elements the prefetches cover (the region, rounded up to whole steps)
    total: int = 0  # the buffer's elements
    across: int = 0  # full register blocks across a row block

    def start(self, pad: str) -> list[str]:
        """The address prefetching starts at: the next region, or the buffer's first where the
        next would end past the buffer's end (after the last tile's)."""
        if not self.step:
            return []
        at = f"({self.start_at})"
        return [(f"{pad}const char *st_ahead = (const char *)({self.buffer} + "
                 f"({at} + {self.region + self.span} <= {self.total} ? {at} + {self.region} : 0));")]

    def line(self, pad: str, i: str, mr: int, j: str, width: int, k: str, k_extent: int) -> str:
        if not self.step:
            return ""
        block = f"({i} / {mr} * {self.across} + {j} / {width})"
        return f"{pad}__builtin_prefetch(st_ahead + ({block} * {k_extent} + {k}) * {self.step}, 0, 2);"


def _ahead(nest: MatmulNest, kernel: KernelWriter, row_blocks: int, across: int) -> _Ahead:
    """The prefetching of the next region of B, where the nest reads B from a global buffer as one
    contiguous region and its full register blocks make enough iterations to cover it."""
    buffer = kernel.buffers[nest.b.buffer]
    k, j = nest.k, nest.j
    if buffer.scope != "global" or not row_blocks or not across:
        return _Ahead()
    if any(is_symbolic(x) for x in (row_blocks, across, k.extent, j.extent)):  # (a static stream's tuning)
        return _Ahead()
    flat = kernel.flat_index(nest.b.buffer, nest.b.index)
    if flat.coef(j.var) != 1 or flat.coef(k.var) != j.extent:  # (the units' loops are 0 throughout)
        return _Ahead()
    region = k.extent * j.extent
    size = dtype_bytes(buffer.dtype)
    iterations = row_blocks * across * k.extent
    step = -(-region * size // iterations)
    if step > 64:  # fewer iterations than lines: the nest is too short to hide the stream
        return _Ahead()
    start_at = kernel.ix(flat.substitute({k.var: Ix.constant(0), j.var: Ix.constant(0)}))
    total = 1
    for d in buffer.shape:
        total *= d
    span = -(-iterations * step // size)
    if span > total:  # no region after this one, nor room to prefetch the first again
        return _Ahead()
    return _Ahead(step, start_at, kernel.buffer_name(nest.b.buffer), region, span, total, across)


def _row_block(nest: MatmulNest, kernel: KernelWriter, pad: str, rows: int, nv: int, vec: _Vec, dtype: str,
               ahead: _Ahead = _Ahead()) -> list[str]:
    """Rows i .. i+rows-1: vector blocks across j, then the columns left over one by one; the full
    blocks prefetch `ahead`'s share of the next region of B."""
    j, n_j = nest.j.var, nest.j.extent
    lanes = vec.lanes
    width = nv * lanes
    full = n_j - n_j % width
    left_vectors = (n_j - full) // lanes
    span = KSpan(_a_chunk(nest, dtype), nest.k.extent)
    inner = pad + "  " if span.chunked else pad
    steps, k_end = span.steps, nest.k.extent
    lines = [f"{pad}for (int64_t st_k0 = 0; st_k0 < {k_end}; st_k0 += {steps}) {{",
             f"{inner}const int64_t st_k1 = st_k0 + {steps} < {k_end} ? st_k0 + {steps} : {k_end};"
             ] if span.chunked else []
    lines += precompute_a(nest, kernel, inner, rows, dtype, span)
    a = "a_pre" if computed_left(nest.a) else None
    if full:
        lines.append(f"{inner}for (int64_t {j} = 0; {j} < {full}; {j} += {width}) {{")
        lines += _tile(nest, kernel, inner + "  ", rows, nv, vec, dtype, a, span, ahead)
        lines.append(f"{inner}}}")
    if is_symbolic(left_vectors):  # vectors left over a symbolic count: one at a time
        lines.append(f"{inner}for (int64_t {j} = {full}; {j} + {lanes} <= {n_j}; {j} += {lanes}) {{")
        lines += _tile(nest, kernel, inner + "  ", rows, 1, vec, dtype, a, span)
        lines.append(f"{inner}}}")
    elif left_vectors:
        lines.append(f"{inner}{{ const int64_t {j} = {full};")
        lines += _tile(nest, kernel, inner + "  ", rows, left_vectors, vec, dtype, a, span)
        lines.append(f"{inner}}}")
    lines += [f"{pad}}}"] if span.chunked else []
    start = full + left_vectors * lanes
    if is_symbolic(start) or start < n_j:  # (symbolic: columns may be left over at some size)
        k = nest.k
        lines.append(f"{pad}for (int64_t {k.var} = 0; {k.var} < {k.extent}; ++{k.var}) {{")
        lines.append(f"{pad}  for (int64_t {j} = {start}; {j} < {n_j}; ++{j}) {{")
        for r in range(rows):
            leaf = _left_leaf(nest, kernel, r, dtype) if a and not span.chunked else kernel.leaf(nest.acc)
            lines.append(f"{pad}    {at_row(nest.i.var, r, leaf)}")
        lines.append(f"{pad}  }}")
        lines.append(f"{pad}}}")
    return lines


def _left_leaf(nest: MatmulNest, kernel: KernelWriter, r: int, dtype: str) -> str:
    """A leftover column's multiply-add of row r reading the row's precomputed A (a_pre, all of k), not
    computing A again per column: the same product and sum in the same order (a ReLU6'd A computed again
    ran its NaN-aware max and min as branches for every leftover column, k and row: MobileNetV2's
    24-column projections; figures: docs/perf/2026-11-28-vision.md)."""
    a, b = f"a_pre[{r}][{nest.k.var}]", kernel.expr(nest.b)
    x, y = (a, b) if nest.acc.value.args[0] is nest.a else (b, a)
    return f"{kernel.access(nest.acc.buffer, nest.acc.index)} += (({C_ELEMENT[dtype]})({x} * {y}));"


@dataclass(frozen=True)
class KSpan:
    """The k steps one pass of a row block's tiles takes: all of k, or (where a computed A's rows
    would not fit tuning.A_SCRATCH_BYTES for all of k) `steps` from the chunk loop's st_k0 to its st_k1 (a
    loop bound gcc's `omp simd` takes)."""

    steps: int
    extent: int  # all of k

    @property
    def chunked(self) -> bool:
        return self.steps < self.extent

    def loop(self, k: For) -> str:
        """The C head of a loop over these steps (`k` the nest's k loop)."""
        if not self.chunked:
            return f"for (int64_t {k.var} = 0; {k.var} < {k.extent}; ++{k.var})"
        return f"for (int64_t {k.var} = st_k0; {k.var} < st_k1; ++{k.var})"

    def at(self, k: For) -> str:
        """k's position in a_pre."""
        return f"{k.var} - st_k0" if self.chunked else k.var


def _a_chunk(nest: MatmulNest, dtype: str) -> int:
    """The k steps each pass over the tiles takes: all of k unless A is computed and MAX_ROWS rows of
    it would not fit tuning.A_SCRATCH_BYTES (a grouped Conv's windows: 6,144 k of 8 rows, 196 KB), then
    as many as fit. The accumulators go to their buffer and back once per pass."""
    size = dtype_bytes(dtype)
    if not computed_left(nest.a) or MAX_ROWS * nest.k.extent * size <= tuning.A_SCRATCH_BYTES:
        return nest.k.extent
    return tuning.A_SCRATCH_BYTES // (MAX_ROWS * size)


def precompute_a(nest: MatmulNest, kernel: KernelWriter, pad: str, rows: int, dtype: str, span: KSpan) -> list[str]:
    """A computed A (not a plain load) for these rows and the span's k, once, in vectorized loops.

    Inside the tile A is a scalar per row and k; a transcendental there would
    run one element at a time (and again for every block of columns).
    """
    if not computed_left(nest.a):
        return []
    k = nest.k
    lines = [f"{pad}{C_ELEMENT[dtype]} a_pre[{rows}][{span.steps}] __attribute__((aligned(64)));"]
    if not along_k(nest):  # rows inside: each k reads one place for all the rows (a conv's taps
        # first: k walks channels 32 KB apart, the rows neighbouring positions), not a line per row
        start, end = ("st_k0", "st_k1") if span.chunked else ("0", str(k.extent))
        cut = a_pieces.precompute_lines(kernel, nest.a, k.var, nest.i.var, rows, start, end, span.at(k), pad, at_row)
        if cut is not None:  # a concat of taps along k: one loop per piece
            return lines + cut
        a, heads = _k_by_digits(nest.a, k) if not span.chunked else (nest.a, [])
        if not heads:
            heads = [span.loop(k)]
        lines += [f"{pad}{head} {{" for head in heads]
        for r in range(rows):
            lines.append(f"{pad}  {at_row(nest.i.var, r, f'a_pre[{r}][{span.at(k)}] = {kernel.expr(a)};')}")
        return lines + [f"{pad}{'}' * sum(head.count('{') + 1 for head in heads)}"]
    decls, value = kernel.hoisted(nest.a, k.var)  # (what does not change along k: once a row, ahead)
    # one loop over the block's rows, not a copy of the vector loop per row: the copies ran no faster
    # and each was the compiler's to vectorize again (MobileNetV2's C: docs/perf/2026-11-29-compile-time.md)
    i = nest.i.var
    lines.append(f"{pad}for (int64_t st_r = 0; st_r < {rows}; ++st_r) {{ const int64_t st_row = {i} + st_r; "
                 f"{{ const int64_t {i} = st_row;")
    lines += [f"{pad}{{ {' '.join(decls)}"] if decls else []
    lines.append(f"{pad}#pragma omp simd")
    lines.append(f"{pad}{span.loop(k)} a_pre[st_r][{span.at(k)}] = {value};")
    lines += [f"{pad}}}"] if decls else []
    lines.append(f"{pad}}} }}")
    return lines


def _k_by_digits(a, k: For) -> tuple[object, list[str]]:
    """A computed A whose k is read through div and mod by a chain of divisors (a 7x7 stem's k over
    (channel, row, column): `k // 49`, `(k // 7) % 7`, `k % 7`, and the padding's selects on them) with
    k walked digit by digit (lowering/delinearize.py's `digits`): A's expression over the digits, no div
    or mod left, and the C heads of the digits' loops, k itself defined in the innermost; (a, []) where
    k has no such digits."""
    chain = digits(indices_in(a), k.var, k.extent)
    if chain is None:
        return a, []
    loops, at = split_digits(k.var, k.extent, chain)
    heads = [f"for (int64_t {name} = 0; {name} < {n}; ++{name})" for name, n in loops]
    heads[-1] += f" {{ const int64_t {k.var} = {at};"
    return map_indices(a, substituted(k.var, at, dict(loops))), heads


def along_k(nest: MatmulNest) -> bool:
    """Whether some load of a computed A reads consecutive elements along k (a row's values in a
    row-major matrix): then A is computed row by row in vector loops along k."""
    k = nest.k.var
    return any(ld.index and ld.index[-1].coef(k) == 1 for ld in loads(nest.a))


def computed_left(a) -> bool:
    """Whether A is precomputed: anything but a load the micro-kernel reads in place (machine.py's rule,
    which the cost model prices by)."""
    return not reads_left_in_place([a.index] if isinstance(a, Load) else None)


def _row_scope(i: str, r: int) -> tuple[str, str]:
    """C opening and closing a block in which loop variable `i` reads row i + r (shadowed), so any
    index of it (div/mod, a concat's select, a gather) reads that row, not only affine ones
    shifted; ('', '') for row 0."""
    if r == 0:
        return "", ""
    return f"{{ const int64_t st_row = {i} + {r}; {{ const int64_t {i} = st_row;", "} }"


def at_row(i: str, r: int, text: str) -> str:
    """`text` (C reading loop variable `i`) at row i + r."""
    enter, leave = _row_scope(i, r)
    return f"{enter} {text} {leave}" if enter else text


def _tile(nest: MatmulNest, kernel: KernelWriter, pad: str, rows: int, nv: int, vec: _Vec, dtype: str,
          a_pre: str | None, span: KSpan, ahead: _Ahead = _Ahead()) -> list[str]:
    """One rows x nv-vector block of C in registers across the whole k loop."""
    vt, lanes = vec.type, vec.lanes
    ct = C_ELEMENT[dtype]
    i, j, k = nest.i.var, nest.j.var, nest.k
    c = {(r, v): f"c{r}_{v}" for r in range(rows) for v in range(nv)}

    def c_addr(r: int, v: int) -> str:
        return "&" + kernel.access(nest.acc.buffer, shift_ix(nest.acc.index, {i: r, j: v * lanes}))

    lines = [f"{pad}{vt} {', '.join(f'{name} = *({vt} *){c_addr(r, v)}' for (r, v), name in c.items())};"]
    lines.append(f"{pad}{span.loop(k)} {{")
    if ahead.step:
        lines.append(ahead.line(pad + "  ", i, rows, j, nv * lanes, k.var, k.extent))
    for v in range(nv):
        b = _shift(nest.b, {j: v * lanes})
        lines.append(f"{pad}  {vt} b{v} = *({vt} *)&{kernel.expr(b)};")
    for r in range(rows):
        a = f"{a_pre}[{r}][{span.at(k)}]" if a_pre else kernel.expr(_shift(nest.a, {i: r}))  # an affine load
        lines.append(f"{pad}  {ct} a{r} = {a};")
        lines.append(f"{pad}  " + " ".join(f"{c[r, v]} = {vec.fma}(a{r}, b{v}, {c[r, v]});" for v in range(nv)))
    lines.append(f"{pad}}}")
    lines += [f"{pad}*({vt} *){c_addr(r, v)} = {name};" for (r, v), name in c.items()]
    return lines


def _shift(e, by: dict[str, int]):
    """`e` with each loop variable v read as v + by[v]."""
    return map_indices(e, lambda ix: shift_ix((ix,), by)[0])
