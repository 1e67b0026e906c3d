/* Paged attention on the CPU (AVX-512 or AVX2, through simd16.h): softmax(scale q k^T) v for every new token of a
   step, its keys and values read in place from the KV cache's blocks through its sequence's block table.

   The cache of a layer is [num_blocks, block_size, kv_heads, dim], float32 or bfloat16 (widened exactly). A token
   at position p sees the keys at positions lo..p, lo = 0 or, with a sliding window w, max(0, p - w + 1).

   One work item is one token and one KV head: its query heads share the keys' addresses, found once, and take turns
   over each block of keys, which is read from memory once for them all. Every head is computed in one fixed order:
   the scores 16 keys at a time from lo (each a dot product in 16 lanes, its lanes summed in simd16.h's tree), their
   maximum, exp and sum in runs of 16 from lo, then the values weighted, even and odd keys in two sums added at the
   end. Nothing in that order depends on the other tokens of the step, on whether the token is decoded or
   prefilled, or on the thread count: a token's bits are a function of its query and the keys and values it sees
   (and the same under AVX-512 and AVX2). */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "simd16.h"

#define LANES 16
#define MAX_DIM 256
#define VALUE_BLOCK 32 /* values a pass reads for every head of a group before the next ones: they stay in L1 */
#define VALUE_STEP (VEC16_REGISTERS / 4)  /* vectors of a head's output summed at once, even and odd keys */

static inline vec16 load_lanes(const void *p, int bf16) { return bf16 ? vec16_load_bf16(p) : vec16_load(p); }

/* Rows [i0, i1) of a cache's at byte offsets at[i] as float32 rows of dim = 16 nd: where they lie (float32), or
   widened into `widened` [VALUE_BLOCK, dim] (bfloat16), once for every head of the group */
static inline __attribute__((always_inline)) void float_rows(const char *cache, const int64_t *at, int64_t i0,
                                                             int64_t i1, int64_t last, const int nd, const int bf16,
                                                             float *widened, const float *row[]) {
    for (int64_t i = i0; i < i1; i++) {
        const char *from = cache + at[i < last ? i : last];  /* past the last: a row whose result is not kept */
        if (!bf16) {
            row[i - i0] = (const float *)from;
            continue;
        }
        float *to = widened + (i - i0) * LANES * nd;
        for (int d = 0; d < nd; d++) vec16_store(to + LANES * d, vec16_load_bf16(from + 2 * LANES * d));
        row[i - i0] = to;
    }
}

/* e^x in 16 lanes for x <= 0 (Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial in r, times 2^n) */
static inline vec16 exp_lanes(vec16 x) {
    x = vec16_max(x, vec16_set1(-87.0f));
    vec16 n = vec16_round(vec16_mul(x, vec16_set1(1.44269504088896341f)));
    vec16 r = vec16_fnmadd(n, vec16_set1(0.693359375f), x);
    r = vec16_fnmadd(n, vec16_set1(-2.12194440e-4f), r);
    vec16 p = vec16_set1(1.9875691500e-4f);
    p = vec16_fmadd(p, r, vec16_set1(1.3981999507e-3f));
    p = vec16_fmadd(p, r, vec16_set1(8.3334519073e-3f));
    p = vec16_fmadd(p, r, vec16_set1(4.1665795894e-2f));
    p = vec16_fmadd(p, r, vec16_set1(1.6666665459e-1f));
    p = vec16_fmadd(p, r, vec16_set1(5.0000001201e-1f));
    p = vec16_fmadd(p, vec16_mul(r, r), vec16_add(r, vec16_set1(1.0f)));
    return vec16_scale2(p, n);
}


/* The `group` query heads q [group, dim] of one KV head over the keys at byte offsets key_at[0..n) of the K and V
   caches: each head's scores into its row of s [group, stride], then exp(s - max) in place, and its output o
   [group, dim = 16 nd]. The heads take turns over each 16 keys and each VALUE_BLOCK values, so the keys and values
   are read from memory (and widened: `widened` [VALUE_BLOCK, dim]) once for the group; each head's arithmetic is
   the same, in the same order, as it would be alone. */
