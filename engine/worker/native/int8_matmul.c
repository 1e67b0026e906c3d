/* y = x @ W.T for GGUF-quantized W, in integer arithmetic, as llama.cpp's Q4 x Q8 dot products do: under AVX-512
   VNNI (vpdpbusd) or under AVX2 (vpmaddubsw and vpmaddwd), one layout of the weights for both.

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
   s_h * (-32 * t * sum_h(a)). Under AVX2, 8-bit codes meet the activations as q - 128 (vpmaddubsw's unsigned
   operand cannot hold 255 without saturating its pairs), so there y += (s * t) * dot(q - 128, a) +
   (z + 128 s) * (t * sum(a)); 4 and 6 bits give the same bits under both. Every output is computed by one thread
   in this fixed order, whatever M, the tile it falls in or the thread count: a row's bits never depend on the
   rows beside it.

   The work: the rows of x a chunk at a time (M_CHUNK: their codes stay in cache), the panels split among the
   threads, each panel's rows a tile at a time (MR rows by the panel's 16 lanes).
   AVX-512 holds a panel's lanes in one zmm register and tiles of 8 rows. AVX2 holds them as two halves of 8 (the
   first and the last 32 bytes of every 64, the first and the last 8 of every 16 scales) and tiles of up to 8 rows,
   each broadcast of 4 activation codes meeting both halves; vpmaddubsw's pair sums of 4- and 6-bit products are
   added in int16 as far as they cannot overflow, then widened by vpmaddwd. Where a chunk holds more than
   UNPACK_ROWS rows (a prompt's), AVX2 first unpacks a 4- or 6-bit panel's codes into bytes laid out as 8-bit codes
   are, once for all its tiles of 4 rows. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "simd16.h"

#define GROUP 32
#define PANEL 16

static inline int64_t code_bytes(int bits) { return bits == 4 ? 256 : bits == 6 ? 384 : 512; }
static inline int64_t group_bytes(int bits) { return code_bytes(bits) + 4 * PANEL; }

/* 32 features' codes (round to nearest even, clamped to -127..127), their scale t and t * sum of the codes, and
   t * the sums of the first and the last 16 codes (integers under 2^24: their float sums are exact) */
static inline void quantize_group(vec16 lo, vec16 hi, int8_t *codes, float *t, float *t_sum, float *t_halves,
                                  vec16 q[2]) {
    float amax = vec16_reduce_max(vec16_max(vec16_abs(lo), vec16_abs(hi)));
    float scale = amax / 127.0f;
    vec16 inverse = vec16_set1(amax > 0 ? 127.0f / amax : 0.0f);
    q[0] = vec16_round(vec16_mul(lo, inverse));
    q[1] = vec16_round(vec16_mul(hi, inverse));
    for (int h = 0; h < 2; h++) {
        q[h] = vec16_max(vec16_min(q[h], vec16_set1(127.0f)), vec16_set1(-127.0f));
        vec16_store_int8(codes + 16 * h, q[h]);
    }
    *t = scale;
    *t_sum = scale * vec16_reduce_add(vec16_add(q[0], q[1]));
    t_halves[0] = scale * vec16_reduce_add(q[0]);
    t_halves[1] = scale * vec16_reduce_add(q[1]);
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
            vec16 lo = vec16_load(x + m * K + g * GROUP), hi = vec16_load(x + m * K + g * GROUP + 16);
            int64_t row = m * passes, at = row * G + g;
            vec16 q[2];
            quantize_group(lo, hi, a + row * K + g * GROUP, t + at, t_sum + at, t_halves + 2 * at, q);
            if (passes == 2) {
                vec16 scale = vec16_set1(t[at]);
                lo = vec16_sub(lo, vec16_mul(q[0], scale));
                hi = vec16_sub(hi, vec16_mul(q[1], scale));
                quantize_group(lo, hi, a + (row + 1) * K + g * GROUP, t + at + G, t_sum + at + G,
                               t_halves + 2 * (at + G), q);
            }
        }
    }
}

/* A tile: rows [m0, m0 + rows) of y for one panel. Each ISA's panel_tile is inlined into a function per row count
   and form of codes (its constants after ROWS), and those into a table by row count. */
#define TILE_PARAMS const int8_t *a, const float *t, const float *t_sum, const float *t_halves, int64_t K, \
                    int64_t m0, const uint8_t *panel, float *y, int64_t N, int64_t n0, int passes
