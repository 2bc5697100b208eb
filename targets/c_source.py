"""LoopProgram -> C: one function per kernel; its tile loops run on stitch's runtime.

Each top-level tile loop of a kernel becomes a tile function (`kernel_k0_tiles0(lo, hi, scratch,
buffers...)`: tiles lo..hi-1) that the kernel hands to the runtime (`st_run`, bound to
targets/runtime.c's pool by `stitch_bind`; without it, the calling thread runs every tile). A
kernel without tile loops is one tile. Inside a tile, the merged shared buffer and the large local
buffers are pointers into the thread's scratch block (heap memory the runtime owns, reused across
tiles and calls), small local buffers plain arrays. A buffer written before the tile loops (an
input held whole for the kernel) is allocated once, before them, and what follows a tile loop
runs on the caller after every tile is done. `stitch_main(void **buffers)` runs the kernels in
order on the global buffers the caller owns (parameters, intermediates, outputs, in the order
`buffer_order` gives) and returns 0, 1 when memory ran out, or 2 when a gather read an index out
of range (`stitch_error_site` / `stitch_error_value` say which and what); built with -DSTITCH_PROFILE it adds
each kernel's nanoseconds to `stitch_profile_ns`. Scalar ops follow numpy's definitions (NaN
propagation in maximum/minimum, integer wraparound via -fwrapv).
"""

from __future__ import annotations

import dataclasses
import math

from ..engine.ir.program import dtype_bytes
from ..engine.schedule.index import FloorDiv, Mod, affine
from ..lowering.liveness import buffers_read
from ..lowering.loops import (
    Accumulate,
    Buffer,
    Checked,
    For,
    Ix,
    Lit,
    Load,
    LoopKernel,
    LoopProgram,
    Op,
    Select,
    Store,
    accumulates_in_float,
    flat_index,
    index_vars,
    leaves,
    loads,
    map_indices,
    perfect_nest,
)
from ..lowering.matmul import contiguous_in, expr_dtype, flat_coef, match_matmul, shift_ix, through_units, uses_var
from ..lowering.overlap import Stages, scratch_layout, stages
from .c_matmul import render_matmul, vector_typedefs
from .c_passes import pipelined_passes

C_TYPES = {"f16": "_Float16", "f32": "float", "f64": "double", "i32": "int32_t", "i64": "int64_t", "bool": "bool"}

PRELUDE_HEAD = r"""#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef STITCH_LIBMVEC
/* glibc's vector math library: lets loops calling these vectorize */
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float logf(float);
#pragma omp declare simd notinbranch
double exp(double);
#pragma omp declare simd notinbranch
double log(double);
#endif
/* a gather's index: negative counts from the end; out of range is recorded (the first one wins)
   and reads element 0, and stitch_main returns after the kernel with the error. One slot for the
   whole library (defined beside stitch_main), whichever part the kernel was compiled in. */
extern int st_error_site __attribute__((visibility("hidden")));
extern long long st_error_value __attribute__((visibility("hidden")));
__attribute__((cold, noinline)) static void st_fail(int site, long long value) {
  int none = -1;
  if (__atomic_compare_exchange_n(&st_error_site, &none, site, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
    st_error_value = value;
}
static inline int64_t st_index(int64_t v, int64_t n, int site) {
  int64_t w = v < 0 ? v + n : v;
  if (__builtin_expect((uint64_t)w >= (uint64_t)n, 0)) { st_fail(site, v); return 0; }
  return w;
}
/* a * b + c inside the math helpers below, fused where the machine has a fast FMA (as libm's own
   polynomials are): they approximate a function, so their results are not defined op by op (the
   program's own arithmetic is never fused: -ffp-contract=off) */
#if defined(__FP_FAST_FMAF) && !defined(ST_NO_MADD)
#define ST_MADD(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define ST_MADD(a, b, c) ((a) * (b) + (c))
#endif
#define ST_CLAMP(v, lo, hi) ((v) < (lo) ? (lo) : (v) > (hi) ? (hi) : (v))
/* n elements from src (a row on the stack) to dst with non-temporal stores where the machine has
   them: element by element up to dst's first line boundary, then whole vectors (lines written
   without being read first), the rest one by one. ST_SFENCE, at the end of each tile, orders them
   before the tile is counted done. */
#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#define ST_SFENCE() _mm_sfence()
#else
#define ST_SFENCE() ((void)0)
#endif
#if defined(__AVX512F__) || defined(__AVX__)
#define ST_STREAM(T, BYTES, LOAD, STORE) \
  static inline void st_stream_##T(T *dst, const T *src, int64_t n) { \
    int64_t i = 0; \
    for (; i < n && ((uintptr_t)(dst + i) & (BYTES - 1)); ++i) dst[i] = src[i]; \
    for (; i + BYTES / (int64_t)sizeof(T) <= n; i += BYTES / sizeof(T)) STORE(dst + i, LOAD(src + i)); \
    for (; i < n; ++i) dst[i] = src[i]; }
#if defined(__AVX512F__)
ST_STREAM(float, 64, _mm512_loadu_ps, _mm512_stream_ps)
ST_STREAM(double, 64, _mm512_loadu_pd, _mm512_stream_pd)
#else
ST_STREAM(float, 32, _mm256_loadu_ps, _mm256_stream_ps)
ST_STREAM(double, 32, _mm256_loadu_pd, _mm256_stream_pd)
#endif
#else
static inline void st_stream_float(float *dst, const float *src, int64_t n) { memcpy(dst, src, n * sizeof *dst); }
static inline void st_stream_double(double *dst, const double *src, int64_t n) { memcpy(dst, src, n * sizeof *dst); }
#endif
#define st_stream_f32 st_stream_float
#define st_stream_f64 st_stream_double
/* expf without branches, so a loop of it vectorizes whatever its inputs (libmvec's vector expf
   leaves for a scalar path when any lane underflows, as a softmax's do): exp(x) = 2^n exp(r),
   n = round(x / ln 2), r = x - n ln 2 in two parts (Cody-Waite), exp(r) = 1 + r + r^2 q(r) with q
   a degree-4 minimax fit (relative error 3.6e-9 on |r| <= ln 2 / 2 with its f32 coefficients:
   Cephes' degree-7 polynomial, one multiply-add more, took 11.4 cycles a 16-lane vector against
   10.4), 2^n applied in two halves so subnormal results and overflow to inf come out right.
   Within 1 ulp of exp over every float (checked exhaustively at a stride, tests/test_c_math.py). */
static inline float st_expf(float x) {
  float c = x > -104.0f ? x : -104.0f;  /* two selects (a max, a min): nested, gcc made 4 compares */
  c = c < 89.0f ? c : 89.0f;
  float n = ST_MADD(c, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  float r = ST_MADD(n, -0.693359375f, c);
  r = ST_MADD(n, 2.12194440e-4f, r);
  float p = 1.3814540580e-3f;
  p = ST_MADD(p, r, 8.3687454462e-3f);
  p = ST_MADD(p, r, 4.1668388993e-2f);
  p = ST_MADD(p, r, 1.6666521132e-1f);
  p = ST_MADD(p, r, 4.9999994040e-1f);
  p = ST_MADD(p, r * r, r) + 1.0f;
  int32_t k = (int32_t)n, k1 = k >> 1, k2 = k - k1;
  int32_t b1 = (k1 + 127) << 23, b2 = (k2 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, 4);
  memcpy(&s2, &b2, 4);
  float y = p * s1 * s2;
  return x != x ? x : y;
}
/* erff without branches, for the same reason: both pieces computed, one chosen. |x| <= 1:
   x + x P(x^2); 1 < |x| < 4: 1 - exp(-x^2) Q(1/|x|) with Q ~ erfc(x) exp(x^2) (least-squares fits
   on Chebyshev nodes against math.erf); |x| >= 4: +-1 (erfc(4) is below half an ulp of 1).
   Within 1.5 ulp of erf over a stride of every float (tests/test_c_math.py). */
static inline float st_erff(float x) {
  float a = fabsf(x), z = x * x;
  float p = 7.8472591257e-05f;
  p = ST_MADD(p, z, -8.0081893228e-04f);
  p = ST_MADD(p, z, 5.1880988894e-03f);
  p = ST_MADD(p, z, -2.6853691100e-02f);
  p = ST_MADD(p, z, 1.1283582248e-01f);
  p = ST_MADD(p, z, -3.7612625567e-01f);
  p = ST_MADD(p, z, 1.2837916570e-01f);
  float small = ST_MADD(x, p, x);
  float b = a < 4.0f ? (a > 1.0f ? a : 1.0f) : 4.0f, u = 1.0f / b;
  float q = -3.9970248572e-02f;
  q = ST_MADD(q, u, 2.7477699135e-01f);
  q = ST_MADD(q, u, -8.3620737144e-01f);
  q = ST_MADD(q, u, 1.4613759589e+00f);
  q = ST_MADD(q, u, -1.5588216984e+00f);
  q = ST_MADD(q, u, 9.2098747738e-01f);
  q = ST_MADD(q, u, -7.8203016151e-02f);
  q = ST_MADD(q, u, -2.8272799365e-01f);
  q = ST_MADD(q, u, 2.5876790658e-03f);
  q = ST_MADD(q, u, 5.6376164740e-01f);
  q = ST_MADD(q, u, 2.4145731560e-05f);
  float large = a >= 4.0f ? 1.0f : 1.0f - st_expf(-(b * b)) * q;
  large = x < 0 ? -large : large;
  return a <= 1.0f || x != x ? small : large;
}
/* tanhf without branches, written op for op as st_tanhv_f32 (so the 16-lane loops and the scalar
   ones agree bit for bit): tanh|x| = d / (d + 2), d = expm1(2|x|) = 2^n (e + 1) - 1 with
   n = round(2|x| / ln 2), r = 2|x| - n ln 2 (Cody-Waite, in halves), e = expm1(r) = r + r^2 P(r)
   (a degree-4 fit, relative error 1.3e-8 on |r| <= ln 2 / 2); the sign put back. d / (d + 2) damps
   d's error where the result nears 1, and keeps it relative near 0. |x| is held at 9.1 (tanh rounds
   to 1 from 9.01), NaN passes. Within 2.5 ulp of tanh over a stride of every float
   (tests/test_c_math.py); glibc's 16-lane tanhf took 1.3x the time in a bias+GELU. */
static inline float st_tanhf(float x) {
  float a = fabsf(x);
  a = 9.1f < a ? 9.1f : a;
  float n = ST_MADD(a, 2.88539008177792681f, 12582912.0f) - 12582912.0f;
  float h = ST_MADD(n, -0.3466796875f, a);
  h = ST_MADD(n, 1.06097220e-4f, h);
  float r = h + h;
  float p = 1.3882515486e-3f;
  p = ST_MADD(p, r, 8.3665475249e-3f);
  p = ST_MADD(p, r, 4.1667200625e-2f);
  p = ST_MADD(p, r, 1.6666543484e-1f);
  p = ST_MADD(p, r, 4.9999997020e-1f);
  float e = ST_MADD(r * r, p, r);
  int32_t b = ((int32_t)n + 127) << 23;
  float s;
  memcpy(&s, &b, 4);
  float d = ST_MADD(s, e, s - 1.0f);
  return copysignf(d / (d + 2.0f), x);
}
"""

_FLOAT_HELPERS = """\
static inline {t} st_max_{d}({t} a, {t} b) {{ return a != a ? a : b != b ? b : a > b ? a : b > a ? b : __builtin_signbit(a) ? b : a; }}
static inline {t} st_min_{d}({t} a, {t} b) {{ return a != a ? a : b != b ? b : a < b ? a : b < a ? b : __builtin_signbit(a) ? a : b; }}
static inline {t} st_relu_{d}({t} a) {{ return a != a || a > 0 ? a : ({t})0; }}
static inline {t} st_where_{d}(bool c, {t} a, {t} b) {{ return c ? a : b; }}
static inline {t} st_pow_{d}({t} a, {t} b) {{ {t} r = pow{sfx}(a, b); return b == ({t})0.5 && (a == 0 || a == -INFINITY) ? ({t})(a == 0 ? 0 : INFINITY) : r; }}
static inline int32_t st_cast_i32_{d}({t} a) {{ float_t_{d} x = a; return x > {i32_lo} && x < {i32_hi} ? (int32_t)x : INT32_MIN; }}
static inline int64_t st_cast_i64_{d}({t} a) {{ float_t_{d} x = a; return x >= {i64_lo} && x < {i64_hi} ? (int64_t)x : INT64_MIN; }}
static inline {t} st_float_{d}_i32(int32_t a) {{ return a == 0 ? ({t})0 : ({t})a; }}
static inline {t} st_float_{d}_i64(int64_t a) {{ return a == 0 ? ({t})0 : ({t})a; }}
"""
_INT_HELPERS = """\
static inline {t} st_max_{d}({t} a, {t} b) {{ return a > b ? a : b; }}
static inline {t} st_min_{d}({t} a, {t} b) {{ return a < b ? a : b; }}
static inline {t} st_relu_{d}({t} a) {{ return a > 0 ? a : 0; }}
static inline {t} st_abs_{d}({t} a) {{ return a < 0 ? -a : a; }}
static inline {t} st_where_{d}(bool c, {t} a, {t} b) {{ return c ? a : b; }}
"""