static inline __attribute__((always_inline)) void attend_group(const float *q, const char *k, const char *v,
                                                               const int64_t *key_at, int64_t n, float scale,
                                                               float *s, int64_t stride, float *o, float *acc_at,
                                                               float *widened, int64_t group, const int nd,
                                                               const int bf16) {
    const int element = bf16 ? 2 : 4;
    const float *row[VALUE_BLOCK];
    for (int64_t j0 = 0; j0 < n; j0 += LANES) {  /* 16 keys at a time, their sums in one tree */
        float_rows(k, key_at, j0, j0 + LANES, n - 1, nd, bf16, widened, row);
        for (int64_t h = 0; h < group; h++) {
            vec16 query[nd], dots[LANES];
            for (int d = 0; d < nd; d++) query[d] = vec16_load(q + h * LANES * nd + LANES * d);
            for (int i = 0; i < LANES; i++) {
                vec16 dot = vec16_zero();
                for (int d = 0; d < nd; d++) dot = vec16_fmadd(query[d], vec16_load(row[i] + LANES * d), dot);
                dots[i] = dot;
            }
            vec16_store_first(s + h * stride + j0, vec16_mul(vec16_sum16(dots), vec16_set1(scale)), n - j0);
        }
    }
    float sums[group];
    for (int64_t h = 0; h < group; h++) {
        float *sh = s + h * stride;
        vec16 most = vec16_set1(-INFINITY);
        for (int64_t j = 0; j < n; j += LANES)
            most = vec16_first_else(n - j, vec16_max(most, vec16_load_first(sh + j, n - j)), most);
        vec16 top = vec16_set1(vec16_reduce_max(most)), total = vec16_zero();
        for (int64_t j = 0; j < n; j += LANES) {
            vec16 e = exp_lanes(vec16_sub(vec16_load_first(sh + j, n - j), top));
            vec16_store_first(sh + j, e, n - j);
            total = vec16_add(total, vec16_first_else(n - j, e, vec16_zero()));
        }
        sums[h] = vec16_reduce_add(total);
    }
    /* the values weighted: even keys into acc, odd ones into odd (kept between blocks in acc_at [group, 2, dim]),
       added at the end */
    for (int64_t i = 0; i < group * 2 * LANES * nd; i++) acc_at[i] = 0.0f;
    int64_t pairs_end = n - n % 2;
    for (int64_t j0 = 0; j0 < pairs_end; j0 += VALUE_BLOCK) {
        int64_t j1 = j0 + VALUE_BLOCK < pairs_end ? j0 + VALUE_BLOCK : pairs_end;
        float_rows(v, key_at, j0, j1, n - 1, nd, bf16, widened, row);
        for (int64_t h = 0; h < group; h++) {
            const float *sh = s + h * stride;
            float *at = acc_at + h * 2 * LANES * nd;
            for (int d0 = 0; d0 < nd; d0 += VALUE_STEP) {  /* the dims whose sums fit the registers */
                const int dn = nd - d0 < VALUE_STEP ? nd - d0 : VALUE_STEP;
                vec16 acc[VALUE_STEP], odd[VALUE_STEP];
                for (int d = 0; d < dn; d++) {
                    acc[d] = vec16_load(at + LANES * (d0 + d));
                    odd[d] = vec16_load(at + LANES * (nd + d0 + d));
                }
                for (int64_t j = j0; j < j1; j += 2) {
                    vec16 w = vec16_set1(sh[j]), x = vec16_set1(sh[j + 1]);
                    for (int d = 0; d < dn; d++) {
                        acc[d] = vec16_fmadd(w, vec16_load(row[j - j0] + LANES * (d0 + d)), acc[d]);
                        odd[d] = vec16_fmadd(x, vec16_load(row[j + 1 - j0] + LANES * (d0 + d)), odd[d]);
                    }
                }
                for (int d = 0; d < dn; d++) {
                    vec16_store(at + LANES * (d0 + d), acc[d]);
                    vec16_store(at + LANES * (nd + d0 + d), odd[d]);
                }
            }
        }
    }
    for (int64_t h = 0; h < group; h++) {
        const float *at = acc_at + h * 2 * LANES * nd;
        vec16 sum = vec16_set1(sums[h]);
        for (int d = 0; d < nd; d++) {
            vec16 acc = vec16_load(at + LANES * d);
            if (n % 2)
                acc = vec16_fmadd(vec16_set1(s[h * stride + n - 1]),
                                  load_lanes(v + key_at[n - 1] + LANES * d * element, bf16), acc);
            vec16 both = vec16_add(acc, vec16_load(at + LANES * (nd + d)));
            vec16_store(o + h * LANES * nd + LANES * d, vec16_div(both, sum));
        }
    }
}