typedef void (*tile_fn)(TILE_PARAMS);
#define TILE(NAME, ROWS, ...) \
    static void tile_##NAME##_##ROWS(TILE_PARAMS) { \
        panel_tile(a, t, t_sum, t_halves, K, m0, panel, y, N, n0, passes, ROWS, __VA_ARGS__); \
    }
#define TILES_UP_TO_4(NAME, ...) TILE(NAME, 1, __VA_ARGS__) TILE(NAME, 2, __VA_ARGS__) TILE(NAME, 3, __VA_ARGS__) \
    TILE(NAME, 4, __VA_ARGS__)
#define M_CHUNK 64  /* rows of x whose codes stay in cache while all panels pass over them */

/* rows [m0, m1) of y for one panel, tile by tile (tiles: by row count, up to mr) */
static void tile_rows(const tile_fn *tiles, int mr, const int8_t *a, const float *t, const float *t_sum,
                      const float *t_halves, int64_t K, int64_t m0, int64_t m1, const uint8_t *panel, float *y,
                      int64_t N, int64_t n0, int passes) {
    for (int64_t m = m0; m < m1; m += mr)
        tiles[m1 - m < mr ? m1 - m : mr](a, t, t_sum, t_halves, K, m, panel, y, N, n0, passes);
}

#if defined(__AVX512VNNI__)

#define MR 8  /* rows of x per tile */

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
static inline __attribute__((always_inline)) void panel_tile(TILE_PARAMS, int rows, int bits) {
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

#define TILES(NAME, ...) TILES_UP_TO_4(NAME, __VA_ARGS__) TILE(NAME, 5, __VA_ARGS__) TILE(NAME, 6, __VA_ARGS__) \
    TILE(NAME, 7, __VA_ARGS__) TILE(NAME, 8, __VA_ARGS__) \
    static const tile_fn TILES_##NAME[MR + 1] = {0, tile_##NAME##_1, tile_##NAME##_2, tile_##NAME##_3, \
        tile_##NAME##_4, tile_##NAME##_5, tile_##NAME##_6, tile_##NAME##_7, tile_##NAME##_8};
TILES(4, 4)
TILES(6, 6)
TILES(8, 8)

static inline int64_t scratch_bytes(int bits, int64_t K, int64_t rows) { (void)bits, (void)K, (void)rows; return 0; }

/* rows [m0, m1) of y for one panel */
static void panel_rows(const int8_t *a, const float *t, const float *t_sum, const float *t_halves, int64_t K,
                       int64_t m0, int64_t m1, const uint8_t *panel, int bits, float *y, int64_t N, int64_t n0,
                       int passes, uint8_t *scratch) {
    (void)scratch;
    tile_rows(bits == 4 ? TILES_4 : bits == 6 ? TILES_6 : TILES_8, MR, a, t, t_sum, t_halves, K, m0, m1, panel, y,
              N, n0, passes);
}

#else  /* AVX2: a panel's 16 lanes as two halves of 8 */

/* Rows of x per tile over the codes as stored. A tile's 16 int sums and 16 float sums do not all fit the 16 ymm
   registers, and GCC keeps some in L1; its codes are unpacked from nibbles once for its 8 rows. On the EPYC (Zen 3)
   a thread's 4-bit product of 8 rows (a fork's decode step) went from 25 multiply-adds a cycle with tiles of 4 over a
   panel unpacked once to 31 (6 bits: 15 to 20.5), against a bound of about 39 there (vpmaddubsw, vpmaddwd, the
   conversions and the float multiply-adds share two of the four vector pipes). */
#define MR 8
#define UNPACK_ROWS 32  /* rows of a chunk past which its 4- and 6-bit panels are unpacked once: tiles of 4 rows */
#define UNPACKED_MR 4

/* Codes read straight from the panels (a decode's few rows) are asked for this many groups ahead: on the 2-core
   EPYC (Zen 3) a thread's stream of 4-, 6- and 8-bit panels went from 12-16 GB/s with the hardware's prefetchers
   alone to 14-20 */
#define PREFETCH_GROUPS 8

static inline void prefetch(const uint8_t *from, int64_t bytes) {
    for (int64_t at = 0; at < bytes; at += 64) _mm_prefetch((const char *)from + at, _MM_HINT_T0);
}

/* one row's 4 activation codes from feature 4i of group g, in every 32-bit lane */
#define CODES(r, i) _mm256_set1_epi32(((const int32_t *)(a + (m0 + (r)) * K + g * GROUP))[i])
/* loops GCC would otherwise keep, with their sums in memory */
#define UNROLLED _Pragma("GCC unroll 8")
/* an integer sum held in its register here: without it, GCC regroups the sums of a group's products, computes
   all the products first and spills them */
#define PIN(v) __asm__("" : "+x"(v))

/* The codes of features 4i..4i+3 in lanes 8h..8h+7 of a panel-group, as unsigned bytes: from 4-, 6- or 8-bit codes
   as stored, or (unpacked) from bytes laid out as 8-bit codes are (unpack_panel) */
static inline __attribute__((always_inline)) __m256i code_chunk(const uint8_t *block, int bits, int unpacked, int i,
                                                                int h) {
    if (unpacked || bits == 8) return _mm256_loadu_si256((const __m256i *)(block + 64 * i + 32 * h));
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256i v = _mm256_loadu_si256((const __m256i *)(block + 64 * (i / 2) + 32 * h));
    __m256i q = i % 2 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), low) : _mm256_and_si256(v, low);
    if (bits == 6) {  /* the top bits of chunk 4f + k sit at bits 2k..2k+1 of top bytes f: moved to bits 4..5 */
        __m256i top = _mm256_loadu_si256((const __m256i *)(block + 256 + 64 * (i / 4) + 32 * h));
        int k = i % 4;
        top = k == 0 ? _mm256_slli_epi16(top, 4) : k == 1 ? _mm256_slli_epi16(top, 2)
                                                   : k == 2 ? top : _mm256_srli_epi16(top, 2);
        q = _mm256_or_si256(q, _mm256_and_si256(top, _mm256_set1_epi8(0x30)));
    }
    return q;
}

