#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12 && defined(__AVX2__) && defined(__FMA__) \
    && !defined(__AVX512F__) && !defined(__AVXVNNI__)
/* gcc's <immintrin.h> reads every extension's header, AVX-512's among them, whatever the target: most
   of the time a small program's compile takes, and again in each part of a large one
   (docs/perf/2026-11-29-compile-time.md). Below AVX-512 the intrinsics stitch's C uses are all in these;
   its include guard defined first, the includes of <immintrin.h> below read nothing more. Only gcc 12,
   the version this was checked with; any other compiler or version reads <immintrin.h> whole. */
#define _IMMINTRIN_H_INCLUDED
#include <xmmintrin.h>
#include <emmintrin.h>
#include <pmmintrin.h>
#include <tmmintrin.h>
#include <smmintrin.h>
#include <avxintrin.h>
#include <avx2intrin.h>
#include <fmaintrin.h>
#endif
#include <math.h>
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
/* floor(a / b) for b > 0, whatever a's sign: a symbolic extent's quotient (engine/ir/extent.py) */
static inline long long ST_FDIV(long long a, long long b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
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
