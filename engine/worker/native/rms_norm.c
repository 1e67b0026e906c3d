/* RMS norm of float32 rows: y = x / sqrt(mean(x^2) + eps) * w, as one call instead of torch's CPU composite (about
   ten operators a norm). A row's sum of squares runs in 16 lanes from its start and then one fixed tree
   (simd16.h), so its bits depend on the row alone, and are the same under AVX-512 and AVX2. */

#include <math.h>
#include <stdint.h>

#include "simd16.h"

void rms_norm(const float *x, int64_t rows, int64_t size, const float *w, float eps, float *y, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (rows > 1)
    for (int64_t m = 0; m < rows; m++) {
        const float *row = x + m * size;
        vec16 squares = vec16_zero();
        for (int64_t j = 0; j < size; j += 16) {
            vec16 v = vec16_load_first(row + j, size - j);
            squares = vec16_fmadd(v, v, squares);
        }
        vec16 scale = vec16_set1(1.0f / sqrtf(vec16_reduce_add(squares) / (float)size + eps));
        for (int64_t j = 0; j < size; j += 16) {
            vec16 v = vec16_mul(vec16_load_first(row + j, size - j), scale);
            vec16_store_first(y + m * size + j, vec16_mul(v, vec16_load_first(w + j, size - j)), size - j);
        }
    }
}
