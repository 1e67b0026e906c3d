/* RMS norm of float32 rows: y = x / sqrt(mean(x^2) + eps) * w, as one call instead of torch's CPU composite (about
   ten operators a norm). A row's sum of squares runs in 16 lanes from its start and then one fixed tree, so its
   bits depend on the row alone. */

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

void rms_norm(const float *x, int64_t rows, int64_t size, const float *w, float eps, float *y, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (rows > 1)
    for (int64_t m = 0; m < rows; m++) {
        const float *row = x + m * size;
        __m512 squares = _mm512_setzero_ps();
        for (int64_t j = 0; j < size; j += 16) {
            __mmask16 valid = size - j >= 16 ? 0xFFFF : (__mmask16)((1u << (size - j)) - 1);
            __m512 v = _mm512_maskz_loadu_ps(valid, row + j);
            squares = _mm512_fmadd_ps(v, v, squares);
        }
        __m512 scale = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(squares) / (float)size + eps));
        for (int64_t j = 0; j < size; j += 16) {
            __mmask16 valid = size - j >= 16 ? 0xFFFF : (__mmask16)((1u << (size - j)) - 1);
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(valid, row + j), scale);
            _mm512_mask_storeu_ps(y + m * size + j, valid, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(valid, w + j)));
        }
    }
}
