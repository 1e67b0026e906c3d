/* y = x @ W.T for GGUF-quantized W, in integer arithmetic (AVX-512 VNNI), as llama.cpp's Q4 x Q8 dot products do.

   Activations: each row of x (float32, [M, K]) is quantized per block of 32 features to int8 codes a in -127..127
   with a float scale t = max|x| / 127 (round to nearest even). Only the row itself decides its codes.

   Weights: 16 output rows (a panel) by 32 input features (a group) at a time, as unsigned codes q (4 or 8 bits)
   with a float16 scale s and zero z per row and group: w = s q + z. A panel-group is one run of bytes:
   codes (256 bytes for 4 bits, 512 for 8), then 16 s, then 16 z. Codes are laid out for vpdpbusd: 64 bytes are
   16 lanes (rows) of 4 consecutive features; 4-bit codes hold features 8c..8c+3 in the low nibbles of chunk c
   and 8c+4..8c+7 in the high ones.

   6-bit codes (Q6_K as stored: w = s (q - 32), a scale per row and 16 features) are the 4-bit layout's 256 bytes
   of low nibbles, then 128 bytes of the top two bits (bits 2k..2k+1 of byte j of the h-th 64 bytes belong to
   byte j of the 4h + k-th 64 bytes of codes, features 16h + 4k..), then 16 s of features 0-15 and 16 of 16-31.

   Per output y[m][n], over groups g in order:  y += (s * t) * dot(q, a) + z * (t * sum(a)),
   with dot(q, a) exact in int32; for 6 bits, per half h of the group: y += (s_h * t) * dot_h(q, a) +
   s_h * (-32 * t * sum_h(a)). Every output is computed by one thread in this fixed order, whatever M, the
   tile it falls in or the thread count: a row's bits never depend on the rows beside it. */

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define GROUP 32
#define PANEL 16
#define MR 8        /* rows of x per tile */
#define M_CHUNK 64  /* rows of x whose codes stay in cache while all panels pass over them */

static inline int64_t code_bytes(int bits) { return bits == 4 ? 256 : bits == 6 ? 384 : 512; }
static inline int64_t group_bytes(int bits) { return code_bytes(bits) + 4 * PANEL; }

/* 32 features' codes (round to nearest even, clamped to -127..127), their scale t and t * sum of the codes, and
   t * the sums of the first and the last 16 codes */
static inline void quantize_group(__m512 lo, __m512 hi, int8_t *codes, float *t, float *t_sum, float *t_halves,
                                  __m512i q[2]) {
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    float scale = amax / 127.0f;
    __m512 inverse = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    q[0] = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inverse));
    q[1] = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inverse));
    for (int h = 0; h < 2; h++) {
        q[h] = _mm512_max_epi32(_mm512_min_epi32(q[h], _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
        _mm_storeu_si128((__m128i *)(codes + 16 * h), _mm512_cvtepi32_epi8(q[h]));
    }
    *t = scale;
    *t_sum = scale * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1]));
    t_halves[0] = scale * (float)_mm512_reduce_add_epi32(q[0]);
    t_halves[1] = scale * (float)_mm512_reduce_add_epi32(q[1]);
}

/* codes a [M passes, K], scales t [M passes, K/32], t * sum(a) [M passes, K/32] and t * the sums of each group's
   halves [M passes, K/32, 2] of x [M, K]: with passes = 2, row m's codes are followed by those of what their
   rounding left, x - t a (each product and difference rounded once, as float32 arithmetic does it) */
void quantize_rows(const float *x, int64_t M, int64_t K, int8_t *a, float *t, float *t_sum, float *t_halves,
                   int passes, int threads) {
    int64_t G = K / GROUP;
#pragma omp parallel for schedule(static) num_threads(threads) if (M > 1)
    for (int64_t m = 0; m < M; m++) {
        for (int64_t g = 0; g < G; g++) {
            __m512 lo = _mm512_loadu_ps(x + m * K + g * GROUP), hi = _mm512_loadu_ps(x + m * K + g * GROUP + 16);
            int64_t row = m * passes, at = row * G + g;
            __m512i q[2];
            quantize_group(lo, hi, a + row * K + g * GROUP, t + at, t_sum + at, t_halves + 2 * at, q);
            if (passes == 2) {
                __m512 scale = _mm512_set1_ps(t[at]);
                lo = _mm512_sub_ps(lo, _mm512_mul_ps(_mm512_cvtepi32_ps(q[0]), scale));
                hi = _mm512_sub_ps(hi, _mm512_mul_ps(_mm512_cvtepi32_ps(q[1]), scale));
                quantize_group(lo, hi, a + (row + 1) * K + g * GROUP, t + at + G, t_sum + at + G,
                               t_halves + 2 * (at + G), q);
            }
        }
    }
}

