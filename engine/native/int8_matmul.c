/* y = x @ W.T for GGUF-quantized W, in integer arithmetic (AVX-512 VNNI), as llama.cpp's Q4 x Q8 dot products do.

   Activations: each row of x (float32, [M, K]) is quantized per block of 32 features to int8 codes a in -127..127
   with a float scale t = max|x| / 127 (round to nearest even). Only the row itself decides its codes.

   Weights: 16 output rows (a panel) by 32 input features (a group) at a time, as unsigned codes q (4 or 8 bits)
   with a float16 scale s and zero z per row and group: w = s q + z. A panel-group is one run of bytes:
   codes (256 bytes for 4 bits, 512 for 8), then 16 s, then 16 z. Codes are laid out for vpdpbusd: 64 bytes are
   16 lanes (rows) of 4 consecutive features; 4-bit codes hold features 8c..8c+3 in the low nibbles of chunk c
   and 8c+4..8c+7 in the high ones.

   Per output y[m][n], over groups g in order:  y += (s * t) * dot(q, a) + z * (t * sum(a)),
   with dot(q, a) exact in int32. Every output is computed by one thread in this fixed order, whatever M, the
   tile it falls in or the thread count: a row's bits never depend on the rows beside it. */

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define GROUP 32
#define PANEL 16
#define MR 8        /* rows of x per tile */
#define M_CHUNK 64  /* rows of x whose codes stay in cache while all panels pass over them */

static inline int64_t group_bytes(int bits) { return (bits == 4 ? 256 : 512) + 4 * PANEL; }

/* codes a [M, K], scales t [M, K/32] and t * sum(a) [M, K/32] */
void quantize_rows(const float *x, int64_t M, int64_t K, int8_t *a, float *t, float *t_sum, int threads) {
    int64_t G = K / GROUP;
#pragma omp parallel for schedule(static) num_threads(threads) if (M > 1)
    for (int64_t m = 0; m < M; m++) {
        for (int64_t g = 0; g < G; g++) {
            const float *block = x + m * K + g * GROUP;
            __m512 lo = _mm512_loadu_ps(block), hi = _mm512_loadu_ps(block + 16);
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
            float scale = amax / 127.0f;
            __m512 inverse = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
            __m512i qlo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inverse));  /* round to nearest even */
            __m512i qhi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inverse));
            qlo = _mm512_max_epi32(_mm512_min_epi32(qlo, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
            qhi = _mm512_max_epi32(_mm512_min_epi32(qhi, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
            _mm_storeu_si128((__m128i *)(a + m * K + g * GROUP), _mm512_cvtepi32_epi8(qlo));
            _mm_storeu_si128((__m128i *)(a + m * K + g * GROUP + 16), _mm512_cvtepi32_epi8(qhi));
            int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qlo, qhi));
            t[m * G + g] = scale;
            t_sum[m * G + g] = scale * (float)sum;
        }
    }
}

static inline void load_codes(const uint8_t *block, int bits, __m512i w[8]) {
    if (bits == 4) {
        const __m512i low = _mm512_set1_epi8(0x0F);
        for (int c = 0; c < 4; c++) {
            __m512i v = _mm512_loadu_si512(block + 64 * c);
            w[2 * c] = _mm512_and_si512(v, low);
            w[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        }
    } else {
        for (int i = 0; i < 8; i++) w[i] = _mm512_loadu_si512(block + 64 * i);
    }
}

/* rows [m0, m0 + rows) of y (rows <= MR) for one panel; inlined with `rows` a constant */
static inline __attribute__((always_inline)) void panel_tile(const int8_t *a, const float *t, const float *t_sum, int64_t K, int64_t m0, int rows,
                              const uint8_t *panel, int bits, float *y, int64_t N, int64_t n0) {
    int64_t G = K / GROUP, stride = group_bytes(bits), code_bytes = bits == 4 ? 256 : 512;
    __m512 acc[MR];
    for (int r = 0; r < MR; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        const uint8_t *block = panel + g * stride;
        __m512i w[8];
        load_codes(block, bits, w);
        __m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(block + code_bytes)));
        __m512 z = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(block + code_bytes + 32)));
        __m512i dot[MR];
        for (int r = 0; r < MR; r++) dot[r] = _mm512_setzero_si512();
        for (int i = 0; i < 8; i++) {
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
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r]), _mm512_mul_ps(s, _mm512_set1_ps(t[at])), acc[r]);
                acc[r] = _mm512_fmadd_ps(z, _mm512_set1_ps(t_sum[at]), acc[r]);
            }
        }
    }
    for (int r = 0; r < rows; r++) _mm512_storeu_ps(y + (m0 + r) * N + n0, acc[r]);
}

/* y [M, N] float32 from the quantized rows of quantize_rows and the weight panels [N/16, K/32, group bytes] */
#define TILE(ROWS, BITS) \
    static void tile_##ROWS##_##BITS(const int8_t *a, const float *t, const float *t_sum, int64_t K, int64_t m0, \
                                     const uint8_t *panel, float *y, int64_t N, int64_t n0) { \
        panel_tile(a, t, t_sum, K, m0, ROWS, panel, BITS, y, N, n0); \
    }
#define TILES(BITS) TILE(1, BITS) TILE(2, BITS) TILE(3, BITS) TILE(4, BITS) TILE(5, BITS) TILE(6, BITS) \
    TILE(7, BITS) TILE(8, BITS)
TILES(4)
TILES(8)

typedef void (*tile_fn)(const int8_t *, const float *, const float *, int64_t, int64_t, const uint8_t *, float *,
                        int64_t, int64_t);
static const tile_fn TILES_4[MR + 1] = {0, tile_1_4, tile_2_4, tile_3_4, tile_4_4, tile_5_4, tile_6_4, tile_7_4,
                                        tile_8_4};
static const tile_fn TILES_8[MR + 1] = {0, tile_1_8, tile_2_8, tile_3_8, tile_4_8, tile_5_8, tile_6_8, tile_7_8,
                                        tile_8_8};

void matmul(const int8_t *a, const float *t, const float *t_sum, int64_t M, int64_t K, const uint8_t *weights,
            int bits, int64_t N, float *y, int threads) {
    const tile_fn *tiles = bits == 4 ? TILES_4 : TILES_8;
    int64_t panels = N / PANEL, panel_bytes = (K / GROUP) * group_bytes(bits);
    for (int64_t chunk = 0; chunk < M; chunk += M_CHUNK) {
        int64_t chunk_end = chunk + M_CHUNK < M ? chunk + M_CHUNK : M;
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int64_t p = 0; p < panels; p++) {
            for (int64_t m0 = chunk; m0 < chunk_end; m0 += MR) {
                int rows = chunk_end - m0 < MR ? (int)(chunk_end - m0) : MR;
                tiles[rows](a, t, t_sum, K, m0, weights + p * panel_bytes, y, N, p * PANEL);
            }
        }
    }
}
