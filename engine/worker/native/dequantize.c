/* The weights of int8_matmul.c's panels written out as a dense bfloat16 matrix W [N, K], for the prompt rows that
   a library's dense matmul runs faster (kernel_choice.py): w = s q + z per row and 32 features (4 and 8 bits), or
   w = s_h (q - 32) per row and 16 features (6 bits), each w computed in float32 as the kernels' layout says
   (int8_matmul.c's header) and rounded to bfloat16 to nearest even. One panel at a time, the panels split among the
   threads. */

#include <stdint.h>
#include <string.h>

#include "simd16.h"

#define GROUP 32
#define PANEL 16

static inline int64_t code_bytes(int bits) { return bits == 4 ? 256 : bits == 6 ? 384 : 512; }

static inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

/* the code of lane n, feature f (0..31) of one panel-group */
static inline int code_of(const uint8_t *block, int bits, int n, int f) {
    if (bits == 8) return block[64 * (f / 4) + 4 * n + f % 4];
    int c = f / 8, within = f % 8;  /* chunk c: features 8c..8c+3 in the low nibbles, 8c+4..8c+7 in the high */
    int q = (block[64 * c + 4 * n + within % 4] >> (within < 4 ? 0 : 4)) & 15;
    if (bits == 6) {  /* 64 bytes h: byte 4n + j holds, at bits 2k, the top bits of feature 16h + 4k + j */
        int h = f / 16, k = (f % 16) / 4, j = f % 4;
        q |= ((block[256 + 64 * h + 4 * n + j] >> (2 * k)) & 3) << 4;
    }
    return q;
}

void dequantize_panels(const uint8_t *weights, int bits, int64_t N, int64_t K, uint16_t *w, int threads) {
    int64_t G = K / GROUP, stride = code_bytes(bits) + 4 * PANEL, panels = N / PANEL;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t p = 0; p < panels; p++) {
        for (int64_t g = 0; g < G; g++) {
            const uint8_t *block = weights + (p * G + g) * stride;
            const uint16_t *halves = (const uint16_t *)(block + code_bytes(bits));
            for (int n = 0; n < PANEL; n++) {
                uint16_t *row = w + (p * PANEL + n) * K + g * GROUP;
                for (int f = 0; f < GROUP; f++) {
                    int q = code_of(block, bits, n, f);
                    float value = bits == 6 ? half_to_float(halves[PANEL * (f / 16) + n]) * (float)(q - 32)
                                            : half_to_float(halves[n]) * (float)q + half_to_float(halves[PANEL + n]);
                    row[f] = to_bf16(value);
                }
            }
        }
    }
}
