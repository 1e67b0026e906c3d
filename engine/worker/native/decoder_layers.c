/* A Llama-family decoder's layers over one step's tokens in one call: for each layer, RMS norm, the q/k/v
   projection, the rotary embedding, the new keys and values into their cache slots, paged attention, the output
   projection and the residual; RMS norm, gate and up, SiLU(gate) * up, down and the residual. Python makes one call
   a step instead of some thirty torch operators a layer (fused_decoder.py).

   Every operation is the one the torch path runs where the native kernels load (llama.py with packed weights), in the
   same order and rounding, so the two give the same bits: the RMS norm (rms_norm.c), the integer matmuls over the
   activations quantized per 32 features (int8_matmul.c), paged attention (paged_attention.c), SiLU (silu_mul below,
   which the torch path calls too), and the plain float32 arithmetic of the rest, one rounding per operation as
   torch's elementwise kernels do it (-ffp-contract=off: no multiply-add is fused): a projection's bias added after
   its product; q and k rotated as x cos + rotate_half(x) sin; keys and values rounded to bfloat16 to nearest even
   as torch's cast does; residuals added. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simd16.h"

void quantize_rows(const float *x, int64_t M, int64_t K, int8_t *a, float *t, float *t_sum, float *t_halves,
                   int passes, int threads);
void matmul(const int8_t *a, const float *t, const float *t_sum, const float *t_halves, int64_t M, int64_t K,
            const uint8_t *weights, int bits, int64_t N, float *y, int passes, int threads);
void paged_attention(const float *q, int64_t tokens, int64_t heads, int64_t kv_heads, int64_t dim,
                     const void *k_cache, const void *v_cache, int bf16, int64_t block_size,
                     const int64_t *block_tables, int64_t table_width, const int64_t *token_seqs,
                     const int64_t *positions, int64_t window, float scale, float *out, int threads);
void rms_norm(const float *x, int64_t rows, int64_t size, const float *w, float eps, float *y, int threads);

#define GROUP 32

typedef struct {  /* one part of a packed linear layer: its panels (int8_matmul.c) and how its input meets them */
    const uint8_t *panels;
    int64_t out_features;
    int32_t bits, passes;
} Part;

typedef struct {  /* a linear layer: its parts side by side along the output features, and a bias or NULL */
    const Part *parts;
    int64_t num_parts, in_features, out_features;
    const float *bias;
} Linear;

typedef struct {
    const float *input_norm, *post_norm;  /* [hidden] */
    Linear qkv, o, gate_up, down;
    void *k_cache, *v_cache;  /* this layer's [blocks, block_size, kv_heads, dim], float32 or bfloat16 */
    int64_t window;           /* 0: the whole context */
} Layer;

typedef struct {
    int64_t hidden, heads, kv_heads, dim, intermediate, block_size;
    int32_t cache_bf16;
    float eps, scale;
    const float *cos, *sin;  /* the rotary tables [positions, dim] */
} Model;

typedef struct {  /* buffers for a step of T tokens, from the caller (sizes in floats, or bytes for codes) */
    float *h;       /* [T, max(hidden, heads * dim)]: a norm's output, a projection's */
    float *qkv;     /* [T, (heads + 2 kv_heads) dim] */
    float *q;       /* [T, heads * dim]: the queries, contiguous, then the attention's output reuses attn */
    float *attn;    /* [T, heads * dim] */
    float *part;    /* [T, widest output]: one part's product, when a layer has several */
    float *gu;      /* [T, 2 intermediate] */
    float *act;     /* [T, intermediate] */
    int8_t *codes;  /* [2 T, widest input] */
    float *scales;  /* [4, 2 T, widest input / 32] */
} Scratch;

typedef struct {
    int64_t tokens, table_width;
    const int64_t *positions, *slots, *token_seqs, *block_tables;
    float *x;  /* [tokens, hidden]: the residual stream, updated in place */
    int32_t threads;
} Step;

/* y = silu(gate) * up for rows [gate | up] of gu [rows, 2 n]: silu(g) = g / (1 + e^-g), with e^-|g| in 16 lanes (the
   Cephes expf of paged_attention.c's softmax) so the result is the same under AVX-512 and AVX2 */
static inline vec16 exp_nonpositive(vec16 x) {
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
    p = vec16_fmadd(vec16_mul(p, r), r, vec16_add(r, vec16_set1(1.0f)));
    return vec16_scale2(p, n);
}

void silu_mul(const float *gu, int64_t rows, int64_t n, float *y, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (rows * n > 65536)
    for (int64_t m = 0; m < rows; m++) {
        const float *gate = gu + m * 2 * n, *up = gate + n;
        for (int64_t j = 0; j < n; j += 16) {
            vec16 g = vec16_load_first(gate + j, n - j);
            vec16 e = exp_nonpositive(vec16_sub(vec16_zero(), vec16_abs(g)));  /* e^-|g| */
            vec16 one = vec16_set1(1.0f);
            /* sigmoid(g) = 1 / (1 + e^-g) for g >= 0, e^g / (1 + e^g) below: e^-|g| either way, never overflowing */
            vec16 s = vec16_div(vec16_where_negative(g, e, one), vec16_add(one, e));
            vec16_store_first(y + m * n + j, vec16_mul(vec16_mul(g, s), vec16_load_first(up + j, n - j)), n - j);
        }
    }
}

