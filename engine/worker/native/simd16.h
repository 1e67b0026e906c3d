/* 16 float lanes for the kernels written once for both instruction sets (paged_attention.c, rms_norm.c and the
   activations' quantization in int8_matmul.c): one __m512 under AVX-512, two __m256 (lanes 0-7 and 8-15) under
   AVX2 + FMA + F16C. Only what those kernels use is here.

   Every operation gives the same bits under both: lane-wise arithmetic is IEEE's, and the two sums over lanes
   (vec16_reduce_add and vec16_sum16) add in one fixed tree, written out for both: lanes l and l + 8 first, then
   l and l + 4, l and l + 2, l and l + 1. */

#ifndef LOCALCHAT_SIMD16_H
#define LOCALCHAT_SIMD16_H

#include <immintrin.h>
#include <stdint.h>

#if defined(__AVX512F__)

typedef __m512 vec16;
#define VEC16_REGISTERS 32  /* vectors the registers hold */

static inline vec16 vec16_set1(float x) { return _mm512_set1_ps(x); }
static inline vec16 vec16_zero(void) { return _mm512_setzero_ps(); }
static inline vec16 vec16_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vec16_store(float *p, vec16 v) { _mm512_storeu_ps(p, v); }
static inline __mmask16 first_lanes(int64_t n) { return n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1); }
/* lanes 0..n-1 of p (n >= 16: all), zeros past them */
static inline vec16 vec16_load_first(const float *p, int64_t n) { return _mm512_maskz_loadu_ps(first_lanes(n), p); }
static inline void vec16_store_first(float *p, vec16 v, int64_t n) { _mm512_mask_storeu_ps(p, first_lanes(n), v); }
/* a's lanes 0..n-1, b's past them */
static inline vec16 vec16_first_else(int64_t n, vec16 a, vec16 b) { return _mm512_mask_mov_ps(b, first_lanes(n), a); }
/* 16 bfloat16 widened exactly */
static inline vec16 vec16_load_bf16(const void *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline vec16 vec16_add(vec16 a, vec16 b) { return _mm512_add_ps(a, b); }
static inline vec16 vec16_sub(vec16 a, vec16 b) { return _mm512_sub_ps(a, b); }
static inline vec16 vec16_mul(vec16 a, vec16 b) { return _mm512_mul_ps(a, b); }
static inline vec16 vec16_div(vec16 a, vec16 b) { return _mm512_div_ps(a, b); }
static inline vec16 vec16_max(vec16 a, vec16 b) { return _mm512_max_ps(a, b); }
static inline vec16 vec16_min(vec16 a, vec16 b) { return _mm512_min_ps(a, b); }
static inline vec16 vec16_abs(vec16 a) { return _mm512_abs_ps(a); }
/* a where x < 0, b elsewhere */
static inline vec16 vec16_where_negative(vec16 x, vec16 a, vec16 b) {
    return _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), a);
}
static inline vec16 vec16_fmadd(vec16 a, vec16 b, vec16 c) { return _mm512_fmadd_ps(a, b, c); }   /* a b + c */
static inline vec16 vec16_fnmadd(vec16 a, vec16 b, vec16 c) { return _mm512_fnmadd_ps(a, b, c); } /* c - a b */
/* to the nearest integer, ties to even */
static inline vec16 vec16_round(vec16 a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* p 2^n for integral n in -126..127 */
static inline vec16 vec16_scale2(vec16 p, vec16 n) { return _mm512_scalef_ps(p, n); }
/* integral lanes in -128..127 stored as 16 int8 */
static inline void vec16_store_int8(int8_t *p, vec16 v) {
    _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
}
/* the 8 lanes l + l + 8 of a vector: the first level of the trees */
static inline __m256 vec16_fold(vec16 a) {
    return _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}
static inline float vec16_reduce_max(vec16 a) { return _mm512_reduce_max_ps(a); }  /* exact in any order */

#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

typedef struct {
    __m256 lo, hi;  /* lanes 0-7, lanes 8-15 */
} vec16;
#define VEC16_REGISTERS 8  /* vectors the registers hold */

static inline vec16 vec16_of(__m256 lo, __m256 hi) { vec16 v = {lo, hi}; return v; }
static inline vec16 vec16_set1(float x) { return vec16_of(_mm256_set1_ps(x), _mm256_set1_ps(x)); }
static inline vec16 vec16_zero(void) { return vec16_of(_mm256_setzero_ps(), _mm256_setzero_ps()); }
static inline vec16 vec16_load(const float *p) { return vec16_of(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)); }
static inline void vec16_store(float *p, vec16 v) { _mm256_storeu_ps(p, v.lo); _mm256_storeu_ps(p + 8, v.hi); }
/* all ones in the lanes 8 h + i < n */
static inline __m256i first_lanes(int64_t n, int h) {
    __m256i index = _mm256_add_epi32(_mm256_set1_epi32(8 * h), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n >= 16 ? 16 : (int)n), index);
}
static inline vec16 vec16_load_first(const float *p, int64_t n) {
    return vec16_of(_mm256_maskload_ps(p, first_lanes(n, 0)), _mm256_maskload_ps(p + 8, first_lanes(n, 1)));
}
static inline void vec16_store_first(float *p, vec16 v, int64_t n) {
    _mm256_maskstore_ps(p, first_lanes(n, 0), v.lo);
    _mm256_maskstore_ps(p + 8, first_lanes(n, 1), v.hi);
}
static inline vec16 vec16_first_else(int64_t n, vec16 a, vec16 b) {
    return vec16_of(_mm256_blendv_ps(b.lo, a.lo, _mm256_castsi256_ps(first_lanes(n, 0))),
                    _mm256_blendv_ps(b.hi, a.hi, _mm256_castsi256_ps(first_lanes(n, 1))));
}
static inline __m256 widen_bf16(const void *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline vec16 vec16_load_bf16(const void *p) { return vec16_of(widen_bf16(p), widen_bf16((const char *)p + 16)); }
#define VEC16_LANEWISE(name, op) \
    static inline vec16 vec16_##name(vec16 a, vec16 b) { return vec16_of(op(a.lo, b.lo), op(a.hi, b.hi)); }
VEC16_LANEWISE(add, _mm256_add_ps)
VEC16_LANEWISE(sub, _mm256_sub_ps)
VEC16_LANEWISE(mul, _mm256_mul_ps)
VEC16_LANEWISE(div, _mm256_div_ps)
VEC16_LANEWISE(max, _mm256_max_ps)
VEC16_LANEWISE(min, _mm256_min_ps)
#undef VEC16_LANEWISE
static inline vec16 vec16_abs(vec16 a) {
    __m256 sign = _mm256_set1_ps(-0.0f);
    return vec16_of(_mm256_andnot_ps(sign, a.lo), _mm256_andnot_ps(sign, a.hi));
}
/* a where x < 0, b elsewhere */
static inline vec16 vec16_where_negative(vec16 x, vec16 a, vec16 b) {
    __m256 zero = _mm256_setzero_ps();
    return vec16_of(_mm256_blendv_ps(b.lo, a.lo, _mm256_cmp_ps(x.lo, zero, _CMP_LT_OQ)),
                    _mm256_blendv_ps(b.hi, a.hi, _mm256_cmp_ps(x.hi, zero, _CMP_LT_OQ)));
}
static inline vec16 vec16_fmadd(vec16 a, vec16 b, vec16 c) {
    return vec16_of(_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi));
}
static inline vec16 vec16_fnmadd(vec16 a, vec16 b, vec16 c) {
    return vec16_of(_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi));
}
static inline vec16 vec16_round(vec16 a) {
    const int mode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return vec16_of(_mm256_round_ps(a.lo, mode), _mm256_round_ps(a.hi, mode));
}
/* 2^n built from its exponent bits (n >= -126: a normal number), then one rounded product, as scalef rounds */
static inline __m256 power_of_two(__m256 n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
static inline vec16 vec16_scale2(vec16 p, vec16 n) {
    return vec16_of(_mm256_mul_ps(p.lo, power_of_two(n.lo)), _mm256_mul_ps(p.hi, power_of_two(n.hi)));
}
static inline void vec16_store_int8(int8_t *p, vec16 v) {
    __m256i words = _mm256_packs_epi32(_mm256_cvtps_epi32(v.lo), _mm256_cvtps_epi32(v.hi));  /* 0-3 8-11 4-7 12-15 */
    __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
    _mm_storeu_si128((__m128i *)p, _mm_shuffle_epi32(bytes, _MM_SHUFFLE(3, 1, 2, 0)));
}
static inline __m256 vec16_fold(vec16 a) { return _mm256_add_ps(a.lo, a.hi); }
static inline float vec16_reduce_max(vec16 a) {
    __m256 m = _mm256_max_ps(a.lo, a.hi);
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_max_ss(q, _mm_movehdup_ps(q)));
}

