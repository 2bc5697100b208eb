/* st_expf, the sigmoid and st_tanhf on the machine's vector (16 lanes on AVX-512, 8 on AVX2 with
   FMA), and the partial-line stores beside them; source.py defines ST_LANES first and includes this
   at 64 and 32 bytes */
#if ST_LANES == 16 && defined(__AVX512F__)
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
/* the scalar sigmoid's steps, 1 / (1 + exp(-x)) */
static inline st_vf32 st_sigmoidv_f32(st_vf32 x) {
  return st_bcast_f32(1.0f) / (st_bcast_f32(1.0f) + st_expv_f32(-x));
}
static inline void st_sigmoidv4_f32(st_vf32 *x) { for (int k = 0; k < 4; ++k) x[k] = st_sigmoidv_f32(x[k]); }
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
#elif ST_LANES == 8
#if defined(__AVX2__) && defined(__FMA__)
/* the same steps on 8 lanes. AVX2 has no vscalefps: 2^n is built from n's integer exponent bits
   in two halves, k >> 1 and k - (k >> 1), as st_expf does (n is in [-150, 129] after the clamp, so
   each half is a normal float's exponent and p * s1 * s2 rounds once, at the end, where the result
   is subnormal). NaN goes through the clamps (maxps and minps give their second operand) and the
   arithmetic to the result; its integer conversion only makes scale bits the NaN ignores. */
static inline __m256 st_pow2v_f32(__m256i k) {  /* 2^k for k in [-126, 127] */
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}
static inline st_vf32 st_expv_f32(st_vf32 xv) {
  __m256 x = (__m256)xv;
  __m256 c = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
  __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(c, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(12582912.0f)),
                           _mm256_set1_ps(12582912.0f));
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), c);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.3814540580e-3f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3687454462e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1668388993e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666521132e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.9999994040e-1f));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  __m256i k = _mm256_cvtps_epi32(n), k1 = _mm256_srai_epi32(k, 1), k2 = _mm256_sub_epi32(k, k1);
  return (st_vf32)_mm256_mul_ps(_mm256_mul_ps(p, st_pow2v_f32(k1)), st_pow2v_f32(k2));
}
/* sigmoid(x) on 8 lanes, within the tolerance rather than the scalar 1 / (1 + st_expf(-x))'s bits:
   SiLU's exponential is most of a group norm + SiLU kernel's time here, and fewer steps than the
   scalar form's (docs/perf/2026-11-29-group-norm.md); a function's approximation is not defined op
   by op (docs/explanation/floating-point.md):
   - x is held in [-89, 86]: above 86, exp(-x) < 2^-124 leaves 1 + exp(-x) at 1; below -89 the
     denominator overflows to inf and the result is 0, as beyond -88.73 exactly;
   - n = round(-x log2 e) from the rounding's sum m = 1.5 * 2^23 + n (n is m's low mantissa bits),
     and r = -x - n ln 2 with one constant for ln 2 (its rounding grows with n: over every float
     the result is within 2.24 ulp of the sigmoid where it is 2^-24 or more, 5.38 below; the scalar
     form's two constants cost a group norm's SiLU row 8%);
   - e^r - 1 by the scalar form's polynomial, exp(-x) / 2 = (e^r - 1) 2^(n - 1) + 2^(n - 1), 2^(n - 1)
     from m's bits (n - 1 <= 127, so it stays finite) and the denominator 1 + 2 (exp(-x) / 2) in one
     multiply-add (inf past -88.73: the result 0);
   - -x is not formed: fma(-u, a, b) is fma(u, -a, b) exactly, and r = -(n ln 2) - u by fnmsub.
   NaN passes the clamps (minps and maxps give their second operand) and the arithmetic.
   test_c_math checks it over a stride of every float and at the edges against the exact sigmoid.
   st_sigmoidv4_f32 does 4 vectors step by step, each step on all 4 before the next: one vector's
   chain of dependent steps left the out-of-order window idle (vector_loop's groups). */