/* y [T, out_features] = x [T, in_features] through a packed linear layer: each part's product (its input quantized
   once for each number of passes its parts take), side by side, then the bias */
static void linear(const Linear *l, const float *x, int64_t T, float *y, const Scratch *v, int threads) {
    int64_t K = l->in_features, G = K / GROUP, at = 0;
    int quantized_passes = 0;
    for (int64_t p = 0; p < l->num_parts; p++) {
        const Part *part = &l->parts[p];
        int64_t rows = T * part->passes;
        float *t = v->scales, *t_sum = t + rows * G, *t_halves = t_sum + rows * G;
        if (part->passes != quantized_passes) {
            quantize_rows(x, T, K, v->codes, t, t_sum, t_halves, part->passes, threads);
            quantized_passes = part->passes;
        }
        float *out = l->num_parts == 1 ? y : v->part;
        matmul(v->codes, t, t_sum, t_halves, rows, K, part->panels, part->bits, part->out_features, out,
               part->passes, threads);
        if (l->num_parts > 1)
            for (int64_t r = 0; r < T; r++)
                memcpy(y + r * l->out_features + at, out + r * part->out_features, sizeof(float) * part->out_features);
        at += part->out_features;
    }
    if (l->bias != NULL)
        for (int64_t r = 0; r < T; r++)
            for (int64_t j = 0; j < l->out_features; j++) y[r * l->out_features + j] += l->bias[j];
}

/* head [dim] rotated at position p: x cos + rotate_half(x) sin, rotate_half(x) = (-x[dim/2:], x[:dim/2]) */
static void rotate(float *head, const float *cos, const float *sin, int64_t dim) {
    int64_t half = dim / 2;
    float rotated[512];
    for (int64_t j = 0; j < half; j++) rotated[j] = -head[j + half];
    for (int64_t j = half; j < dim; j++) rotated[j] = head[j - half];
    for (int64_t j = 0; j < dim; j++) {
        float a = head[j] * cos[j], b = rotated[j] * sin[j];
        head[j] = a + b;
    }
}

/* bfloat16 of a float, to nearest even (as torch's cast: NaN stays NaN) */
static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static void store_kv(const Model *m, const Layer *layer, const Step *s, const float *qkv) {
    int64_t q_size = m->heads * m->dim, kv_size = m->kv_heads * m->dim, width = q_size + 2 * kv_size;
    for (int64_t t = 0; t < s->tokens; t++) {
        const float *k = qkv + t * width + q_size, *v = k + kv_size;
        int64_t at = s->slots[t] * kv_size;
        if (m->cache_bf16) {
            uint16_t *kc = (uint16_t *)layer->k_cache + at, *vc = (uint16_t *)layer->v_cache + at;
            for (int64_t j = 0; j < kv_size; j++) kc[j] = to_bf16(k[j]), vc[j] = to_bf16(v[j]);
        } else {
            memcpy((float *)layer->k_cache + at, k, sizeof(float) * kv_size);
            memcpy((float *)layer->v_cache + at, v, sizeof(float) * kv_size);
        }
    }
}

static void attention_block(const Model *m, const Layer *layer, const Step *s, const Scratch *v) {
    int64_t T = s->tokens, q_size = m->heads * m->dim, width = q_size + 2 * m->kv_heads * m->dim;
    rms_norm(s->x, T, m->hidden, layer->input_norm, m->eps, v->h, s->threads);
    linear(&layer->qkv, v->h, T, v->qkv, v, s->threads);
    for (int64_t t = 0; t < T; t++) {
        const float *cos = m->cos + s->positions[t] * m->dim, *sin = m->sin + s->positions[t] * m->dim;
        for (int64_t h = 0; h < m->heads + m->kv_heads; h++) rotate(v->qkv + t * width + h * m->dim, cos, sin, m->dim);
    }
    store_kv(m, layer, s, v->qkv);
    for (int64_t t = 0; t < T; t++)  /* the queries, contiguous, as the attention takes them */
        memcpy(v->q + t * q_size, v->qkv + t * width, sizeof(float) * q_size);
    paged_attention(v->q, T, m->heads, m->kv_heads, m->dim, layer->k_cache, layer->v_cache, m->cache_bf16,
                    m->block_size, s->block_tables, s->table_width, s->token_seqs, s->positions, layer->window,
                    m->scale, v->attn, s->threads);
    linear(&layer->o, v->attn, T, v->h, v, s->threads);
    for (int64_t j = 0; j < T * m->hidden; j++) s->x[j] = s->x[j] + v->h[j];
}

static void mlp_block(const Model *m, const Layer *layer, const Step *s, const Scratch *v) {
    int64_t T = s->tokens;
    rms_norm(s->x, T, m->hidden, layer->post_norm, m->eps, v->h, s->threads);
    linear(&layer->gate_up, v->h, T, v->gu, v, s->threads);
    silu_mul(v->gu, T, m->intermediate, v->act, s->threads);
    linear(&layer->down, v->act, T, v->h, v, s->threads);
    for (int64_t j = 0; j < T * m->hidden; j++) s->x[j] = s->x[j] + v->h[j];
}

void decoder_layers(const Model *m, const Layer *layers, int64_t num_layers, const Step *s, const Scratch *v) {
    for (int64_t i = 0; i < num_layers; i++) {
        attention_block(m, &layers[i], s, v);
        mlp_block(m, &layers[i], s, v);
    }
}