def prelude() -> str:
    """Includes and one small function per (op, dtype) for the ops that are not one C operator.

    Functions, not macros: a macro repeating its argument's text (through __typeof__, say) doubles
    the preprocessed source at every level of nesting. `where` takes both arms evaluated (a load in
    only one arm becomes an AVX-512 masked load, which gcc 12.2 -O3 -march=native miscompiles).
    Float -> int casts are defined as numpy's on x86-64 (README, "Floating-point semantics"): truncate
    toward zero, and NaN or a value outside the integer type's range gives its minimum. pow is C99's:
    gcc's vectorizer turns pow(x, 0.5) into sqrt(x), which differs at -0.0 and -inf, so st_pow puts
    those two back."""
    out = [PRELUDE_HEAD]
    for d in ("f16", "f32", "f64"):
        # the range test runs in a type that holds every value of the source exactly
        wide = "double" if d == "f64" else "float"
        out.append(f"typedef {wide} float_t_{d};\n")
        out.append(_FLOAT_HELPERS.format(
            t=C_TYPES[d], d=d, sfx="" if d == "f64" else "f", i32_lo="-2147483649.0" if d == "f64" else "-2147483904.0f",
            i32_hi="2147483648.0" if d == "f64" else "2147483648.0f",
            i64_lo="-9223372036854775808.0" if d == "f64" else "-9223372036854775808.0f",
            i64_hi="9223372036854775808.0" if d == "f64" else "9223372036854775808.0f"))
    for d in ("i32", "i64"):
        out.append(_INT_HELPERS.format(t=C_TYPES[d], d=d))
    out.append("static inline bool st_where_bool(bool c, bool a, bool b) { return c ? a : b; }\n")
    return "".join(out)


PRELUDE = prelude()

_ARITH = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"less": "<", "greater": ">", "equal": "=="}
_FLOAT_FN = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf", "abs": "fabs"}


def buffer_order(program: LoopProgram) -> list[Buffer]:
    """The global buffers `stitch_main` takes, in order."""
    seen: dict[str, Buffer] = {}
    for b in program.params + program.output_buffers + program.intermediates:
        seen.setdefault(b.name, b)
    return list(seen.values())


# Generated C above this many bytes is split into parts, one compiler per core: gcc's time grows
# with the unit (a 500-op program: ~250 KB, ~10 s in one unit on this machine).
PART_BYTES = 120_000