#define ST_EACH(k, count) for (int k = 0; k < (count); ++k)
static inline void st_sigmoidv_steps(__m256 *x, int count) {
  __m256 u[4], m[4], r[4], p[4];
  ST_EACH(k, count) u[k] = _mm256_max_ps(_mm256_set1_ps(-89.0f), _mm256_min_ps(_mm256_set1_ps(86.0f), x[k]));
  ST_EACH(k, count) m[k] = _mm256_fmadd_ps(u[k], _mm256_set1_ps(-1.44269504088896341f), _mm256_set1_ps(12582912.0f));
  ST_EACH(k, count) x[k] = _mm256_sub_ps(m[k], _mm256_set1_ps(12582912.0f));  /* n */
  ST_EACH(k, count) r[k] = _mm256_fnmsub_ps(x[k], _mm256_set1_ps(0.693147180559945309f), u[k]);
  ST_EACH(k, count) p[k] = _mm256_fmadd_ps(_mm256_set1_ps(1.3814540580e-3f), r[k], _mm256_set1_ps(8.3687454462e-3f));
  ST_EACH(k, count) p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(4.1668388993e-2f));
  ST_EACH(k, count) p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(1.6666521132e-1f));
  ST_EACH(k, count) p[k] = _mm256_fmadd_ps(p[k], r[k], _mm256_set1_ps(4.9999994040e-1f));
  ST_EACH(k, count) p[k] = _mm256_fmadd_ps(p[k], _mm256_mul_ps(r[k], r[k]), r[k]);  /* e^r - 1 */
  ST_EACH(k, count) u[k] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(m[k]),
                                                                                  _mm256_set1_epi32(126)), 23));
  ST_EACH(k, count) p[k] = _mm256_fmadd_ps(p[k], u[k], u[k]);  /* exp(-x) / 2 */
  ST_EACH(k, count) x[k] = _mm256_div_ps(_mm256_set1_ps(1.0f),
                                         _mm256_fmadd_ps(p[k], _mm256_set1_ps(2.0f), _mm256_set1_ps(1.0f)));
}
#undef ST_EACH
static inline st_vf32 st_sigmoidv_f32(st_vf32 x) {
  __m256 v = (__m256)x;
  st_sigmoidv_steps(&v, 1);
  return (st_vf32)v;
}
static inline void st_sigmoidv4_f32(st_vf32 *x) {
  __m256 v[4] = {(__m256)x[0], (__m256)x[1], (__m256)x[2], (__m256)x[3]};
  st_sigmoidv_steps(v, 4);
  for (int k = 0; k < 4; ++k) x[k] = (st_vf32)v[k];
}
#ifndef ST_NO_VECTOR_EXP
#define ST_VECTOR_EXP 1
#endif
/* st_tanhf on 8 lanes: the same steps, 2^n from its exponent bits (n <= 27) */
static inline st_vf32 st_tanhv_f32(st_vf32 xv) {
  __m256 x = (__m256)xv, sign = _mm256_set1_ps(-0.0f);
  __m256 a = _mm256_min_ps(_mm256_set1_ps(9.1f), _mm256_andnot_ps(sign, x));  /* (NaN: minps gives its second operand) */
  __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(a, _mm256_set1_ps(2.88539008177792681f), _mm256_set1_ps(12582912.0f)),
                           _mm256_set1_ps(12582912.0f));
  __m256 h = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.3466796875f), a);
  h = _mm256_fmadd_ps(n, _mm256_set1_ps(1.06097220e-4f), h);
  __m256 r = _mm256_add_ps(h, h);
  __m256 p = _mm256_set1_ps(1.3882515486e-3f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3665475249e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1667200625e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666543484e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.9999997020e-1f));
  __m256 e = _mm256_fmadd_ps(_mm256_mul_ps(r, r), p, r);
  __m256 s = st_pow2v_f32(_mm256_cvtps_epi32(n));
  __m256 d = _mm256_fmadd_ps(s, e, _mm256_sub_ps(s, _mm256_set1_ps(1.0f)));
  __m256 t = _mm256_div_ps(d, _mm256_add_ps(d, _mm256_set1_ps(2.0f)));
  return (st_vf32)_mm256_or_ps(t, _mm256_and_ps(x, sign));
}
#else
/* AVX without AVX2 and FMA: each lane by the scalar function, and no ST_VECTOR_EXP (the recognizers
   keep their scalar loops) */
static inline st_vf32 st_expv_f32(st_vf32 x) { for (int i = 0; i < 8; ++i) x[i] = st_expf(x[i]); return x; }
static inline st_vf32 st_tanhv_f32(st_vf32 x) { for (int i = 0; i < 8; ++i) x[i] = st_tanhf(x[i]); return x; }
static inline st_vf32 st_sigmoidv_f32(st_vf32 x) { for (int i = 0; i < 8; ++i) x[i] = 1 / (1 + st_expf(-x[i])); return x; }
static inline void st_sigmoidv4_f32(st_vf32 *x) { for (int k = 0; k < 4; ++k) x[k] = st_sigmoidv_f32(x[k]); }
#endif
/* the first n < 8 elements of src to dst: plain stores of 4, 2 and 1 elements */
static inline void st_store_part(float *dst, const float *src, int64_t n) {
  if (n & 4) { memcpy(dst, src, 16); dst += 4; src += 4; }
  if (n & 2) { memcpy(dst, src, 8); dst += 2; src += 2; }
  if (n & 1) *dst = *src;
}
/* lanes from..to-1 of v to dst[from..to-1] */
static inline void st_store_lanes(float *dst, __m256 v, int64_t from, int64_t to) {
  float t[8];
  _mm256_storeu_ps(t, v);
  st_store_part(dst + from, t + from, to - from);
}
#endif
