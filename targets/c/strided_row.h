/* strided_row.py's row on one st_vf32 (8 lanes on AVX2, 16 on AVX-512): a gather, and float_helpers.h's
   st_max_f32 and st_min_f32 without a branch. maxps is a > b ? a : b, which gives b where either is
   NaN (b's NaN: right) or both are zeros; then equal lanes take the AND of both (max(-0, +0) = +0;
   the OR for min), and a's NaN goes through: the scalar functions' bits. */
#if defined(__AVX512F__) && ST_LANES == 16
static inline st_vf32 st_gatherv_f32(const float *p, int32_t step) {
  __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                  _mm512_set1_epi32(step));
  return (st_vf32)_mm512_i32gather_ps(at, p, 4);
}
static inline st_vf32 st_maxv_f32(st_vf32 av, st_vf32 bv) {
  __m512 a = (__m512)av, b = (__m512)bv;
  __m512 r = _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ),
                                _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_castps_si512(b))));
  return (st_vf32)_mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}
static inline st_vf32 st_minv_f32(st_vf32 av, st_vf32 bv) {
  __m512 a = (__m512)av, b = (__m512)bv;
  __m512 r = _mm512_mask_mov_ps(_mm512_min_ps(a, b), _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ),
                                _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b))));
  return (st_vf32)_mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}
#elif defined(__AVX2__) && ST_LANES == 8
static inline st_vf32 st_gatherv_f32(const float *p, int32_t step) {
  __m256i at = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(step));
  return (st_vf32)_mm256_i32gather_ps(p, at, 4);
}
static inline st_vf32 st_maxv_f32(st_vf32 av, st_vf32 bv) {
  __m256 a = (__m256)av, b = (__m256)bv;
  __m256 r = _mm256_blendv_ps(_mm256_max_ps(a, b), _mm256_and_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
  return (st_vf32)_mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
static inline st_vf32 st_minv_f32(st_vf32 av, st_vf32 bv) {
  __m256 a = (__m256)av, b = (__m256)bv;
  __m256 r = _mm256_blendv_ps(_mm256_min_ps(a, b), _mm256_or_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
  return (st_vf32)_mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
#endif