typedef void (*group_fn)(const float *, const char *, const char *, const int64_t *, int64_t, float, float *, int64_t,
                         float *, float *, float *, int64_t);
#define GROUP(nd, bf16)                                                                                           \
    static void group_##nd##_##bf16(const float *q, const char *k, const char *v, const int64_t *key_at, int64_t n, \
                                    float scale, float *s, int64_t stride, float *o, float *acc_at, float *widened, \
                                    int64_t group) {                                                              \
        attend_group(q, k, v, key_at, n, scale, s, stride, o, acc_at, widened, group, nd, bf16);                   \
    }
#define GROUPS(nd) GROUP(nd, 0) GROUP(nd, 1)
GROUPS(1) GROUPS(2) GROUPS(3) GROUPS(4) GROUPS(5) GROUPS(6) GROUPS(7) GROUPS(8)
GROUPS(9) GROUPS(10) GROUPS(11) GROUPS(12) GROUPS(13) GROUPS(14) GROUPS(15) GROUPS(16)
#define PAIR(nd) {group_##nd##_0, group_##nd##_1}
static const group_fn GROUP_FNS[MAX_DIM / LANES + 1][2] = {{0, 0}, PAIR(1), PAIR(2), PAIR(3), PAIR(4), PAIR(5),
    PAIR(6), PAIR(7), PAIR(8), PAIR(9), PAIR(10), PAIR(11), PAIR(12), PAIR(13), PAIR(14), PAIR(15), PAIR(16)};

/* out [tokens, heads, dim] for queries q [tokens, heads, dim] (float32): token t is at position positions[t] of
   sequence token_seqs[t], whose block table is block_tables[token_seqs[t]] (table_width entries). window 0: none. */
void paged_attention(const float *q, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t dim,
                     const void *k_cache, const void *v_cache, int bf16, int64_t block_size,
                     const int64_t *block_tables, int64_t table_width, const int64_t *token_seqs,
                     const int64_t *positions, int64_t window, float scale, float *out, int threads) {
    int64_t group = heads / kv_heads, element = bf16 ? 2 : 4, longest = 1;
    group_fn attend = GROUP_FNS[dim / LANES][bf16];
    for (int64_t t = 0; t < tokens; t++) longest = positions[t] + 1 > longest ? positions[t] + 1 : longest;
    if (window > 0 && window < longest) longest = window;
    int64_t stride = (longest + LANES - 1) / LANES * LANES;  /* a head's row of scores */
#pragma omp parallel num_threads(threads) if (tokens * kv_heads > 1)
    {
        float *s = malloc(sizeof(float) * stride * group), *acc_at = malloc(sizeof(float) * group * 2 * dim);
        float *widened = malloc(sizeof(float) * VALUE_BLOCK * dim);
        int64_t *key_at = malloc(sizeof(int64_t) * longest);
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int64_t g = 0; g < kv_heads; g++) {  /* a KV head's tokens one after another: its keys stay in cache */
            for (int64_t t = 0; t < tokens; t++) {
                int64_t p = positions[t], lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0, n = p - lo + 1;
                const int64_t *table = block_tables + token_seqs[t] * table_width;
                for (int64_t j = 0, block = lo / block_size, offset = lo % block_size; j < n; j++) {
                    key_at[j] = ((table[block] * block_size + offset) * kv_heads + g) * dim * element;
                    if (++offset == block_size) block++, offset = 0;
                }
                int64_t h = g * group;
                attend(q + (t * heads + h) * dim, k_cache, v_cache, key_at, n, scale, s, stride,
                       out + (t * heads + h) * dim, acc_at, widened, group);
            }
        }
        free(s);
        free(acc_at);
        free(widened);
        free(key_at);
    }
}