/* one row's products of 4- or 6-bit codes lo and hi (features 4i.. and 4i + 4..) and activations b0 and b1, their
   pairs summed in int16 (exact: see panel_group) */
static inline __m256i pairs(__m256i lo, __m256i b0, __m256i hi, __m256i b1) {
    return _mm256_add_epi16(_mm256_maddubs_epi16(lo, b0), _mm256_maddubs_epi16(hi, b1));
}

/* acc[h][r] += group g's terms (the header's order) for the lanes 8h..8h+7 of rows [m0, m0 + rows): each
   broadcast of 4 activation codes meets both halves. The int16 sums are exact: a pair of 4-bit products is at most
   2 * 15 * 127 and eight pairs 30,480; a pair of 6-bit ones at most 16,002 and two pairs 32,004 (< 32,767); an
   8-bit pair |q - 128| * (+-a) at most 2 * 128 * 127, widened at once. */
static inline __attribute__((always_inline)) void panel_group(const int8_t *a, const float *t, const float *t_sum,
                                                              const float *t_halves, int64_t K, int64_t m0, int rows,
                                                              const uint8_t *block, int bits, int unpacked, int64_t g,
                                                              __m256 acc[2][MR]) {
    int64_t G = K / GROUP;
    const __m256i ones = _mm256_set1_epi16(1);
    const uint8_t *scales = block + (unpacked ? code_bytes(8) : code_bytes(bits));
    __m256i sum[2][MR];  /* int16 pairs (4 bits) or int32 dots (6 and 8 bits) */
    if (bits == 4) {
        UNROLLED for (int c = 0; c < 4; c++) {
            __m256i lo[2], hi[2];
            UNROLLED for (int h = 0; h < 2; h++) {
                lo[h] = code_chunk(block, 4, unpacked, 2 * c, h);
                hi[h] = code_chunk(block, 4, unpacked, 2 * c + 1, h);
            }
            UNROLLED for (int r = 0; r < rows; r++) {
                __m256i b0 = CODES(r, 2 * c), b1 = CODES(r, 2 * c + 1);
                UNROLLED for (int h = 0; h < 2; h++) {
                    __m256i p = pairs(lo[h], b0, hi[h], b1);
                    sum[h][r] = c == 0 ? p : _mm256_add_epi16(sum[h][r], p);
                    PIN(sum[h][r]);
                }
            }
        }
        UNROLLED for (int h = 0; h < 2; h++) {
            __m256 s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + 16 * h)));
            __m256 z = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + 32 + 16 * h)));
            UNROLLED for (int r = 0; r < rows; r++) {
                int64_t at = (m0 + r) * G + g;
                __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(sum[h][r], ones));
                acc[h][r] = _mm256_fmadd_ps(dot, _mm256_mul_ps(s, _mm256_set1_ps(t[at])), acc[h][r]);
                acc[h][r] = _mm256_fmadd_ps(z, _mm256_set1_ps(t_sum[at]), acc[h][r]);
            }
        }
    } else if (bits == 6) {
        UNROLLED for (int f = 0; f < 2; f++) {  /* features 16f..16f+15, codes chunks 4f..4f+3, scales s_f */
            UNROLLED for (int c = 0; c < 2; c++) {
                __m256i lo[2], hi[2];
                UNROLLED for (int h = 0; h < 2; h++) {
                    lo[h] = code_chunk(block, 6, unpacked, 4 * f + 2 * c, h);
                    hi[h] = code_chunk(block, 6, unpacked, 4 * f + 2 * c + 1, h);
                }
                UNROLLED for (int r = 0; r < rows; r++) {
                    __m256i b0 = CODES(r, 4 * f + 2 * c), b1 = CODES(r, 4 * f + 2 * c + 1);
                    UNROLLED for (int h = 0; h < 2; h++) {
                        __m256i d = _mm256_madd_epi16(pairs(lo[h], b0, hi[h], b1), ones);
                        sum[h][r] = c == 0 ? d : _mm256_add_epi32(sum[h][r], d);
                        PIN(sum[h][r]);
                    }
                }
            }
            UNROLLED for (int h = 0; h < 2; h++) {
                __m256 s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + 32 * f + 16 * h)));
                UNROLLED for (int r = 0; r < rows; r++) {
                    int64_t at = (m0 + r) * G + g;
                    __m256 dot = _mm256_cvtepi32_ps(sum[h][r]);
                    acc[h][r] = _mm256_fmadd_ps(dot, _mm256_mul_ps(s, _mm256_set1_ps(t[at])), acc[h][r]);
                    acc[h][r] = _mm256_fmadd_ps(s, _mm256_set1_ps(-32.0f * t_halves[2 * at + f]), acc[h][r]);
                }
            }
        }
    } else {
        UNROLLED for (int i = 0; i < 8; i++) {
            __m256i w[2], magnitude[2];
            UNROLLED for (int h = 0; h < 2; h++) {
                w[h] = _mm256_xor_si256(code_chunk(block, 8, 0, i, h), _mm256_set1_epi8((char)0x80));  /* q - 128 */
                magnitude[h] = _mm256_abs_epi8(w[h]);  /* |q - 128| <= 128: unsigned */
            }
            UNROLLED for (int r = 0; r < rows; r++) {
                __m256i b = CODES(r, i);
                UNROLLED for (int h = 0; h < 2; h++) {
                    __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude[h], _mm256_sign_epi8(b, w[h])), ones);
                    sum[h][r] = i == 0 ? d : _mm256_add_epi32(sum[h][r], d);
                    PIN(sum[h][r]);
                }
            }
        }
        UNROLLED for (int h = 0; h < 2; h++) {
            __m256 s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + 16 * h)));
            __m256 z = _mm256_add_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(scales + 32 + 16 * h))),
                                     _mm256_mul_ps(s, _mm256_set1_ps(128.0f)));  /* 0 for every z the packer writes */
            UNROLLED for (int r = 0; r < rows; r++) {
                int64_t at = (m0 + r) * G + g;
                __m256 dot = _mm256_cvtepi32_ps(sum[h][r]);
                acc[h][r] = _mm256_fmadd_ps(dot, _mm256_mul_ps(s, _mm256_set1_ps(t[at])), acc[h][r]);
                acc[h][r] = _mm256_fmadd_ps(z, _mm256_set1_ps(t_sum[at]), acc[h][r]);
            }
        }
    }
}