#else
#error "the kernels need AVX-512 (F, BW, VL, VNNI) or AVX2 with FMA and F16C"
#endif

/* The sum of a vector's lanes in the trees' order */
static inline float vec16_reduce_add(vec16 a) {
    __m256 r = vec16_fold(a);                                                            /* l + l + 8 */
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));      /* l + l + 4 */
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));                                              /* l + l + 2 */
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));                             /* l + l + 1 */
}

/* Lane i of the result: the sum of d[i]'s lanes in the trees' order, 16 sums at once */
static inline vec16 vec16_sum16(const vec16 d[16]) {
    __m256 r[16], u[8], w[4], x[2];
    /* after the last two steps below, x[k] holds the sums of r[8k], r[8k + 2], .., r[8k + 6] in lanes 0-3 and of
       r[8k + 1], .., r[8k + 7] in lanes 4-7: so r[8k + 2j] takes d[8k + j] and r[8k + 2j + 1] d[8k + 4 + j] */
    static const int from[16] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
    for (int i = 0; i < 16; i++) r[i] = vec16_fold(d[from[i]]);                          /* l + l + 8 */
    for (int i = 0; i < 8; i++)                                                          /* l + l + 4 */
        u[i] = _mm256_add_ps(_mm256_permute2f128_ps(r[2 * i], r[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(r[2 * i], r[2 * i + 1], 0x31));
    for (int i = 0; i < 4; i++)                                                          /* l + l + 2 */
        w[i] = _mm256_add_ps(_mm256_shuffle_ps(u[2 * i], u[2 * i + 1], 0x44),
                             _mm256_shuffle_ps(u[2 * i], u[2 * i + 1], 0xEE));
    for (int i = 0; i < 2; i++)                                                          /* l + l + 1 */
        x[i] = _mm256_add_ps(_mm256_shuffle_ps(w[2 * i], w[2 * i + 1], 0x88),
                             _mm256_shuffle_ps(w[2 * i], w[2 * i + 1], 0xDD));
#if defined(__AVX512F__)
    __m512d low = _mm512_castps_pd(_mm512_castps256_ps512(x[0]));
    return _mm512_castpd_ps(_mm512_insertf64x4(low, _mm256_castps_pd(x[1]), 1));
#else
    return vec16_of(x[0], x[1]);
#endif
}

#endif