def c_source(program: LoopProgram, vector_bytes: int = 32, max_parts: int = 1) -> tuple[str, int]:
    """The C translation unit and the number of parts it is dealt into; `vector_bytes` is the
    machine's vector width (it shapes the matmul blocks).

    Kernels over PART_BYTES of source in all are dealt into up to `max_parts` groups of about equal
    size, each under `#if STITCH_PART == i` (stitch_main in part 0), so the compiler can build the
    parts in parallel (`cpu.build`); compiled without STITCH_PART defined, the file is one unit."""
    globals_ = buffer_order(program)
    position = {b.name: i for i, b in enumerate(globals_)}
    kernels, uses = [], {}
    for k in program.kernels:
        # Each kernel takes the global buffers it touches, not all of them: a program of n kernels
        # would otherwise have n * n parameters (10,000 kernels: gigabytes of C).
        uses[k.name] = [globals_[i] for i in sorted(position[n] for n in buffers_named(k) if n in position)]
        used = {b.name: b for b in uses[k.name]}
        streamed = {name for name in program.outputs if name in used and used[name].nbytes >= STREAM_BYTES}
        kernels.append((k.name, _Kernel(k, used, vector_bytes, streamed).render(_signature(uses[k.name]))))
    parts = min(max_parts, sum(len(text) for _, text in kernels) // PART_BYTES + 1)
    out = [PRELUDE, vector_typedefs(vector_bytes), VECTOR_EXP if vector_bytes == 64 else "", RUNNER]
    out += [f"{_PROTO} int {_kernel_name(name)}({_signature(uses[name])});" for name, _ in kernels]
    for part, group in enumerate(_deal(kernels, parts)):
        out.append(_part_guard(part, parts))
        out += [text for _, text in group]
        out.append("#endif" if parts > 1 else "")
    out.append(_part_guard(0, parts))
    out.append(RUNNER_DEFINITION)
    out.append(PROFILE.replace("KERNELS", str(max(1, len(program.kernels)))))
    out.append(ERROR_SLOT)
    out.append("int stitch_main(void **b) {")
    out.append("  st_error_site = -1;")
    for i, b in enumerate(globals_):
        out.append(f"  {C_TYPES[b.dtype]} *{_ident(b.name)} = ({C_TYPES[b.dtype]} *)b[{i}];")
    for i, k in enumerate(program.kernels):
        out.append(f"  ST_CALL({i}, {_kernel_name(k.name)}({', '.join(_ident(b.name) for b in uses[k.name])}));")
        if program.checks:  # a gather read an index out of range: stop, the caller reports it
            out.append("  if (st_error_site >= 0) return 2;")
    out.append("  return 0;")
    out.append("}")
    out.append("#endif" if parts > 1 else "")
    return "\n".join(out) + "\n", parts


# st_expf on 16 lanes at once, for the loops `vector_loop` writes: the same reduction and polynomial,
# 2^n applied by vscalefps (exact, subnormal results and overflow to inf included) where st_expf
# multiplies by two halves; so the same results. gcc vectorizes st_expf itself, but cannot use
# vscalefps: the exponentials of a softmax took 1.45 cycles per element that way.
VECTOR_EXP = r"""#if defined(__AVX512F__)
static inline st_vf32 st_bcast_f32(float a) { return (st_vf32)_mm512_set1_ps(a); }
static inline st_vf32 st_expv_f32(st_vf32 xv) {
  __m512 x = (__m512)xv;
  /* NaN: maxps and minps give their second operand, so x's NaN goes through to the result (a blend
     choosing x there cost softmax 4% of its time) */
  __m512 c = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(c, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(12582912.0f)),
                           _mm512_set1_ps(12582912.0f));
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), c);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.3814540580e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3687454462e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1668388993e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666521132e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.9999994040e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  __m512 y = _mm512_scalef_ps(p, n);
  return (st_vf32)y;
}
/* the first n < 16 elements of src to dst with plain stores of 8, 4, 2 and 1 elements: a row's
   partial first and last lines, beside lines written with non-temporal stores (a masked store
   there made layernorm 512x64x256 four times slower on Zen 4, a copy loop became rep movs) */
static inline void st_store_part(float *dst, const float *src, int64_t n) {
  if (n & 8) { memcpy(dst, src, 32); dst += 8; src += 8; }
  if (n & 4) { memcpy(dst, src, 16); dst += 4; src += 4; }
  if (n & 2) { memcpy(dst, src, 8); dst += 2; src += 2; }
  if (n & 1) *dst = *src;
}
/* lanes from..to-1 of v to dst[from..to-1] */
static inline void st_store_lanes(float *dst, __m512 v, int64_t from, int64_t to) {
  float t[16];
  _mm512_storeu_ps(t, v);
  st_store_part(dst + from, t + from, to - from);
}
#ifndef ST_NO_VECTOR_EXP  /* -DST_NO_VECTOR_EXP: the scalar loops, for comparison */
#define ST_VECTOR_EXP 1
#endif
/* st_tanhf on 16 lanes: the same steps, 2^n by vscalefps (n <= 27: exact either way) */
static inline st_vf32 st_tanhv_f32(st_vf32 xv) {
  __m512 x = (__m512)xv;
  __m512 a = _mm512_min_ps(_mm512_set1_ps(9.1f), _mm512_abs_ps(x));  /* (NaN: minps gives its second operand) */
  __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(a, _mm512_set1_ps(2.88539008177792681f), _mm512_set1_ps(12582912.0f)),
                           _mm512_set1_ps(12582912.0f));
  __m512 h = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.3466796875f), a);
  h = _mm512_fmadd_ps(n, _mm512_set1_ps(1.06097220e-4f), h);
  __m512 r = _mm512_add_ps(h, h);
  __m512 p = _mm512_set1_ps(1.3882515486e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3665475249e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1667200625e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666543484e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.9999997020e-1f));
  __m512 e = _mm512_fmadd_ps(_mm512_mul_ps(r, r), p, r);
  __m512 s = _mm512_scalef_ps(_mm512_set1_ps(1.0f), n);
  __m512 d = _mm512_fmadd_ps(s, e, _mm512_sub_ps(s, _mm512_set1_ps(1.0f)));
  __m512 t = _mm512_div_ps(d, _mm512_add_ps(d, _mm512_set1_ps(2.0f)));
  return (st_vf32)_mm512_or_ps(t, _mm512_and_ps(x, _mm512_set1_ps(-0.0f)));
}
#endif
"""

# How tiles reach the runtime (targets/runtime.c's stitch_rt_run has this signature). Bound by
# stitch_bind when the library is loaded; compiled on its own, the file runs every tile on the
# calling thread with one scratch block per call.
ERROR_SLOT = """int st_error_site = -1;
long long st_error_value;
int stitch_error_site(void) { return st_error_site; }
long long stitch_error_value(void) { return st_error_value; }
"""

RUNNER = r"""typedef void (*st_tiles)(void *args, int64_t lo, int64_t hi, unsigned char *scratch);
typedef int (*st_runner)(st_tiles fn, void *args, int64_t tiles, int64_t grain, size_t scratch_bytes, int parallel);
__attribute__((visibility("hidden"))) extern st_runner st_run;
"""

RUNNER_DEFINITION = r"""static int st_run_here(st_tiles fn, void *args, int64_t tiles, int64_t grain, size_t scratch_bytes,
                       int parallel) {
  (void)grain; (void)parallel;
  unsigned char *scratch = aligned_alloc(64, (scratch_bytes + 64) / 64 * 64);
  if (!scratch) return 1;
  fn(args, 0, tiles, scratch);
  free(scratch);
  return 0;
}
st_runner st_run = st_run_here;
void stitch_bind(st_runner run) { st_run = run ? run : st_run_here; }
"""

# -DSTITCH_PROFILE: each kernel call timed (`stitch run --profile`); the caller zeroes and reads the sums.
PROFILE = r"""#ifdef STITCH_PROFILE
#include <time.h>
int64_t stitch_profile_ns[KERNELS];
static int64_t st_clock(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
#define ST_CALL(i, call) do { int64_t t_ = st_clock(); int e_ = (call); stitch_profile_ns[i] += st_clock() - t_; \
                              if (e_) return e_; } while (0)
#else
#define ST_CALL(i, call) do { if (call) return 1; } while (0)
#endif
"""


_PROTO = '__attribute__((visibility("hidden")))'


def _signature(buffers: list[Buffer]) -> str:
    return ", ".join(f"{C_TYPES[b.dtype]} *restrict {_ident(b.name)}" for b in buffers) or "void"


def buffers_named(node) -> set[str]:
    """The buffer names a kernel's statements name anywhere (a load, a store, an index), whatever IR
    nodes hold them: any dataclass with a `buffer` field, searched through fields, lists and tuples."""
    names: set[str] = set()
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            if isinstance(getattr(x, "buffer", None), str):
                names.add(x.buffer)
            stack.extend(getattr(x, f.name) for f in dataclasses.fields(x) if f.name != "allocs")
    return names


def _signature(buffers: list[Buffer]) -> str:
    return ", ".join(f"{C_TYPES[b.dtype]} *restrict {_ident(b.name)}" for b in buffers) or "void"


def _part_guard(part: int, parts: int) -> str:
    return f"#if !defined(STITCH_PART) || STITCH_PART == {part}" if parts > 1 else ""


def _deal(kernels: list[tuple[str, str]], parts: int) -> list[list[tuple[str, str]]]:
    """Kernels into `parts` groups, largest source first into the smallest group (program order kept)."""
    groups: list[list[int]] = [[] for _ in range(max(parts, 1))]
    sizes = [0] * len(groups)
    for i in sorted(range(len(kernels)), key=lambda i: -len(kernels[i][1])):
        g = sizes.index(min(sizes))
        groups[g].append(i)
        sizes[g] += len(kernels[i][1])
    return [[kernels[i] for i in sorted(g)] for g in groups]


def _ident(name: str) -> str:
    return "b_" + name


def _kernel_name(name: str) -> str:
    return "kernel_" + name


class _Kernel:
    def __init__(self, kernel: LoopKernel, globals_: dict[str, Buffer], vector_bytes: int,
                 streamed: set[str] = frozenset()):
        self.k = kernel
        self.vector_bytes = vector_bytes
        self.streamed = streamed  # outputs written with non-temporal stores (`stream`)
        self.globals = globals_
        self.buffers = {b.name: b for b in kernel.allocs}
        self.buffers.update(globals_)
        self.lines: list[str] = []
        self.frame: int | None = None  # inside a tile function: the scratch bytes it uses so far

    def render(self, signature: str) -> str:
        """The tile functions, then the kernel: it allocates the buffers held for the whole kernel,
        runs its statements outside tile loops itself and hands each tile loop to the runtime."""
        name = _kernel_name(self.k.name)
        outer = [b for b in self.k.allocs if self._written_outside_tiles(b.name)]
        held = list(self.globals.values()) + outer
        params = signature + "".join(f", {C_TYPES[b.dtype]} *restrict {_ident(b.name)}" for b in outer)
        self.lines.append(f"struct {name}_args {{ {' '.join(f'{C_TYPES[b.dtype]} *{_ident(b.name)};' for b in held)} }};")
        tiled = any(_is_tile_loop(s) for s in self.k.body)
        body, loops = [], 0
        for s in self.k.body if tiled else [None]:  # None: the whole body, one tile
            if s is not None and not _is_tile_loop(s):
                body += self.kernel_statement(s)
                continue
            body.append(self.tile_loop(f"{name}_tiles{loops}", s, params, [_ident(b.name) for b in held],
                                       {b.name for b in outer}))
            loops += 1
        head = [f"{_PROTO} int {name}({signature}) {{"]
        head += [f"  {C_TYPES[b.dtype]} *{_ident(b.name)} = ({C_TYPES[b.dtype]} *)malloc({max(b.nbytes, 1)});"
                 for b in outer]
        if outer:
            head.append(f"  if ({' || '.join('!' + _ident(b.name) for b in outer)}) goto fail;")
        head.append(f"  struct {name}_args a = {{{', '.join(_ident(b.name) for b in held)}}};")
        frees = [f"  free({_ident(b.name)});" for b in outer]
        tail = frees + ["  return 0;", "fail:"] + frees + ["  return 1;", "}"]
        return "\n".join(self.lines + head + body + tail) + "\n"

    def tile_loop(self, fn: str, loop: For | None, params: str, names: list[str], declared: set[str]) -> str:
        """Emit the tile function `fn` and its runner; the kernel's line handing the tiles to the runtime
        (in parallel when the loop has PARALLEL_WORK, `GRAIN_WORK` at least per claim)."""
        st = self.stages(loop) if self.k.pipelined and loop is not None else None
        scratch_bytes = self.tile_function(fn, loop, params, declared, st)
        self.lines.append(f"static void {fn}_run(void *args, int64_t lo, int64_t hi, unsigned char *scratch) {{")
        self.lines.append(f"  struct {_kernel_name(self.k.name)}_args *a = args;")
        self.lines.append(f"  {fn}(lo, hi, scratch, {', '.join('a->' + n for n in names)});")
        self.lines.append("}")
        tiles, work = (loop.extent, _work(loop)) if loop is not None else (1, 0)
        grain = max(1, -(-GRAIN_WORK * tiles // max(work, 1)))
        if st is not None:  # a claim's first reads and last writes run alone
            inner = math.prod(x.extent for x in st.nest[1:])
            grain = max(grain, min(-(-PIPELINE_CLAIM // inner), max(1, tiles // PIPELINE_CLAIMS)))
        return f"  if (st_run({fn}_run, &a, {tiles}, {grain}, {scratch_bytes}, {int(work >= PARALLEL_WORK)})) goto fail;"

    def kernel_statement(self, s) -> list[str]:
        """A statement outside the tile loops (copying an input held for the kernel), run by the caller."""
        mark = len(self.lines)
        self.block([s], 1)
        lines = self.lines[mark:]
        del self.lines[mark:]
        return lines

    def tile_function(self, fn: str, loop: For | None, params: str, declared: set[str], st: Stages | None) -> int:
        """`fn(lo, hi, st_scratch, buffers...)` running tiles lo..hi-1 of `loop` (None: the kernel's
        whole body, one tile), pipelined in the stages `st` when given; returns the scratch bytes
        it needs."""
        self.lines.append(f"static void {fn}(int64_t lo, int64_t hi, unsigned char *restrict st_scratch, {params}) {{")
        self.frame = 0
        if loop is None:
            self.lines.append("  (void)lo; (void)hi;")
            self.scratch("  ", set(declared))
            self.block(self.k.body, 1)
        elif st is not None:
            self.prefetch(loop, (), "  ")
            self.pipelined_tiles(st, declared)
        else:
            self.prefetch(loop, (), "  ")
            self.lines.append(f"  for (int64_t {loop.var} = lo; {loop.var} < hi; ++{loop.var}) {{")
            self.scratch("    ", set(declared))
            self.block(loop.body, 2, (loop,))
            self.lines.append("  }")
        if self.streamed:
            self.lines.append("  ST_SFENCE();")
        self.lines.append("}")
        used, self.frame = self.frame, None
        return used

    def stages(self, loop: For) -> Stages:
        st = stages(loop, set(self.buffers) - set(self.globals))
        assert st is not None, f"{self.k.name}: marked pipelined, but a tile loop has no stages"
        return st

    def pipelined_tiles(self, st: Stages, declared: set[str]) -> None:
        """Tiles lo..hi-1 (with the tile loops inside the claimed one: tiles of all of them, `st_t`) as
        a two-stage pipeline (lowering/overlap.py): each step runs the statements before tile st_t's
        first read, that read in one loop with tile st_t-1's last write, then the rest of tile st_t;
        tile st_t's buffers are copy st_t % 2 of the tile's scratch block."""
        copy, offsets = scratch_layout(self.k)
        base = self.reserve(2 * copy)
        inner = math.prod(x.extent for x in st.nest[1:])
        first, end = (f"lo * {inner}", f"hi * {inner}") if inner > 1 else ("lo", "hi")
        add = self.lines.append

        def tile(k: str, pad: str) -> None:  # open a block with tile k's loop variables and buffers
            add(f"{pad}{{ const int64_t st_k = {k};")
            stride = inner
            for i, x in enumerate(st.nest):
                if i == 0:
                    value = f"st_k / {inner}" if inner > 1 else "st_k"
                else:
                    stride //= x.extent
                    value = f"st_k / {stride} % {x.extent}" if stride > 1 else f"st_k % {x.extent}"
                add(f"{pad}  const int64_t {x.var} = {value};")
            for b in self.k.allocs:
                if b.name not in declared:
                    add(f"{pad}  {C_TYPES[b.dtype]} *{_ident(b.name)} = ({C_TYPES[b.dtype]} *)"
                        f"(st_scratch + {base} + (st_k & 1) * {copy} + {offsets[b.name]});")

        def run(k: str, stmts, pad: str) -> None:
            tile(k, pad)
            self.block(list(stmts), len(pad) // 2 + 1, st.nest)
            add(f"{pad}}}")

        head, tail = st.head, st.tail
        add(f"  for (int64_t st_t = {first}; st_t <= {end}; ++st_t) {{")
        if st.before:
            add(f"    if (st_t < {end})")
            run("st_t", st.before, "      ")
        add(f"    if (st_t > {first} && st_t < {end}) {{")
        add(f"      for (int64_t {tail.var} = 0; {tail.var} < {tail.extent}; ++{tail.var}) {{")
        for k, loop in (("st_t - 1", tail), ("st_t", head)):
            tile(k, "        ")
            if loop.var != tail.var:
                add(f"          const int64_t {loop.var} = {tail.var};")
            self.block(loop.body, 5, st.nest + (loop,))
            add("        }")
        add("      }")
        add(f"    }} else if (st_t < {end})")  # the claim's first tile: its reads alone
        run("st_t", [head], "      ")
        add(f"    else if (st_t > {first})")  # its last: the writes alone
        run("st_t - 1", [tail], "      ")
        if st.middle:
            add(f"    if (st_t < {end})")
            run("st_t", st.middle, "      ")
        add("  }")

    def _written_outside_tiles(self, name: str) -> bool:
        return any(not _is_tile_loop(s) and name in {leaf.buffer for leaf in leaves([s])} for s in self.k.body)

    def reserve(self, nbytes: int) -> int:
        """Room for `nbytes` in this tile's scratch block: its offset."""
        at = self.frame
        self.frame = at + (nbytes + 63) // 64 * 64
        return at

    def scratch(self, pad: str, declared: set[str]) -> None:
        """Declare the per-tile buffers: the merged shared buffer and the local ones larger than
        LOCAL_STACK_BYTES in all are in the thread's scratch block, the other locals on the stack."""
        merged = [b for b in self.k.allocs if b.scope == "shared" and b.name not in declared]
        size = self.k.merged_bytes or sum(b.nbytes for b in merged)
        base = self.reserve(size) if merged else 0
        offset = 0
        for b in merged:
            at = self.k.offsets.get(b.name, offset)
            offset = at + b.nbytes
            self.lines.append(f"{pad}{C_TYPES[b.dtype]} *{_ident(b.name)} = "
                              f"({C_TYPES[b.dtype]} *)(st_scratch + {base + at});")
        stack = 0
        for b in self.k.allocs:
            if b.scope == "local" and b.name not in declared:
                n = max(1, b.nbytes // dtype_bytes(b.dtype))
                if stack + b.nbytes <= LOCAL_STACK_BYTES:
                    stack += b.nbytes
                    self.lines.append(f"{pad}{C_TYPES[b.dtype]} {_ident(b.name)}[{n}] __attribute__((aligned(64)));")
                else:
                    self.lines.append(f"{pad}{C_TYPES[b.dtype]} *{_ident(b.name)} = "
                                      f"({C_TYPES[b.dtype]} *)(st_scratch + {self.reserve(b.nbytes)});")
        declared.update(b.name for b in self.k.allocs)

    def block(self, stmts, depth: int, loops: tuple[For, ...] = ()) -> None:
        pad = "  " * depth
        stmts = list(stmts)
        i = 0
        while i < len(stmts):
            s = stmts[i] = self.read_order(stmts[i])
            if (taken := self.summed_row(stmts, i, pad, loops)):
                i += taken
                continue
            i += 1
            if (self.split(s, pad) or self.matmul(s, pad) or self.f16_matmul(s, pad) or self.column_sums(s, pad)
                    or self.simd_reduce(s, pad, loops) or self.vector_loop(s, pad, loops) or self.stream(s, pad)):
                continue
            if isinstance(s, For) and (self.pipelined_rows(s, pad, loops)
                                       or pipelined_passes(self, s, pad, loops, C_TYPES, _exponentials)):
                continue
            if isinstance(s, For):
                self.prefetch(s, loops, pad)
                self.lines.append(f"{pad}for (int64_t {s.var} = 0; {s.var} < {s.extent}; ++{s.var}) {{")
                self.block(s.body, depth + 1, loops + (s,))
                self.lines.append(f"{pad}}}")
            else:
                self.lines.append(pad + self.leaf(s))

    def read_order(self, s):
        """`s`, or its two loops swapped where it is `for a { for b { out[..] = f(x[..]) } }` storing
        along b what it reads along a (a transpose; other reads may be along b where they do not
        vary with a, as a bias) and f has a transcendental op: then the
        inner loop reads contiguously and the C compiler vectorizes f, storing lanes one by one;
        reading along b, a gather, it ran f one element at a time (wav2vec2's erf over a
        transposed [4103, 512]: 24.6 -> 4.2 ms). Each iteration writes its own element and reads
        no element another writes, so the order is free."""
        if not (isinstance(s, For) and s.kind == "serial" and len(s.body) == 1):
            return s
        inner = s.body[0]
        if not (isinstance(inner, For) and inner.kind == "serial" and len(inner.body) == 1
                and isinstance(inner.body[0], Store)):
            return s
        leaf = inner.body[0]
        if not _computes(leaf.value, TRANSCENDENTAL) or any(ld.buffer == leaf.buffer for ld in loads(leaf.value)):
            return s
        a, b = s.var, inner.var
        reads = [ld for ld in loads(leaf.value) if ld.index]
        if not (contiguous_in(leaf.index, b) and uses_var(leaf.index, a)
                and not any(contiguous_in(ld.index, b) and uses_var(ld.index, a) for ld in reads)
                and any(contiguous_in(ld.index, a) and uses_var(ld.index, b) for ld in reads)):
            return s
        return For(b, inner.extent, "serial", [For(a, s.extent, "serial", [leaf])])

    def summed_row(self, stmts: list, at: int, pad: str, loops: tuple[For, ...]) -> int:
        """How many of `stmts` from `at` on were written as one loop and what it moved: a row stored
        to an on-chip f32 buffer, written in 16-lane vectors (`vector_expr`), and a later sum over
        that row of values reading the row at the element the sum is on (softmax's denominator, a
        layer norm's mean and sum of squared deviations). Between them may stand the statement
        setting the sum's start, written first, and statements that neither write what the two
        loops read or write nor read the sum (a copy of the row to an output), written after.
        Each vector of terms is added to a 16-lane sum as the row's vector is stored, the last
        iterations one by one, in the order `vector_sum` adds its exponentials: the row is not
        walked again (softmax 0.92x the time, one and two threads). gcc's vectorizer leaves such a
        fused loop scalar where the loops are fused before it (lowering/fuse.py: a float sum needs
        its reduction pragma), so it is done here. Rows of exponentials keep ST_NO_VECTOR_EXP's
        scalar form."""
        row = self._summed_row(stmts, at)
        if row is None:
            return 0
        self.block(row.start, len(pad) // 2, loops)  # the sum's start, ahead of the row
        self.lines += self._summed_row_lines(row, pad, loops)
        self.block(row.after, len(pad) // 2, loops)  # (they read the row whole)
        return row.taken

    def _summed_row(self, stmts: list, at: int) -> "_SummedRow | None":
        """`summed_row`'s shape at `stmts[at]`, or None."""
        if self.vector_bytes != 64:
            return None
        row = stmts[at]
        leaf = self.row_store(row)
        if (leaf is None or row.kind != "serial" or row.extent < 16 or self.buffers[leaf.buffer].dtype != "f32"
                or leaf.buffer in self.streamed):
            return None
        end = at + 1
        while end < min(len(stmts), at + 1 + SUMMED_ROW_BETWEEN) and not (
                isinstance(stmts[end], For) and stmts[end].kind == "reduce"):
            end += 1
        if end == len(stmts):
            return None
        total, between = stmts[end], stmts[at + 1:end]
        if not (isinstance(total, For) and total.kind == "reduce" and total.extent == row.extent
                and len(total.body) == 1 and isinstance(total.body[0], Accumulate)):
            return None
        acc = total.body[0]
        term = map_indices(acc.value, lambda ix: ix.substitute({total.var: Ix.var(row.var)}))
        read = {ld.buffer for e in (leaf.value, term) for ld in loads(e)}
        if (acc.op != "sum" or self.buffers[acc.buffer].dtype != "f32" or acc.buffer == leaf.buffer
                or any(total.var in index_vars(ix) for ix in acc.index) or acc.buffer in read
                or leaf.buffer not in {ld.buffer for ld in loads(term)}
                or any(ld.buffer == leaf.buffer and ld.index != leaf.index for ld in loads(term))):
            return None
        start = [x for x in between if isinstance(x, Store) and x.buffer == acc.buffer]
        after = [x for x in between if not any(x is y for y in start)]
        moved = list(leaves(after))
        if (len(start) > 1 or any(leaf.buffer in buffers_read(x) for x in start)
                or any(x.buffer in read | {leaf.buffer, acc.buffer} or acc.buffer in buffers_read(x) for x in moved)
                or any(x.buffer in buffers_read(y) for x in moved for y in start)):
            return None
        value, terms = self.vector_expr(leaf.value, row.var), self.vector_expr(term, row.var)
        if value is None or terms is None:
            return None
        stored = self.lanes_at(leaf.buffer, leaf.index)
        if stored not in terms:
            return None
        terms = terms.replace(stored, "st_e")  # the vector just stored, not loaded again (softmax 1.16x the time so)
        return _SummedRow(row, leaf, acc, term, tuple(start), tuple(after), value, terms, end - at + 1)

    def _summed_row_lines(self, row: "_SummedRow", pad: str, loops: tuple[For, ...], step: str = "") -> list[str]:
        """The summed row's loop; `step` runs first at each 16-lane step (`pipelined_rows`)."""
        exponentials = _exponentials(row.leaf.value) or _exponentials(row.term)
        ahead = self.next_row_prefetch((row.leaf.value, row.term), row.loop, loops) if exponentials else ""
        stored = self.lanes_at(row.leaf.buffer, row.leaf.index)
        return _lane_sum(pad, row.loop, self.access(row.acc.buffer, row.acc.index), row.terms, self.expr(row.term),
                         exponentials, f"{step}{ahead}st_vf32 st_e = {row.value}; {stored} = st_e; ",
                         f"{self.leaf(row.leaf)} ")

    def pipelined_rows(self, s: For, pad: str, loops: tuple[For, ...]) -> bool:
        """A loop over rows whose body ends in a summed row of exponentials (`summed_row`) and a row
        of the output that reads, of what the body writes, only that row at its element and its sum
        (softmax's `e / sum(e)`, rows a multiple of 16 long): each row's division runs in the loop
        of the next row's exponentials, a vector of each a step, the row's sum kept from the step
        before. The division takes the divider (about 6 cycles a 16-lane vector on Zen 4), the
        exponentials the multiply-add and add pipes: one after the other they took about 11 + 6
        cycles a vector, side by side softmax 4096x1024 ran in 0.83x the time at 2 threads and
        0.81x at 1. The next row's exponentials overwrite the row in place, each vector after the
        division has read it. The division's stores run `st_k` elements ahead where they would
        otherwise fall just ahead of the exponentials' reads modulo 4 KiB (ROW_STORE_GAP). A
        streamed output's whole lines take non-temporal stores and its partial first and last
        lines plain ones, as `vector_loop` writes them; another output's rows unaligned stores.
        Each element is computed as before: the same bits. Where ST_VECTOR_EXP is not defined the
        rows run one after the other."""
        if not (self.vector_bytes == 64 and s.kind == "serial" and s.extent >= 2 and len(s.body) >= 2):
            return False
        body, tail = list(s.body), s.body[-1]
        out = self.row_store(tail)
        if out is None or self.buffers[out.buffer].dtype != "f32" or tail.kind != "serial" or tail.extent % 16:
            return False
        found = [(at, r) for at in range(len(body) - 1) if (r := self._summed_row(body, at)) is not None]
        if not found or found[-1][0] + found[-1][1].taken != len(body) - 1:
            return False
        at, row = found[-1]
        n = row.loop.extent
        if tail.extent != n or not (_exponentials(row.leaf.value) or _exponentials(row.term)):
            return False
        # what the division reads of the body: the summed row at the element it is on, and the sum
        value = map_indices(out.value, lambda ix: ix.substitute({tail.var: Ix.var(row.loop.var)}))
        written = {x.buffer for x in leaves(body[:-1])}
        if (any(ld.buffer == row.leaf.buffer and ld.index != row.leaf.index for ld in loads(value))
                or any(ld.buffer in written - {row.leaf.buffer, row.acc.buffer} for ld in loads(value))
                or any(s.var in index_vars(ix) for ix in (*row.leaf.index, *row.acc.index))
                or out.buffer in written or any(out.buffer in buffers_read(x) for x in leaves(body[:-1]))
                or any(x.buffer == row.leaf.buffer for x in leaves(body[:at]))):  # (it runs beside the division)
            return False
        sum_at = self.access(row.acc.buffer, row.acc.index)
        previous = map_indices(value, lambda ix: shift_ix((ix,), {s.var: -1})[0])
        division = self.vector_expr(previous, row.loop.var)
        if division is None or sum_at not in division:
            return False
        division = division.replace(sum_at, "st_sum")
        reads = self.row_reads((row.leaf.value,), row.loop.var)
        v, i = row.loop.var, s.var
        depth = len(pad) // 2
        inner = loops + (s,)
        self.lines.append(f"{pad}#if defined(ST_VECTOR_EXP)")
        self.lines.append(f"{pad}{{ float st_sum = 0;")
        self.lines.append(f"{pad}  for (int64_t {i} = 0; {i} <= {s.extent}; ++{i}) {{")
        self.lines.append(f"{pad}    #define ST_ROW({v}) ((__m512)({division}))")
        start = self.row_start(dataclasses.replace(out, index=shift_ix(out.index, {s.var: -1})), tail.var)
        # (the previous row's output: row -1 is never written, its address never formed but here)
        self.lines.append(f"{pad}    float *st_o = {i} > 0 ? &{start} : 0;")
        # a streamed output's whole lines take non-temporal stores, its partial first and last lines
        # plain ones (as `vector_loop` writes them); another output's rows plain unaligned stores
        streamed = out.buffer in self.streamed
        store = "_mm512_stream_ps" if streamed else "_mm512_storeu_ps"
        self.lines.append(f"{pad}    int64_t st_h = " + ("(int64_t)((-(uintptr_t)st_o & 63) >> 2)" if streamed else "0")
                          + ", st_k = 0;")
        if reads:
            first = self.access(reads[0].buffer, _at(reads[0].index, v, 0))
            self.lines.append(f"{pad}    if ({i} > 0 && {i} < {s.extent}) {{ int64_t st_d = (int64_t)(((uintptr_t)(st_o + st_h) - "
                              f"(uintptr_t)&{first}) & 4095);")
            # (st_d + 64: a store up to 63 bytes behind the read overlaps it, and comes first in the step)
            self.lines.append(f"{pad}      st_d = (st_d + 64) & 4095; st_k = st_d < {ROW_STORE_GAP + 64} ? ({ROW_STORE_GAP + 64} - st_d + 63) / 64 * 16 : 0; "
                              f"if (st_k > {n - 16}) st_k = {n - 16}; }}")  # (the last line's part: in the loop)
        self.lines.append(f"{pad}    if ({i} > 0) {{")
        self.lines.append(f"{pad}      if (st_h) st_store_lanes(st_o, ST_ROW(0), 0, st_h);")
        self.lines.append(f"{pad}      for (int64_t {v} = st_h; {v} < st_h + ({i} < {s.extent} ? st_k : {n}) && {v} + 16 <= {n}; {v} += 16) "
                          f"{store}(st_o + {v}, ST_ROW({v}));")
        self.lines.append(f"{pad}      if ({i} == {s.extent} && st_h) st_store_lanes(st_o + {n - 16}, ST_ROW({n - 16}), st_h, 16); }}")
        self.lines.append(f"{pad}    if ({i} < {s.extent}) {{")
        self.block(body[:at], depth + 3, inner)
        self.block(row.start, depth + 3, inner)
        step = (f"if ({i} > 0) {{ int64_t st_q = st_h + st_k + {v}; "
                f"if (st_q + 16 <= {n}) {store}(st_o + st_q, ST_ROW(st_q)); "
                f"else if (st_h && st_q == {n - 16} + st_h) st_store_lanes(st_o + {n - 16}, ST_ROW({n - 16}), st_h, 16); }} ")
        self.lines += self._summed_row_lines(row, pad + "      ", inner, step)
        self.block(row.after, depth + 3, inner)
        self.lines.append(f"{pad}      st_sum = {sum_at}; }}")
        self.lines.append(f"{pad}    #undef ST_ROW")
        self.lines.append(f"{pad}  }} }}")
        self.lines.append(f"{pad}#else")
        self.lines.append(f"{pad}for (int64_t {i} = 0; {i} < {s.extent}; ++{i}) {{")
        self.block(s.body, depth + 1, inner)
        self.lines.append(f"{pad}}}")
        self.lines.append(f"{pad}#endif")
        return True

    def column_sums(self, s, pad: str) -> bool:
        """A loop over rows of on-chip f32 buffers whose body is row loops over the same columns,
        each writing its row in place or adding it into a sum over the rows (a layer norm over the
        first axis: its tile's deviations and their squares' sum), written with the columns
        outside: for each block of 16 columns, the rows in turn, each sum's 16 lanes in a register
        (gcc keeps them in memory, a load and a store a row). Each element is still updated in
        the order of the rows, so the results are the same bit for bit. Legal where no two columns
        touch one element: every access is contiguous in the columns and its rows lie at least a
        row of columns apart (or it does not move with the rows), a written buffer is read only
        at the element being written, and a sum's buffer is read by no statement of the loop
        (layernorm_large 0.95-0.96x the time at 2 threads, 0.92x at 1)."""
        if self.vector_bytes != 64 or not (isinstance(s, For) and s.kind in ("serial", "reduce") and s.extent > 1):
            return False
        rows, col, body = s.var, None, []
        for x in s.body:
            units: list[str] = []
            inner = through_units(x, units)
            if not (isinstance(inner, For) and inner.kind == "serial" and len(inner.body) == 1
                    and isinstance(inner.body[0], (Store, Accumulate))):
                return False
            col = col or inner
            if inner.extent != col.extent:
                return False
            rename = {inner.var: Ix.var(col.var)} | {u: Ix.constant(0) for u in units}
            body.append(map_indices(inner.body[0], lambda ix, m=rename: ix.substitute(m)))
        n, c = col.extent, col.var
        if n % 16 or any(_exponentials(leaf.value) for leaf in body):
            return False
        sums = [leaf for leaf in body if isinstance(leaf, Accumulate)]
        written = {leaf.buffer: leaf.index for leaf in body if isinstance(leaf, Store)}
        if not sums or len({leaf.buffer for leaf in sums}) != len(sums) or set(written) & {x.buffer for x in sums}:
            return False

        def columnwise(buffer: str, index) -> bool:
            b = self.buffers[buffer]
            if buffer in self.globals or b.dtype != "f32" or not all(affine(ix) for ix in index):
                return False
            step = flat_coef(index, rows, b.shape)
            return flat_coef(index, c, b.shape) == 1 and (step == 0 or abs(step) >= n)

        for leaf in body:
            reads = list(loads(leaf.value))
            if (not columnwise(leaf.buffer, leaf.index) or any(not columnwise(ld.buffer, ld.index) for ld in reads)
                    or any(ld.buffer in written and ld.index != written[ld.buffer] for ld in reads)
                    or any(ld.buffer == x.buffer for ld in reads for x in sums)
                    or isinstance(leaf, Accumulate) and (leaf.op != "sum" or leaf.unit != "vector"
                                                         or flat_coef(leaf.index, rows, self.buffers[leaf.buffer].shape))):
                return False
        # up to four blocks of 16 columns a pass over the rows: each sum's chain waits on an add's
        # latency a row, four chains keep the adder busy, each statement written for every block in
        # turn (layernorm_large 0.95-0.99x the time at 2 threads, 0.98x at 1; block by block, 1.0x)
        blocks = next(b for b in (4, 2, 1) if n % (16 * b) == 0)
        parts = []
        for j in range(blocks):
            shift = {c: Ix.var(c, 1, 16 * j)}
            shifted = [map_indices(leaf, lambda ix, m=shift: ix.substitute(m)) for leaf in body] if j else body
            values = [self.vector_expr(leaf.value, c) for leaf in shifted]
            if None in values:
                return False
            parts.append(self._column_block(shifted, values, rows, f"_{j}" if blocks > 1 else "", written))
        lines = [f"{pad}for (int64_t {c} = 0; {c} < {n}; {c} += {16 * blocks}) {{"]
        lines += [f"{pad}  {line}" for part in parts for line in part[0]]
        lines.append(f"{pad}  for (int64_t {rows} = 0; {rows} < {s.extent}; ++{rows}) {{")
        lines += [f"{pad}    {line}" for same in zip(*(part[1] for part in parts)) for line in same]  # statement by statement
        lines.append(f"{pad}  }}")
        lines += [f"{pad}  {line}" for part in parts for line in part[2]]
        self.lines += lines + [f"{pad}}}"]
        return True

    def _column_block(self, body: list, values: list[str], rows: str, suffix: str, written) -> tuple:
        """One block of 16 columns of `column_sums`: (the lines before the row loop: the sums' lanes
        and what does not move with the rows, loaded once; the row's statements; the lines after:
        the sums stored). Its registers' names end in `suffix`."""
        sums = [leaf for leaf in body if isinstance(leaf, Accumulate)]
        lanes = {id(leaf): f"st_c{k}{suffix}" for k, leaf in enumerate(sums)}
        before = [f"st_vf32 {lanes[id(x)]} = {self.lanes_at(x.buffer, x.index)};" for x in sums]
        # what does not move with the rows, loaded once (the buffers share the scratch block: gcc
        # cannot tell a row's stores leave the mean alone)
        fixed = {ld.buffer: ld.index for leaf in body for ld in loads(leaf.value)
                 if ld.buffer not in written and not flat_coef(ld.index, rows, self.buffers[ld.buffer].shape)}
        for k, (buffer, index) in enumerate(fixed.items()):
            vector = self.lanes_at(buffer, index)
            before.append(f"st_vf32 st_f{k}{suffix} = {vector};")
            values = [v.replace(vector, f"st_f{k}{suffix}") for v in values]
        row = []
        for k, leaf in enumerate(body):
            if id(leaf) in lanes:
                row.append(f"{lanes[id(leaf)]} += {values[k]};")
                continue
            vector = self.lanes_at(leaf.buffer, leaf.index)
            row.append(f"st_vf32 st_w{k}{suffix} = {values[k]}; {vector} = st_w{k}{suffix};")
            values = values[:k + 1] + [v.replace(vector, f"st_w{k}{suffix}") for v in values[k + 1:]]  # (not loaded again)
        after = [f"{self.lanes_at(x.buffer, x.index)} = {lanes[id(x)]};" for x in sums]
        return before, row, after

    def vector_loop(self, s, pad: str, loops: tuple[For, ...]) -> bool:
        """An innermost f32 loop writing a row from contiguous and loop-invariant reads with + - * /
        and exp, sigmoid or tanh, written in 16-lane vectors where the machine has AVX-512
        (st_expv_f32, VECTOR_EXP), when the row computes an exponential or is a streamed output's.

        A streamed output's row is stored with non-temporal stores straight from the registers
        (STREAM_BYTES): its whole lines one vector each; its partial first and last lines from the
        16 elements at the row's start and at its end, by plain stores of 8, 4, 2 and 1 lanes
        (st_store_lanes), so every element comes from the same vector code wherever the output
        array starts; rows of 2 * STREAM_GROUP vectors and more in groups of STREAM_GROUP, each
        group's values computed before the previous group's stores (4 KiB aliasing, at
        STREAM_GROUP). NT stores from a row held on the stack first (`stream`) stall while its
        16 KiB drain; from the registers they overlap the arithmetic. A masked store beside NT stores made layernorm
        512x64x256 four times slower on Zen 4 (in a C model as in the kernel). Other rows of
        exponentials are stored plainly, their last iterations by the scalar loop (st_expf and
        st_tanhf give st_expv_f32's and st_tanhv_f32's results). Everything else is left to gcc's
        vectorizer."""
        leaf = self.row_store(s) if self.vector_bytes == 64 else None
        if leaf is None or s.kind != "serial" or self.buffers[leaf.buffer].dtype != "f32":
            return False
        streamed = leaf.buffer in self.streamed and s.extent >= 16
        if not (streamed or _exponentials(leaf.value)):
            return False
        value = self.vector_expr(leaf.value, s.var)
        if value is None:
            return False
        v, n = s.var, s.extent
        if not streamed:
            self.lines.append(f"{pad}{{ int64_t {v} = 0;")
            self.lines.append(f"{pad}#if defined(ST_VECTOR_EXP)")
            self.lines.append(f"{pad}  for (; {v} + 16 <= {n}; {v} += 16) *(st_vf32 *)&{self.access(leaf.buffer, leaf.index)} = {value};")
            self.lines.append(f"{pad}#endif")
            self.lines.append(f"{pad}  for (; {v} < {n}; ++{v}) {self.leaf(leaf)} }}")
            return True
        self.prefetch(s, loops, pad, skip=leaf.buffer)  # (prefetching lines to be streamed would read them)
        start = self.row_start(leaf, v)
        self.lines.append(f"{pad}#if defined(ST_VECTOR_EXP)")
        # the row's value at `v`, for its partial first line, its whole lines and its partial last one
        self.lines.append(f"{pad}#define ST_ROW({v}) ((__m512)({value}))")
        self.lines.append(f"{pad}{{ float *st_o = &{start}; int64_t st_h = (int64_t)((-(uintptr_t)st_o & 63) >> 2), {v} = st_h;")
        self.lines.append(f"{pad}  if (st_h) st_store_lanes(st_o, ST_ROW(0), 0, st_h);")
        reads = self.long_row_reads(leaf, v, n, loops)

        def ahead(at: int) -> str:  # prefetches for the vector `at` elements past `v`
            return "".join(f"__builtin_prefetch(&{self.access(ld.buffer, shift_ix(ld.index, {v: STREAM_PREFETCH + at}))}, 0, 0); "
                           for ld in reads)
        g = 16 * STREAM_GROUP
        if STREAM_GROUP > 1 and n >= 2 * g:
            # groups of STREAM_GROUP vectors, the next group's computed before this one's stores
            group = lambda name, at: ", ".join(f"{name}{k} = ST_ROW({v} + {at + 16 * k})" for k in range(STREAM_GROUP))
            stores = " ".join(f"_mm512_stream_ps(st_o + {v} + {16 * k}, st_a{k});" for k in range(STREAM_GROUP))
            shift = " ".join(f"st_a{k} = st_b{k};" for k in range(STREAM_GROUP))
            self.lines.append(f"{pad}  if ({v} + {2 * g} <= {n}) {{ __m512 {group('st_a', 0)};")
            self.lines.append(f"{pad}    for (; {v} + {2 * g} <= {n}; {v} += {g}) {{ "
                              + "".join(ahead(16 * k) for k in range(STREAM_GROUP))
                              + f"__m512 {group('st_b', g)}; {stores} {shift} }}")
            self.lines.append(f"{pad}    {stores} {v} += {g}; }}")
        stream = f"_mm512_stream_ps(st_o + {v}, ST_ROW({v}));"
        self.lines.append(f"{pad}  for (; {v} + 16 <= {n}; {v} += 16) " + (f"{{ {ahead(0)}{stream} }}" if reads else stream))
        self.lines.append(f"{pad}  if ({v} < {n}) st_store_lanes(st_o + {n - 16}, ST_ROW({n - 16}), {v} - {n - 16}, 16); }}")
        self.lines.append(f"{pad}#undef ST_ROW")
        self.lines.append(f"{pad}#else")
        if not self.stream(s, pad):
            self.lines.append(f"{pad}for (int64_t {v} = 0; {v} < {n}; ++{v}) {self.leaf(leaf)}")
        self.lines.append(f"{pad}#endif")
        return True

    def row_reads(self, values, var: str) -> list[Load]:
        """The global f32 reads of `values` that run along a row, contiguous in `var` (what
        `long_row_reads`, `next_row_prefetch` and `pipelined_rows` prefetch or place)."""
        found = []
        for ld in (ld for e in values for ld in loads(e)):
            b = self.buffers[ld.buffer]
            if (b.scope == "global" and b.dtype == "f32" and all(affine(ix) for ix in ld.index)
                    and flat_coef(ld.index, var, b.shape) == 1):
                found.append(ld)
        return found

    def long_row_reads(self, leaf, var: str, n: int, loops: tuple[For, ...]) -> list[Load]:
        """The global f32 reads of a streamed row that run along it (contiguous in `var`) for at least
        twice STREAM_PREFETCH elements and move with the loops around it (a bias read by every row
        stays in the cache), where no other statement of the loop around the row reads them (an
        RMS norm's sum has just brought its row in: prefetching there cost 2% at 1 thread): the
        row's `vector_loop` prefetches them STREAM_PREFETCH ahead."""
        if n < 2 * STREAM_PREFETCH:
            return []
        around = _around(loops)
        others = set()
        for x in around.body if around else []:
            inside = list(leaves([x]))
            if not any(y is leaf for y in inside):
                others |= {b for y in inside for b in buffers_read(y)}
        found = {}
        for ld in self.row_reads((leaf.value,), var):
            shape = self.buffers[ld.buffer].shape
            if ld.buffer not in others and any(u.extent > 1 and flat_coef(ld.index, u.var, shape) for u in loops):
                found.setdefault((ld.buffer, ld.index), ld)
        return list(found.values())

    def vector_expr(self, e, var: str) -> str | None:
        """C for `e` on 16 consecutive iterations of `var` (an st_vf32), or None if it has no such form.
        An op read more than once is computed once into a temporary, as `expr` does."""
        if not isinstance(e, Op):
            return self.vector_operand(e, var)
        canon, order, uses = _number_ops(e)
        text: dict[int, str] = {}
        decls = []
        for n, op in order:
            args = [text[canon[id(a)]] if isinstance(a, Op) else self.vector_operand(a, var) for a in op.args]
            if op.dtype != "f32" or None in args or (value := _vector_op(op.op, args)) is None:
                return None
            text[n] = value
            if uses.get(n, 0) > 1:
                decls.append(f"st_vf32 t{len(decls)}_ = {value};")
                text[n] = f"t{len(decls) - 1}_"
        body = text[canon[id(e)]]
        return f"({{ {' '.join(decls)} {body}; }})" if decls else body

    def vector_operand(self, e, var: str) -> str | None:
        """A literal, or a load contiguous in `var` or invariant in it, on 16 iterations; else None."""
        if isinstance(e, Lit) and e.dtype == "f32":
            return f"st_bcast_f32({_literal(e.value, e.dtype)})"
        if not isinstance(e, Load):
            return None
        b = self.buffers[e.buffer]
        if b.dtype != "f32" or not all(affine(ix) for ix in e.index):
            return None
        step = flat_coef(e.index, var, b.shape)
        if step == 1:
            return self.lanes_at(e.buffer, e.index)
        return f"st_bcast_f32({self.access(e.buffer, e.index)})" if step == 0 else None

    def lanes_at(self, name: str, index: tuple[Ix, ...]) -> str:
        """The 16 elements of buffer `name` from `index` on, as an st_vf32 lvalue: the text
        `vector_operand` gives a contiguous load, which summed_row and column_sums replace in
        `vector_expr`'s output by a vector already in a register."""
        return f"(*(st_vf32 *)&{self.access(name, index)})"

    def stream(self, s, pad: str) -> bool:
        """An innermost loop writing a row of a large output: the row is computed into a stack buffer
        (its loop vectorizes as before) and streamed out with non-temporal stores, which write whole
        lines without reading them first (a plain store reads each line it writes: a third more
        memory traffic for a kernel that reads as much as it writes), nor keep them in the cache."""
        leaf = self.row_store(s)
        if leaf is None or leaf.buffer not in self.streamed:
            return False
        b = self.buffers[leaf.buffer]
        if b.dtype not in ("f32", "f64") or not STREAM_ROW <= s.extent * dtype_bytes(b.dtype) <= STREAM_ROW_BYTES:
            return False
        ct = C_TYPES[b.dtype]
        start = self.row_start(leaf, s.var)
        self.lines.append(f"{pad}{{ {ct} st_row[{s.extent}] __attribute__((aligned(64)));")
        self.lines.append(f"{pad}  for (int64_t {s.var} = 0; {s.var} < {s.extent}; ++{s.var}) "
                          f"st_row[{s.var}] = {self.expr(leaf.value)};")
        self.lines.append(f"{pad}  st_stream_{b.dtype}(&{start}, st_row, {s.extent}); }}")
        return True

    def row_store(self, s) -> Store | None:
        """The Store of a loop whose one statement writes consecutive elements of its buffer, one per
        iteration, from values that read nothing of that buffer but the element written (an update
        in place, lowering/reuse.py) (`stream` and `vector_loop`'s rows); else None."""
        if not (isinstance(s, For) and len(s.body) == 1 and isinstance(s.body[0], Store)):
            return None
        leaf = s.body[0]
        shape = self.buffers[leaf.buffer].shape
        if (not all(affine(ix) for ix in leaf.index) or flat_coef(leaf.index, s.var, shape) != 1
                or any(ld.buffer == leaf.buffer and ld.index != leaf.index for ld in loads(leaf.value))):
            return None
        return leaf

    def row_start(self, leaf: Store, var: str) -> str:
        """The element a row store writes at the row loop's first iteration."""
        return self.access(leaf.buffer, _at(leaf.index, var, 0))

    def prefetch(self, inner: For, loops: tuple[For, ...], pad: str, skip: str | None = None) -> None:
        """Prefetch the rows a few iterations ahead for global accesses that read or write short
        contiguous runs far apart (a tile's rows of a larger array): the hardware prefetcher follows
        a stream only within a page, so each such row would otherwise start with a full miss
        (layernorm 512x64x256, 1 thread: 24 -> 15.5 ms)."""
        if not all(isinstance(x, (Store, Accumulate)) for x in inner.body):
            return
        accesses = {}
        for leaf in inner.body:
            accesses[(leaf.buffer, leaf.index)] = 1
            for load in loads(leaf.value):
                accesses.setdefault((load.buffer, load.index), 0)
        for (name, index), write in accesses.items():
            b = self.buffers[name]
            if (name == skip or b.scope != "global" or not all(affine(ix) for ix in index)
                    or not contiguous_in(index, inner.var)):
                continue
            run = inner.extent * dtype_bytes(b.dtype)
            outer = next((u for u in reversed(loops) if u.extent > 1 and flat_coef(index, u.var, b.shape)), None)
            if outer is None or run > PREFETCH_RUN or flat_coef(index, outer.var, b.shape) <= inner.extent:
                continue
            ahead = min(outer.extent // 2, max(PREFETCH_MIN_ROWS, PREFETCH_AHEAD // run))
            if ahead < 1:
                continue
            line = max(1, 64 // dtype_bytes(b.dtype))
            ahead_index = shift_ix(index, {outer.var: ahead})
            target = self.access(name, ahead_index)
            # the row's last element too: a row not starting on a line (numpy's large arrays start
            # 16 bytes into a page) spans one line more than the steps of `line` reach, and that
            # line's miss stalls every row (layernorm_large, 2 threads: 0.92x the time)
            last = self.access(name, _at(ahead_index, inner.var, inner.extent - 1))
            self.lines.append(f"{pad}if ({outer.var} < {outer.extent - ahead}) {{ for (int64_t {inner.var} = 0; "
                              f"{inner.var} < {inner.extent}; {inner.var} += {line}) "
                              f"__builtin_prefetch(&{target}, {write}, 3); "
                              f"__builtin_prefetch(&{last}, {write}, 3); }}")

    def matmul(self, s, pad: str) -> bool:
        """A matmul nest: the register-blocked micro-kernel of c_matmul."""
        nest = match_matmul(s, lambda name: self.buffers[name].dtype, lambda name: self.buffers[name].shape)
        if nest is None:
            return False
        self.lines += render_matmul(nest, self, pad, self.buffers[nest.acc.buffer].dtype, self.vector_bytes)
        return True

    def f16_matmul(self, s, pad: str) -> bool:
        """An f16 matmul nest, with numpy's f16 matmul semantics: products and sums in float, one
        rounding per output element. The accumulator's cells of one row block live in a float
        shadow across the reduce loop (rounding them at every step drifts by several ulp)."""
        nest = perfect_nest(s) if isinstance(s, For) else None
        if nest is None or not accumulates_in_float(nest[1], self.buffers[nest[1].buffer].dtype):
            return False
        loops, leaf = nest
        indexed = {v for ix in leaf.index for v in index_vars(ix)}
        first = next((i for i, loop in enumerate(loops) if loop.var not in indexed), None)
        if first is None:
            return False
        outer, inner = loops[:first], loops[first:]
        cells = [loop for loop in inner if loop.var in indexed]
        size, offset = 1, "0"
        for loop in cells:
            offset = f"({offset}) * {loop.extent} + {loop.var}" if size > 1 else loop.var
            size *= loop.extent
        target = self.access(leaf.buffer, leaf.index)
        a, b = (f"(float)({self.expr(arg)})" for arg in leaf.value.args)
        depth = len(pad) // 2
        lines = []
        for i, loop in enumerate(outer):
            lines.append("  " * i + f"for (int64_t {loop.var} = 0; {loop.var} < {loop.extent}; ++{loop.var}) {{")
        inside = "  " * len(outer)
        if size * 4 > LOCAL_STACK_BYTES and self.frame is not None:
            lines.append(f"{inside}{{ float *acc_f = (float *)(st_scratch + {self.reserve(size * 4)});")
        else:
            lines.append(f"{inside}{{ float acc_f[{size}];")

        def over(loop_list, body):
            head = [inside + "  " * (k + 1) + f"for (int64_t {lp.var} = 0; {lp.var} < {lp.extent}; ++{lp.var})"
                    for k, lp in enumerate(loop_list)]
            return head + [inside + "  " * (len(loop_list) + 1) + body]

        lines += over(cells, f"acc_f[{offset}] = (float){target};")
        lines += over(inner, f"acc_f[{offset}] += {a} * {b};")
        lines += over(cells, f"{target} = (_Float16)acc_f[{offset}];")
        lines.append(f"{inside}}}")
        lines += ["  " * i + "}" for i in reversed(range(len(outer)))]
        self.lines += ["  " * depth + line for line in lines]
        return True

    def simd_reduce(self, s, pad: str, loops: tuple[For, ...]) -> bool:
        """A reduction over an innermost reduce loop into one element, vectorized into a scalar."""
        if not (isinstance(s, For) and s.kind == "reduce" and len(s.body) == 1) or s.extent < SIMD_REDUCE_TRIPS:
            return False
        leaf = s.body[0]
        if not isinstance(leaf, Accumulate) or any(s.var in index_vars(ix) for ix in leaf.index):
            return False
        dtype = self.buffers[leaf.buffer].dtype
        if leaf.op != "sum" and dtype not in ("f32", "f64", "i32", "i64"):
            return False
        ctype = C_TYPES[dtype]
        target = self.access(leaf.buffer, leaf.index)
        head = f"for (int64_t {s.var} = 0; {s.var} < {s.extent}; ++{s.var})"
        if leaf.op == "sum":
            # f16 sums accumulate in float and round once, as numpy's half-precision sum does
            acc_type = "float" if dtype == "f16" else ctype
            lines = [f"{pad}{{ {acc_type} acc = {target};", f"{pad}  #pragma omp simd reduction(+:acc)",
                     f"{pad}  {head} acc += {self.expr(leaf.value)};", f"{pad}  {target} = acc; }}"]
            self.lines += self.vector_sum(s, leaf, target, lines, pad, loops)
        elif dtype in ("i32", "i64"):
            cmp = ">" if leaf.op == "max" else "<"
            self.lines += [f"{pad}{{ {ctype} acc = {target};", f"{pad}  #pragma omp simd reduction({leaf.op}:acc)",
                           f"{pad}  {head} {{ {ctype} v = {self.expr(leaf.value)}; acc = v {cmp} acc ? v : acc; }}",
                           f"{pad}  {target} = acc; }}"]
        else:
            self.float_extremum(leaf, target, ctype, head, pad, s)
        return True

    def vector_sum(self, s: For, leaf: Accumulate, target: str, lines: list[str], pad: str,
                   loops: tuple[For, ...]) -> list[str]:
        """`lines` (the sum as gcc vectorizes it), or for an f32 sum of exponentials (or tanh) with a
        16-lane form on AVX-512 a sum of st_expv_f32's (st_tanhv_f32's) vectors (gcc's vectors of
        st_expf cannot use vscalefps: a softmax cross-entropy's exponentials took ~1.45 cycles an
        element), the last iterations one by one (`_lane_sum`), with `lines` as the fallback.
        Another order of the same terms than gcc's lanes: one order, whichever thread runs it.
        The next row's reads are prefetched meanwhile (`next_row_prefetch`)."""
        if self.vector_bytes != 64 or self.buffers[leaf.buffer].dtype != "f32" or not _exponentials(leaf.value):
            return lines
        value = self.vector_expr(leaf.value, s.var)
        if value is None:
            return lines
        return [f"{pad}#if defined(ST_VECTOR_EXP)",
                *_lane_sum(pad, s, target, value, self.expr(leaf.value), step=self.next_row_prefetch((leaf.value,), s, loops)),
                f"{pad}#else", *lines, f"{pad}#endif"]

    def next_row_prefetch(self, values, row: For, loops: tuple[For, ...]) -> str:
        """C prefetching, at each 16-lane step of a row of exponentials, the line the same global
        f32 reads of `values` take one iteration of the loop around the row later (the next row), for
        reads contiguous along the row that move with that loop. The exponentials take ~11 cycles
        a vector, time enough for the next row's lines to arrive before its first pass needs them
        (softmax 4096x1024, same arrays: 0.95x the time at 1 thread, 0.95-0.98x at 2; the softmax
        cross-entropy's rows of 512, whose 4 MiB stay in the last-level cache: 0.98-1.03x)."""
        around = _around(loops)
        if around is None:
            return ""
        found = {}
        for ld in self.row_reads(values, row.var):
            if flat_coef(ld.index, around.var, self.buffers[ld.buffer].shape):
                found.setdefault(ld.buffer, ld.index)
        return "".join(f"__builtin_prefetch(&{self.access(name, shift_ix(index, {around.var: 1}))}, 0, 3); "
                       for name, index in found.items())

    def float_extremum(self, leaf: Accumulate, target: str, ctype: str, head: str, pad: str, loop: For,
                       first: list[str] | None = None) -> None:
        """max/min into a scalar as the prelude's st_max/st_min define them, in plain vector reductions
        combined after the loop: the extremum of the non-NaN values and an any-NaN flag. Only when the
        extremum is a zero does the sign matter (+0.0 is the larger zero, whatever order the lanes
        combine in): then a second pass looks for a zero of the winning sign. Tracking that sign in
        the first pass cost softmax's row maximum three instructions a vector (0.93x the kernel's
        time without it, one and two threads). An f32 extremum over 16-lane vectors (`vector_expr`)
        is written with two vectors of lanes and a NaN mask (`extremum_lanes`); `first`, when given,
        sets `acc` and `nan` instead (`pipelined_passes`: from lanes it kept)."""
        if leaf.op == "max":
            cmp, start, zero, other = ">", "-INFINITY", "!__builtin_signbit(v)", f"-({ctype})0"
            winner = f"({ctype})0"
        else:
            cmp, start, zero, other = "<", "INFINITY", "(__builtin_signbit(v) != 0)", f"({ctype})0"
            winner = f"-({ctype})0"
        dtype = self.buffers[leaf.buffer].dtype
        value = self.expr(leaf.value)
        first = first or self.extremum_lanes(leaf, loop, value, start, cmp, pad) or [
            f"{pad}  #pragma omp simd reduction({leaf.op}:acc) reduction(|:nan)",
            f"{pad}  {head} {{ {ctype} v = {value}; nan |= v != v; acc = v {cmp} acc ? v : acc; }}"]
        self.lines += [f"{pad}{{ {ctype} acc = {start}; int nan = 0;", *first,
                       f"{pad}  if (acc == 0 && !nan) {{ int zero = 0;",
                       f"{pad}    #pragma omp simd reduction(|:zero)",
                       f"{pad}    {head} {{ {ctype} v = {value}; zero |= (v == 0) & {zero}; }}",
                       f"{pad}    acc = zero ? {winner} : {other}; }}",
                       f"{pad}  {target} = st_{leaf.op}_{dtype}({target}, nan ? ({ctype})NAN : acc); }}"]

    def extremum_lanes(self, leaf: Accumulate, loop: For, value: str, start: str, cmp: str, pad: str) -> list[str]:
        """The first pass of an f32 row maximum (minimum) in 16-lane vectors, two of them a step
        (gcc's one vector of lanes waits on each max's latency), the NaN flag a mask of unordered
        compares, the last iterations one by one; [] where the value has no 16-lane form. `maxps
        (v, m)` gives m where v is NaN, and m where the two are zeros, as `v > m ? v : m` does: the
        same extremum of the non-NaN values, whose zero sign the caller's second pass settles
        (on the same arrays over fresh allocations: softmax 1.0x the time, softmax_xent 0.96x,
        logsumexp 0.93x). `value` is the scalar C of the extremum's value."""
        if self.vector_bytes != 64 or self.buffers[leaf.buffer].dtype != "f32" or _exponentials(leaf.value):
            return []
        v, n = loop.var, loop.extent
        vector = self.vector_expr(leaf.value, v)
        if vector is None or n < 32:
            return []
        op = "_mm512_max_ps" if leaf.op == "max" else "_mm512_min_ps"
        reduce = "_mm512_reduce_max_ps" if leaf.op == "max" else "_mm512_reduce_min_ps"
        return [f"{pad}  {{ __m512 st_m0 = _mm512_set1_ps({start}), st_m1 = st_m0; __mmask16 st_nan = 0; int64_t {v} = 0;",
                f"{pad}    for (; {v} + 32 <= {n}; {v} += 32) {{",
                f"{pad}      __m512 st_v0 = (__m512)({vector}), st_v1;",
                f"{pad}      {{ const int64_t st_next = {v} + 16; {{ const int64_t {v} = st_next; st_v1 = (__m512)({vector}); }} }}",
                f"{pad}      st_nan |= _mm512_cmp_ps_mask(st_v0, st_v1, _CMP_UNORD_Q);",
                f"{pad}      st_m0 = {op}(st_v0, st_m0); st_m1 = {op}(st_v1, st_m1); }}",
                f"{pad}    for (; {v} + 16 <= {n}; {v} += 16) {{ __m512 st_v0 = (__m512)({vector});",
                f"{pad}      st_nan |= _mm512_cmp_ps_mask(st_v0, st_v0, _CMP_UNORD_Q); st_m0 = {op}(st_v0, st_m0); }}",
                f"{pad}    acc = {reduce}({op}(st_m0, st_m1)); nan = st_nan != 0;",
                f"{pad}    for (; {v} < {n}; ++{v}) {{ float v = {value}; nan |= v != v; acc = v {cmp} acc ? v : acc; }} }}"]

    def leaf(self, s) -> str:
        target = self.access(s.buffer, s.index)
        value = self.expr(s.value)
        if isinstance(s, Store):
            return f"{target} = {value};"
        dtype = self.buffers[s.buffer].dtype
        if s.op == "sum":
            return f"{target} += {value};"
        return f"{target} = st_{s.op}_{dtype}({target}, {value});"

    def access(self, name: str, index: tuple[Ix, ...]) -> str:
        return f"{_ident(name)}[{self.ix(self.flat_index(name, index))}]"

    def flat_index(self, name: str, index: tuple[Ix, ...]) -> Ix:
        """The element of buffer `name` at `index`, counted from its start (row-major)."""
        return flat_index(index, self.buffers[name].shape)

    @staticmethod
    def buffer_name(name: str) -> str:
        """The C variable holding buffer `name`."""
        return _ident(name)

    def ix(self, ix: Ix) -> str:
        """An index: div/mod of non-negative values (wherever one is evaluated it is in range), a
        gather's index read and checked by st_index."""
        parts = []
        for t, c in ix.terms:
            if isinstance(t, str):
                text = t
            elif isinstance(t, FloorDiv):
                text = f"(({self.ix(t.x)}) / {t.d})"
            elif isinstance(t, Mod):
                text = f"(({self.ix(t.x)}) % {t.d})"
            else:
                text = f"st_index((int64_t)({self.expr(t.value)}), {t.extent}, {t.site})"
            parts.append(text if c == 1 else f"{c} * {text}")
        if ix.const or not parts:
            parts.append(str(ix.const))
        return " + ".join(parts)

    def expr(self, e) -> str:
        """C for an expression. An op it reads more than once (an inline value used twice) is computed
        once into a typed temporary of a statement expression, so the text stays linear in the
        expression's DAG, not its tree (and no recursion: a chain of thousands of inline ops is fine)."""
        if not isinstance(e, Op):
            return self.operand(e)
        canon, order, uses = _number_ops(e)
        text: dict[int, str] = {}
        decls = []
        for n, op in order:
            args = [text[canon[id(a)]] if isinstance(a, Op) else self.operand(a) for a in op.args]
            text[n] = _op(op, args, [expr_dtype(a, lambda name: self.buffers[name].dtype) for a in op.args])
            if uses.get(n, 0) > 1:
                decls.append(f"{C_TYPES[op.dtype]} t{len(decls)}_ = {text[n]};")
                text[n] = f"t{len(decls) - 1}_"
        body = text[canon[id(e)]]
        return f"({{ {' '.join(decls)} {body}; }})" if decls else body

    def operand(self, e) -> str:
        if isinstance(e, Load):
            return self.access(e.buffer, e.index)
        if isinstance(e, Select):  # a concat: only the chosen side is evaluated
            return f"(({self.ix(e.ix)}) < {e.split} ? {self.expr(e.low)} : {self.expr(e.high)})"
        if isinstance(e, Checked):  # a gather whose load no longer reads its index: check it anyway
            return f"((void)({self.ix(e.check)}), {self.expr(e.value)})"
        return _literal(e.value, e.dtype)

    def split(self, s, pad: str) -> bool:
        """An innermost loop whose statement reads a concat along it: one loop per piece, each
        reading only its own operand (no select per element, no index out of range, vectorizes)."""
        if not (isinstance(s, For) and s.kind != "parallel" and len(s.body) == 1
                and isinstance(s.body[0], (Store, Accumulate))):
            return False
        leaf = s.body[0]
        if _select_on(leaf.value, s.var) is None:
            return False
        self.pieces(s, leaf, "0", str(s.extent), pad)
        return True

    def pieces(self, loop: For, leaf, start: str, end: str, pad: str) -> None:
        sel = _select_on(leaf.value, loop.var)
        if sel is None:
            self.lines.append(f"{pad}for (int64_t {loop.var} = {start}; {loop.var} < {end}; ++{loop.var}) "
                              + self.leaf(leaf))
            return
        c = sel.ix.coef(loop.var)
        rest = sel.ix - Ix.var(loop.var, c)
        cut = f"cut_{loop.var}_{len(self.lines)}"
        # the first i with c*i + rest >= split: ceil((split - rest) / c), kept inside [start, end]
        first = f"(({sel.split} - ({self.ix(rest)})) + {c - 1}) / {c}" if c > 1 else f"{sel.split} - ({self.ix(rest)})"
        self.lines.append(f"{pad}{{ int64_t {cut} = ST_CLAMP((int64_t)({first}), (int64_t)({start}), (int64_t)({end}));")
        self.pieces(loop, _replace(leaf, sel, sel.low), start, cut, pad + "  ")
        self.pieces(loop, _replace(leaf, sel, sel.high), cut, end, pad + "  ")
        self.lines.append(f"{pad}}}")


@dataclasses.dataclass(frozen=True)
class _SummedRow:
    """A row stored and summed in one loop (`_Kernel.summed_row`)."""

    loop: For  # the row's loop
    leaf: Store  # the row's store
    acc: Accumulate  # the sum
    term: object  # the sum's term at the row's element
    start: tuple  # the sum's start
    after: tuple  # statements between the two loops, written after them
    value: str  # the row's 16-lane value
    terms: str  # the sum's 16-lane term, reading the stored vector as st_e
    taken: int  # statements the two loops and those between them are


def _around(loops: tuple[For, ...]) -> For | None:
    """The innermost of `loops` with more than one iteration: the loop whose iterations are rows."""
    return next((u for u in reversed(loops) if u.extent > 1), None)


def _select_on(e, var: str):
    """The first Select in `e` whose condition moves with `var` by a positive step (splittable)."""
    if isinstance(e, Select):
        if var in index_vars(e.ix) and e.ix.coef(var) > 0 and var not in index_vars(e.ix - Ix.var(var, e.ix.coef(var))):
            return e
        return _select_on(e.low, var) or _select_on(e.high, var)
    if isinstance(e, Op):
        for a in e.args:
            found = _select_on(a, var)
            if found is not None:
                return found
    if isinstance(e, Checked):
        return _select_on(e.value, var)
    return None


def _replace(leaf, sel: Select, by):
    """`leaf` with the Select `sel` (by identity) replaced by one of its sides."""

    def sub(e):
        if e is sel:
            return by
        if isinstance(e, Op):
            return Op(e.op, tuple(sub(a) for a in e.args), e.dtype)
        if isinstance(e, Select):
            return Select(e.ix, e.split, sub(e.low), sub(e.high), e.dtype)
        if isinstance(e, Checked):
            return Checked(e.check, sub(e.value))
        return e

    if isinstance(leaf, Store):
        return Store(leaf.buffer, leaf.index, sub(leaf.value))
    return dataclasses.replace(leaf, value=sub(leaf.value))


def _vector_op(op: str, args: list[str]) -> str | None:
    """An f32 op on 16 lanes (st_vf32 operands), or None where `vector_expr` has no form for it."""
    if op in _ARITH:
        return f"({args[0]} {_ARITH[op]} {args[1]})"
    if op == "neg":
        return f"(-{args[0]})"
    if op == "exp":
        return f"st_expv_f32({args[0]})"
    if op == "sigmoid":  # as the scalar: 1 / (1 + exp(-x)), each step rounded to f32
        return f"(st_bcast_f32(1.0f) / (st_bcast_f32(1.0f) + st_expv_f32(-{args[0]})))"
    if op == "tanh":
        return f"st_tanhv_f32({args[0]})"
    return None


def _lane_sum(pad: str, loop: For, target: str, term: str, scalar_term: str, guard: bool = False,
              step: str = "", scalar_step: str = "") -> list[str]:
    """C adding `term` (an st_vf32 at 16 iterations of `loop` from its variable on; `step` runs before
    it each time) into 16 lanes, then the lanes' total into `target`, then the last iterations one by
    one (`scalar_step`, `scalar_term`): the order every 16-lane sum here adds in. `guard` leaves the
    lanes to ST_VECTOR_EXP builds (the last iterations are then every iteration)."""
    v, n = loop.var, loop.extent
    vector = [f"{pad}  {{ st_vf32 st_acc = st_bcast_f32(0.0f);",
              f"{pad}    for (; {v} + 16 <= {n}; {v} += 16) {{ {step}st_acc += {term}; }}",
              f"{pad}    acc += _mm512_reduce_add_ps((__m512)st_acc); }}"]
    if guard:
        vector = [f"{pad}#if defined(ST_VECTOR_EXP)", *vector, f"{pad}#endif"]
    return [f"{pad}{{ int64_t {v} = 0; float acc = {target};", *vector,
            f"{pad}  for (; {v} < {n}; ++{v}) {{ {scalar_step}acc += {scalar_term}; }}",
            f"{pad}  {target} = acc; }}"]


def _at(index: tuple[Ix, ...], var: str, value: int) -> tuple[Ix, ...]:
    """`index` at one iteration of `var`."""
    return tuple(ix.substitute({var: Ix.constant(value)}) for ix in index)


# ops worth vectorizing a loop for (its loads and stores aside)
TRANSCENDENTAL = ("exp", "log", "erf", "tanh", "sigmoid", "pow", "sqrt", "rsqrt")


def _exponentials(e) -> bool:
    """Whether an expression computes exp, sigmoid or tanh: values whose 16-lane form
    (st_expv_f32, st_tanhv_f32) pays where gcc's vectors of the scalar functions cannot use vscalefps."""
    return _computes(e, ("exp", "sigmoid", "tanh"))


def _computes(e, ops: tuple[str, ...]) -> bool:
    """Whether an expression applies any of these ops."""
    return isinstance(e, Op) and (e.op in ops or any(_computes(a, ops) for a in e.args))


def _is_tile_loop(stmt) -> bool:
    return isinstance(stmt, For) and stmt.kind == "parallel"


PARALLEL_WORK = 1 << 18  # element updates below which a kernel runs on the calling thread alone
GRAIN_WORK = 1 << 14  # element updates a thread claims at least at once (tiles smaller are claimed together)
# a reduce loop of fewer trips is left to the C compiler, which unrolls it and may vectorize the loop
# around (a 3-tap window's sum as a masked vector reduction took 4.3 ms, unrolled 0.45)
SIMD_REDUCE_TRIPS = 8
LOCAL_STACK_BYTES = 64 * 1024  # local buffers of a tile up to this many bytes in all are stack arrays


def _work(stmt) -> int:
    """Element updates the statement performs: waking the other threads costs more than a tiny kernel,
    and far more when a core is busy with another process and a worker waits for a time slice."""
    if isinstance(stmt, For):
        return stmt.extent * sum(_work(s) for s in stmt.body)
    return 1


# Program outputs of at least STREAM_BYTES are written with non-temporal stores: rows of f32 with a
# 16-lane form straight from the registers (`vector_loop`; A/B at 2 threads on the Zen 4 machine
# against the rows on the stack: bias+GELU 0.81-0.84x the time, rmsnorm 0.82-0.93x, layer norm
# over the last axis 0.87-1.01x, over the first axis with rows of 512 B 0.78-0.92x, softmax 1.0x),
# other rows of STREAM_ROW to STREAM_ROW_BYTES held on the stack first (`stream`: rows of 16 KiB
# 0.85-0.91x the time of plain stores, of 4 KiB mixed, of 512 B 1.14x).
STREAM_BYTES = 8 << 20
# How many statements may stand between a row and its sum for `summed_row` to fuse them.
SUMMED_ROW_BETWEEN = 4
# Bytes, modulo 4 KiB, that a pipelined row's stores keep ahead of the exponentials' reads at least
# (`pipelined_rows`): a load whose address's low 12 bits match a store not yet written waits for
# it. Softmax 4096x1024 at 1 thread, its division's stores as many bytes ahead of the reads as
# the arrays fell: 4-12 bytes, as fast as the rows one after the other; 32-128 bytes, 1.07-1.3x
# slower; 160-512 bytes, 0.83-0.93x the time; elsewhere 0.79-0.81x. With the division run ahead
# to this gap, numpy's usual placement (both arrays 16 bytes into a page: 48 bytes apart at the
# row's first whole line) 0.87-0.89x at 1 thread and 2 (384 and 768: 0.90 and 0.91x). A store
# up to 63 bytes behind the read overlaps the read that follows it in the same step: the output 16
# bytes before the input in its page (a 64-byte aligned output beside numpy's input) took 2.4 ms
# at 2 threads against 0.7 elsewhere, so it is run ahead too.
ROW_STORE_GAP = 512
STREAM_ROW = 8 << 10
STREAM_ROW_BYTES = 16 << 10
# A pipelined tile loop (lowering/overlap.py) runs the first tile of each claim's reads and its last
# tile's writes alone: claims of PIPELINE_CLAIM tiles at least (counting the tile loops inside the
# claimed one), while the claims stay at least PIPELINE_CLAIMS (a C model of layernorm 512x64x256
# pipelined in claims of 2, 4, 8 and 16 tiles: 0.91, 0.86, 0.85 and 0.83x the plain tiles' time; in
# stitch, three runs, 2 tiles 0.95-0.97x, 8 tiles 0.89-0.93x, 32 tiles 0.91-0.92x).
PIPELINE_CLAIM = 8
PIPELINE_CLAIMS = 8
PREFETCH_RUN = 2048  # contiguous bytes per row up to which rows are prefetched
# Bytes of rows to prefetch ahead, at least PREFETCH_MIN_ROWS rows. Rows far apart at a stride of a
# multiple of 4 KiB share the first-level cache's sets (8 ways on Zen 4): prefetched 16 rows of 512 B
# ahead (8 KiB), layernorm 512x64x256 ran 6-7% slower at 1 and 2 threads than 4 rows ahead, which
# ran as fast as no prefetch there (A/B in one process; no model block changed).
PREFETCH_AHEAD = 2048
PREFETCH_MIN_ROWS = 4
# Elements ahead a streamed row's long contiguous global reads are prefetched (`vector_loop`): the
# hardware's stream prefetcher alone left bias+GELU 4096x4096 waiting on its reads (same arrays,
# fresh ones 6 times: 256, 512, 1024, 2048 floats ahead 0.91, 0.89, 0.90, 0.94x the time at 2
# threads; 0.93, 0.91, 0.92, 0.91x at 1; as generated, 0.88x and 0.92x).
STREAM_PREFETCH = 512

# A streamed row's vectors in groups of 4, each group's values computed before the previous
# group's stores. A load waits for an earlier store whose address matches it in its last 12 bits
# (4 KiB aliasing) until that store is done, and a row's store waits on its whole exp or tanh: with
# the output 48 bytes past an input in its page, each vector waited on the one before. bias+GELU
# 4096x4096 at 2 threads, its output at 6-10 offsets in the page from the input's (-16 to +2048
# bytes): 3.0-14.5 ms a vector at a time (4.2 with the output 240 bytes past the input), 3.1-3.2
# ms in groups of 4 or 8 (3.5 at -16 in one process, where the bias fell); plain groups of 8 (each
# group's loads before its own stores) 2.9-3.8 ms. rmsnorm 2.3-4.6 ms a vector at a time, 2.3-3.0
# in groups of 4, and groups of 8 4-6% slower than 4 with the output at the input's place in the
# page, as numpy's large arrays fall (bench/placement.py).
STREAM_GROUP = 4


def _literal(value, dtype: str) -> str:
    if dtype == "bool":
        return "1" if value else "0"
    if dtype in ("i32", "i64"):
        return f"{int(value)}LL" if dtype == "i64" else str(int(value))
    v = float(value)
    if math.isinf(v):
        text = "INFINITY" if v > 0 else "-INFINITY"
    elif math.isnan(v):
        text = "NAN"
    else:
        text = repr(v)  # a double literal, rounded to the dtype by the cast as numpy rounds it
    return f"(({C_TYPES[dtype]})({text}))"


def _number_ops(root: Op) -> tuple[dict[int, int], list[tuple[int, Op]], dict[int, int]]:
    """Number the distinct ops of an expression: equal ops get one number whether or not they are
    one object, and each object is visited once. Returns the number of every op object (by id), the
    distinct ops operands first, and how many distinct ops read each one."""
    canon: dict[int, int] = {}
    numbers: dict[tuple, int] = {}
    order: list[tuple[int, Op]] = []
    uses: dict[int, int] = {}
    stack: list[tuple[Op, bool]] = [(root, False)]
    while stack:
        e, operands_done = stack.pop()
        if id(e) in canon:
            continue
        if not operands_done:
            stack.append((e, True))
            stack += [(a, False) for a in e.args if isinstance(a, Op) and id(a) not in canon]
            continue
        structure = (e.op, e.dtype, tuple(("op", canon[id(a)]) if isinstance(a, Op) else a for a in e.args))
        if structure not in numbers:
            numbers[structure] = len(numbers)
            order.append((numbers[structure], e))
            for a in e.args:
                if isinstance(a, Op):
                    uses[canon[id(a)]] = uses.get(canon[id(a)], 0) + 1
        canon[id(e)] = numbers[structure]
    return canon, order, uses


def _op(e: Op, args: list[str], arg_dtypes: list[str]) -> str:
    op, t = e.op, e.dtype
    ct = C_TYPES[t]
    src = arg_dtypes[0] if arg_dtypes else t
    is_float = src in ("f16", "f32", "f64")
    suffix = "f" if src in ("f16", "f32") else ""
    a = args[0] if args else ""
    if op == "cast":
        if is_float and t in ("i32", "i64"):  # out of range is undefined in C: defined in the prelude
            return f"st_cast_{t}_{src}({a})"
        if src in ("i32", "i64") and t in ("f16", "f32", "f64"):
            # with -fno-trapping-math gcc folds (double)(int)x to trunc(x), which keeps x's sign at
            # zero (trunc(-0.3) is -0.0); an integer has no sign at zero (numpy: +0.0). The zero test
            # survives the fold and vectorizes.
            return f"st_float_{t}_{src}({a})"
        return f"(({ct})({a}))"
    if op in _ARITH:
        return f"(({ct})({a} {_ARITH[op]} {args[1]}))"
    if op in _COMPARE:
        return f"({a} {_COMPARE[op]} {args[1]})"
    if op in ("maximum", "minimum"):
        return f"st_{op[:3]}_{t}({a}, {args[1]})"
    if op == "where":
        return f"st_where_{t}({a}, {args[1]}, {args[2]})"
    if op == "neg":
        return f"(({ct})(-({a})))"
    if op == "relu":
        return f"st_relu_{t}({a})"
    if op == "pow":
        return f"st_pow_{t}({a}, {args[1]})"
    if op == "abs":
        if is_float:
            return f"(({ct})fabs{suffix}({a}))"
        return f"st_abs_{t}({a})"
    # each step rounds to the dtype, as the reference's numpy ops do (an f16 rsqrt is its f16 sqrt's
    # reciprocal: computed in float and rounded once it differed where a quotient neared a midpoint)
    if op == "rsqrt":
        return f"(({ct})(1 / ({ct})sqrt{suffix}({a})))"
    exp = "st_expf" if suffix == "f" else "exp"
    if op == "sigmoid":
        return f"(({ct})(1 / ({ct})(1 + ({ct}){exp}(-({a})))))"
    if op == "exp":
        return f"(({ct}){exp}({a}))"
    if op == "erf" and suffix == "f":
        return f"(({ct})st_erff({a}))"
    if op == "tanh" and suffix == "f":
        return f"(({ct})st_tanhf({a}))"
    if op in _FLOAT_FN:
        fn = _FLOAT_FN[op] + suffix
        return f"(({ct}){fn}({', '.join(args)}))"
    raise NotImplementedError(f"no C for op {op}")