/* rows [m0, m0 + rows) of y (rows <= MR) for one panel, its codes as stored or unpacked to bytes; inlined with
   `rows`, `bits` and `unpacked` constants */
static inline __attribute__((always_inline)) void panel_tile(TILE_PARAMS, int rows, int bits, int unpacked) {
    int64_t G = K / GROUP, stride = group_bytes(unpacked ? 8 : bits);
    __m256 acc[2][MR];
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < MR; r++) acc[h][r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        if (!unpacked) prefetch(panel + (g + PREFETCH_GROUPS) * stride, stride);
        panel_group(a, t, t_sum, t_halves, K, m0, rows, panel + g * stride, bits, unpacked, g, acc);
    }
    for (int h = 0; h < 2; h++) {
        float *out = y + n0 + 8 * h;
        if (passes == 1) {
            for (int r = 0; r < rows; r++) _mm256_storeu_ps(out + (m0 + r) * N, acc[h][r]);
        } else {  /* a row's two passes side by side (m0 and rows are even): their sum */
            for (int r = 0; r < rows; r += 2)
                _mm256_storeu_ps(out + (m0 + r) / 2 * N, _mm256_add_ps(acc[h][r], acc[h][r + 1]));
        }
    }
}

#define TILES(NAME, ...) TILES_UP_TO_4(NAME, __VA_ARGS__) TILE(NAME, 5, __VA_ARGS__) TILE(NAME, 6, __VA_ARGS__) \
    TILE(NAME, 7, __VA_ARGS__) TILE(NAME, 8, __VA_ARGS__) \
    static const tile_fn TILES_##NAME[MR + 1] = {0, tile_##NAME##_1, tile_##NAME##_2, tile_##NAME##_3, \
        tile_##NAME##_4, tile_##NAME##_5, tile_##NAME##_6, tile_##NAME##_7, tile_##NAME##_8};