static inline void load_codes(const uint8_t *block, int bits, __m512i w[8]) {
    if (bits == 4 || bits == 6) {
        const __m512i low = _mm512_set1_epi8(0x0F);
        for (int c = 0; c < 4; c++) {
            __m512i v = _mm512_loadu_si512(block + 64 * c);
            w[2 * c] = _mm512_and_si512(v, low);
            w[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        }
        if (bits == 6) {
            const __m512i top = _mm512_set1_epi8(0x30);
            for (int h = 0; h < 2; h++) {
                __m512i v = _mm512_loadu_si512(block + 256 + 64 * h);
                w[4 * h] = _mm512_or_si512(w[4 * h], _mm512_and_si512(_mm512_slli_epi16(v, 4), top));
                w[4 * h + 1] = _mm512_or_si512(w[4 * h + 1], _mm512_and_si512(_mm512_slli_epi16(v, 2), top));
                w[4 * h + 2] = _mm512_or_si512(w[4 * h + 2], _mm512_and_si512(v, top));
                w[4 * h + 3] = _mm512_or_si512(w[4 * h + 3], _mm512_and_si512(_mm512_srli_epi16(v, 2), top));
            }
        }
    } else {
        for (int i = 0; i < 8; i++) w[i] = _mm512_loadu_si512(block + 64 * i);
    }
}

/* rows [m0, m0 + rows) of y (rows <= MR) for one panel; inlined with `rows` and `bits` constants */
static inline __attribute__((always_inline)) void panel_tile(const int8_t *a, const float *t, const float *t_sum,
                                                             const float *t_halves, int64_t K, int64_t m0, int rows,
                                                             const uint8_t *panel, int bits, float *y, int64_t N,
                                                             int64_t n0, int passes) {
    int64_t G = K / GROUP, stride = group_bytes(bits);
    int halves = bits == 6 ? 2 : 1, per_half = 8 / halves;  /* a scale per half of the group (6 bits) or per group */
    __m512 acc[MR];
    for (int r = 0; r < MR; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        const uint8_t *block = panel + g * stride;
        __m512i w[8];
        load_codes(block, bits, w);
        for (int h = 0; h < halves; h++) {
            __m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(block + code_bytes(bits) + 32 * h)));
            __m512i dot[MR];
            for (int r = 0; r < MR; r++) dot[r] = _mm512_setzero_si512();
            for (int i = h * per_half; i < (h + 1) * per_half; i++) {
                for (int r = 0; r < MR; r++) {
                    if (r < rows) {
                        const int32_t *codes = (const int32_t *)(a + (m0 + r) * K + g * GROUP);
                        dot[r] = _mm512_dpbusd_epi32(dot[r], w[i], _mm512_set1_epi32(codes[i]));
                    }
                }
            }
            for (int r = 0; r < MR; r++) {
                if (r < rows) {
                    int64_t at = (m0 + r) * G + g;
                    __m512 st = _mm512_mul_ps(s, _mm512_set1_ps(t[at]));
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r]), st, acc[r]);
                    if (bits == 6) {  /* w = s (q - 32) */
                        acc[r] = _mm512_fmadd_ps(s, _mm512_set1_ps(-32.0f * t_halves[2 * at + h]), acc[r]);
                    } else {
                        __m512 z = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(block + code_bytes(bits) + 32)));
                        acc[r] = _mm512_fmadd_ps(z, _mm512_set1_ps(t_sum[at]), acc[r]);
                    }
                }
            }
        }
    }
    if (passes == 1) {
        for (int r = 0; r < rows; r++) _mm512_storeu_ps(y + (m0 + r) * N + n0, acc[r]);
    } else {  /* a row's two passes side by side (m0 and rows are even): their sum */
        for (int r = 0; r < rows; r += 2) _mm512_storeu_ps(y + (m0 + r) / 2 * N + n0, _mm512_add_ps(acc[r], acc[r + 1]));
    }
}

/* y [M / passes, N] float32 from the M quantized rows of quantize_rows and the weight panels [N/16, K/32, group
   bytes] */
#define TILE(ROWS, BITS) \
    static void tile_##ROWS##_##BITS(const int8_t *a, const float *t, const float *t_sum, const float *t_halves, \
                                     int64_t K, int64_t m0, const uint8_t *panel, float *y, int64_t N, int64_t n0, \
                                     int passes) { \
        panel_tile(a, t, t_sum, t_halves, K, m0, ROWS, panel, BITS, y, N, n0, passes); \
    }
#define TILES(BITS) TILE(1, BITS) TILE(2, BITS) TILE(3, BITS) TILE(4, BITS) TILE(5, BITS) TILE(6, BITS) \
    TILE(7, BITS) TILE(8, BITS) \
    static const tile_fn TILES_##BITS[MR + 1] = {0, tile_1_##BITS, tile_2_##BITS, tile_3_##BITS, tile_4_##BITS, \
                                                 tile_5_##BITS, tile_6_##BITS, tile_7_##BITS, tile_8_##BITS};

typedef void (*tile_fn)(const int8_t *, const float *, const float *, const float *, int64_t, int64_t,
                        const uint8_t *, float *, int64_t, int64_t, int);
TILES(4)
TILES(6)
TILES(8)

void matmul(const int8_t *a, const float *t, const float *t_sum, const float *t_halves, int64_t M, int64_t K,
            const uint8_t *weights, int bits, int64_t N, float *y, int passes, int threads) {
    const tile_fn *tiles = bits == 4 ? TILES_4 : bits == 6 ? TILES_6 : TILES_8;
    int64_t panels = N / PANEL, panel_bytes = (K / GROUP) * group_bytes(bits);
    for (int64_t chunk = 0; chunk < M; chunk += M_CHUNK) {
        int64_t chunk_end = chunk + M_CHUNK < M ? chunk + M_CHUNK : M;
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int64_t p = 0; p < panels; p++) {
            for (int64_t m0 = chunk; m0 < chunk_end; m0 += MR) {
                int rows = chunk_end - m0 < MR ? (int)(chunk_end - m0) : MR;
                tiles[rows](a, t, t_sum, t_halves, K, m0, weights + p * panel_bytes, y, N, p * PANEL, passes);
            }
        }
    }
}