#define UNPACKED_TILES(NAME, ...) TILES_UP_TO_4(NAME, __VA_ARGS__) \
    static const tile_fn TILES_##NAME[UNPACKED_MR + 1] = {0, tile_##NAME##_1, tile_##NAME##_2, tile_##NAME##_3, \
                                                          tile_##NAME##_4};
TILES(4, 4, 0)
TILES(6, 6, 0)
TILES(8, 8, 0)
UNPACKED_TILES(4_unpacked, 4, 1)
UNPACKED_TILES(6_unpacked, 6, 1)

/* 4- and 6-bit panels are unpacked once for all the tiles of more than UNPACK_ROWS rows: bytes for their codes */
static inline int64_t scratch_bytes(int bits, int64_t K, int64_t rows) {
    return bits != 8 && rows > UNPACK_ROWS ? (K / GROUP) * group_bytes(8) : 0;
}

/* A panel's codes as bytes in the 8-bit layout, each group's scales after them as they were */
static void unpack_panel(const uint8_t *panel, int bits, int64_t G, uint8_t *out) {
    for (int64_t g = 0; g < G; g++) {
        const uint8_t *block = panel + g * group_bytes(bits);
        uint8_t *bytes = out + g * group_bytes(8);
        prefetch(block + PREFETCH_GROUPS * group_bytes(bits), group_bytes(bits));
        for (int i = 0; i < 8; i++)
            for (int h = 0; h < 2; h++)
                _mm256_storeu_si256((__m256i *)(bytes + 64 * i + 32 * h),
                                    bits == 4 ? code_chunk(block, 4, 0, i, h) : code_chunk(block, 6, 0, i, h));
        for (int j = 0; j < 4 * PANEL; j++) bytes[code_bytes(8) + j] = block[code_bytes(bits) + j];
    }
}

/* rows [m0, m1) of y for one panel, tile by tile; scratch: scratch_bytes(bits, K, m1 - m0) of them */
static void panel_rows(const int8_t *a, const float *t, const float *t_sum, const float *t_halves, int64_t K,
                       int64_t m0, int64_t m1, const uint8_t *panel, int bits, float *y, int64_t N, int64_t n0,
                       int passes, uint8_t *scratch) {
    const tile_fn *tiles = bits == 4 ? TILES_4 : bits == 6 ? TILES_6 : TILES_8;
    if (scratch != 0) {
        unpack_panel(panel, bits, K / GROUP, scratch);
        tiles = bits == 4 ? TILES_4_unpacked : TILES_6_unpacked;
        panel = scratch;
    }
    tile_rows(tiles, scratch != 0 ? UNPACKED_MR : MR, a, t, t_sum, t_halves, K, m0, m1, panel, y, N, n0, passes);
}

#endif

/* y [M / passes, N] float32 from the M quantized rows of quantize_rows and the weight panels [N/16, K/32, group
   bytes]: a chunk of rows at a time, the panels split among the threads */
void matmul(const int8_t *a, const float *t, const float *t_sum, const float *t_halves, int64_t M, int64_t K,
            const uint8_t *weights, int bits, int64_t N, float *y, int passes, int threads) {
    int64_t panels = N / PANEL, panel_bytes = (K / GROUP) * group_bytes(bits);
    for (int64_t chunk = 0; chunk < M; chunk += M_CHUNK) {
        int64_t chunk_end = chunk + M_CHUNK < M ? chunk + M_CHUNK : M;
#pragma omp parallel num_threads(threads)
        {
            int64_t bytes = scratch_bytes(bits, K, chunk_end - chunk);
            uint8_t *scratch = bytes ? malloc(bytes) : 0;
#pragma omp for schedule(static)
            for (int64_t p = 0; p < panels; p++)
                panel_rows(a, t, t_sum, t_halves, K, chunk, chunk_end, weights + p * panel_bytes, bits, y, N,
                           p * PANEL, passes, scratch);
            free(scratch);
        }
    }
}
